"""The groups a layout's communication runs on: which tiers each TP, CP, EP and DP group spans.

Computed once per layout (``Spans.of``), or as a bound over every rank order (``Spans.packed``:
each group on consecutive ranks; on a TPU torus the least over orders and slice shapes).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import permutations
from typing import Any

from paraplan.cost.comm import GroupSpan, group_span, packed_span
from paraplan.cost.ep import ep_span, expert_dp_span, expert_shard_degree
from paraplan.cost.plan import DEFAULT_ORDER, Axis, Layout
from paraplan.cost.torus import torus_floor
from paraplan.hardware import Cluster, Tier

__all__ = ["SharedCache", "Spans"]

SharedCache = dict[tuple[object, ...], Any]  # per-layout work and sync lines shared across stages


@dataclass(frozen=True, slots=True)
class Spans:
    """The groups a layout's communication runs on (computed once per layout)."""

    tp: GroupSpan
    cp: GroupSpan
    ep: GroupSpan | None  # ep > 1
    dp: GroupSpan | None  # dp x cp, when ZeRO-2/3 moves traffic every micro-batch
    edp: GroupSpan | None  # expert-data-parallel, likewise
    sync: GroupSpan  # dp x cp: the once-per-step gradient sync
    esync: GroupSpan  # expert-data-parallel sync (dp x cp / ep ranks holding the same experts)
    pp: Tier | None  # outermost tier between neighbouring stages (pp > 1)

    @classmethod
    def of(cls, plan: Layout, cluster: Cluster) -> Spans:
        zero = plan.zero >= 2
        sync = group_span(cluster, plan, Axis.DP, Axis.CP)
        esync = expert_dp_span(cluster, plan)
        return cls(
            tp=group_span(cluster, plan, Axis.TP),
            cp=group_span(cluster, plan, Axis.CP),
            ep=ep_span(cluster, plan) if plan.ep > 1 else None,
            dp=sync if zero else None,
            edp=esync if zero else None,
            sync=sync,
            esync=esync,
            pp=group_span(cluster, plan, Axis.PP).outermost if plan.pp > 1 else None,
        )

    @classmethod
    def torus_floor(cls, plan: Layout, cluster: Cluster) -> Spans:
        """TPU torus: each group's cost terms at their least over every rank order of the active
        axes and every slice shape (cost/torus.py ``torus_floor``); collectives are sums of those
        terms, so costs on these spans bound every placement's."""
        assert cluster.torus is not None
        active = [a for a in DEFAULT_ORDER if plan.degree(a) > 1]
        idle = tuple(a for a in DEFAULT_ORDER if plan.degree(a) == 1)
        every: list[Spans] = []
        for shape in cluster.torus.shapes:
            for perm in permutations(active):
                try:
                    every.append(cls.of(replace(plan, order=perm + idle, torus_shape=shape), cluster))
                except ValueError:
                    continue  # an order the expert-parallel split does not allow

        def floor(field: str) -> GroupSpan | None:
            spans = [getattr(s, field) for s in every if getattr(s, field) is not None]
            if not spans:
                return None
            fewest = min(spans, key=lambda s: (s.torus.slices, s.fan_in))
            return replace(fewest, latency_floor=True, torus=torus_floor([s.torus for s in spans]))

        sync, esync = floor("sync"), floor("esync")
        assert sync is not None and esync is not None
        return cls(
            tp=floor("tp") or every[0].tp,
            cp=floor("cp") or every[0].cp,
            ep=floor("ep"),
            dp=floor("dp"),
            edp=floor("edp"),
            sync=sync,
            esync=esync,
            pp=cluster.tiers[0] if plan.pp > 1 else None,
        )

    @classmethod
    def packed(cls, plan: Layout, cluster: Cluster, shared: SharedCache | None = None) -> Spans:
        """Every group on consecutive ranks, as if each were innermost in the rank order: when
        inner tiers are the fastest (``inner_tiers_fastest``) no placement of the group costs less
        (its members fill the fastest domains first), so costs on these spans bound every order's.
        On a TPU torus: ``torus_floor`` (kept in ``shared`` per degrees; ZeRO-2/3 keep the
        per-micro-batch dp groups, lower stages drop them)."""
        if cluster.torus is not None:
            key = ("torus_floor", plan.tp, plan.cp, plan.dp, plan.pp, plan.ep, plan.etp)
            if shared is None or key not in shared:
                floor = cls.torus_floor(replace(plan, zero=3), cluster)
                if shared is None:
                    return floor if plan.zero >= 2 else replace(floor, dp=None, edp=None)
                shared[key] = floor
            return shared[key] if plan.zero >= 2 else replace(shared[key], dp=None, edp=None)

        packed_key: tuple[object, ...] = (
            "packed",
            plan.tp,
            plan.cp,
            plan.ep,
            plan.dp * plan.cp,
            expert_shard_degree(plan),
            plan.zero >= 2,
            plan.pp > 1,
        )
        if shared is not None and packed_key in shared:
            found: Spans = shared[packed_key]
            return found

        def packed(size: int) -> GroupSpan:
            return packed_span(cluster, size)

        zero = plan.zero >= 2
        sync = packed(plan.dp * plan.cp)
        esync = packed(expert_shard_degree(plan))
        spans = cls(
            tp=packed(plan.tp),
            cp=packed(plan.cp),
            ep=packed(plan.ep) if plan.ep > 1 else None,
            dp=sync if zero else None,
            edp=esync if zero else None,
            sync=sync,
            esync=esync,
            pp=cluster.tiers[0] if plan.pp > 1 else None,
        )
        if shared is not None:  # a function of the degrees alone (one cluster per cache)
            shared[packed_key] = spans
        return spans

    def key(self) -> tuple[object, ...]:
        """What per-micro-batch block costs depend on."""
        return tuple(
            (s.fan_in, s.latency_floor, s.torus) if s else None
            for s in (self.tp, self.cp, self.ep, self.dp, self.edp)
        )
