"""Rank orders and slice shapes of a layout family: the placements the search weighs.

An order is a permutation of the axes with degree > 1, innermost first (pp stays outermost on a
pooled cluster). Each order gives every group (tp, cp, dp x cp, pp; ep and expert-dp under expert
parallelism) a latency and a seconds-per-byte on the tiers it spans (cost/comm.py; on a TPU torus
every term of its cost, cost/torus.py); all communication costs grow with each, so an order no
better on any of them than another is dropped, equal profiles keeping the order nearest
Megatron's default tp-cp-dp-pp. On a pooled cluster the profile covers every used pool. On a TPU
cluster whose slices may take several shapes (hardware/tpu.py), the orders of every shape are
pruned jointly. Under a layout filter the orders a family fails are removed before profiles are
compared. Orders depend on the degrees, cp_comm and pools only, so a cache keeps them across the
families that share those (``OrderCache``).
"""

from __future__ import annotations

from dataclasses import replace
from itertools import permutations
from math import factorial
from typing import TYPE_CHECKING, Any

from paraplan.cost import DEFAULT_ORDER, Axis, Layout, allgather_s, group_span
from paraplan.cost.comm import alltoall_s, p2p_s
from paraplan.cost.derive import derive
from paraplan.cost.ep import ep_span, expert_dp_span
from paraplan.cost.plan import plan_key
from paraplan.cost.torus import torus_profile
from paraplan.cost.validity import ep_follows_order
from paraplan.hardware import Cluster

if TYPE_CHECKING:
    from paraplan.cost.plan import PartialPlan
    from paraplan.solver.space import Options

__all__ = [
    "COUNT_IGNORE",
    "OrderCache",
    "placements",
    "orders",
    "num_orders",
]


OrderCache = dict[tuple[object, ...], Any]  # a family's degrees -> its rank orders (or their count)


_ORDERS_IGNORE = frozenset(
    {
        "vp",
        "micro_batch",
        "zero",
        "sequence_parallel",
        "recompute",
        "layers_per_stage",
        "layers_per_chunk",
        "order",
    }
)
"""Rank orders depend on the degrees, cp_comm and pools only (a layout filter sees the whole family)."""
COUNT_IGNORE = _ORDERS_IGNORE | {"etp", "cp_comm"}
"""What ``num_orders`` does not read (the candidate orders before any pruning)."""


def _comm_profile(
    cluster: Cluster, plan: Layout, expert_tps: tuple[int | None, ...] = (None,)
) -> tuple[float, ...]:
    """(latency, seconds per byte) of each group's collectives under the plan's order; the
    expert-data-parallel group once per expert TP degree searched."""
    profile: list[float] = []
    for axes in ((Axis.TP,), (Axis.CP,), (Axis.DP, Axis.CP), (Axis.DP,), (Axis.PP,)):
        span = group_span(cluster, plan, *axes)
        alpha = allgather_s(span, 0.0)
        profile += [alpha, allgather_s(span, 1.0) - alpha]
        if span.torus is not None:  # costs max(a n, b) + c + d n: compare every term
            profile += torus_profile(span.torus)
        tier = span.outermost
        profile += [p2p_s(tier, 0.0), p2p_s(tier, 1.0) - p2p_s(tier, 0.0)]
    if plan.ep > 1:
        a2a = ep_span(cluster, plan)
        profile += [alltoall_s(a2a, 0.0), alltoall_s(a2a, 1.0) - alltoall_s(a2a, 0.0)]
        if a2a.torus is not None:
            profile += torus_profile(a2a.torus)
    for expert_plan in (replace(plan, etp=etp) for etp in expert_tps):
        if expert_plan.ep > 1 or expert_plan.expert_tp < expert_plan.tp:
            edp = expert_dp_span(cluster, expert_plan)
            alpha = allgather_s(edp, 0.0)
            profile += [alpha, allgather_s(edp, 1.0) - alpha]
            if edp.torus is not None:
                profile += torus_profile(edp.torus)
    return tuple(profile)


def _profile(
    cluster: Cluster, plan: Layout, expert_tps: tuple[int | None, ...] = (None,)
) -> tuple[float, ...]:
    """_comm_profile, concatenated over the used pools on a pooled cluster."""
    if not plan.stage_pools:
        return _comm_profile(cluster, plan, expert_tps)
    out: tuple[float, ...] = ()
    for p in sorted(set(plan.stage_pools)):
        local = replace(plan.layout, pp=plan.stage_pools.count(p), stage_pools=())
        out += _comm_profile(cluster.pools[p], local, expert_tps)
    return out


def _dominated(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    """b is no worse than a anywhere (a can be dropped)."""
    return all(y <= x * (1 + 1e-12) for x, y in zip(a, b, strict=True))


def _canonical(active_order: tuple[Axis, ...]) -> tuple[Axis, ...]:
    """The order with ``active_order`` for the axes of degree > 1 and every idle axis in its
    default slot (idle axes do not change any group): (dp,) -> tp-cp-dp-pp, (pp, dp) -> tp-cp-pp-dp."""
    idle = [a for a in DEFAULT_ORDER if a not in active_order]
    slots: list[Axis | None] = [a if a in idle else None for a in DEFAULT_ORDER]
    it = iter(active_order)
    return tuple(a if a is not None else next(it) for a in slots)


def _candidate_orders(plan: Layout, fixed: PartialPlan, options: Options) -> list[tuple[Axis, ...]]:
    """Distinct rank orders (permutations of the axes of degree > 1), Megatron's nearest first;
    pp stays outermost on a pooled cluster."""
    pooled = bool(plan.stage_pools)
    if fixed.order is not None:
        if pooled and fixed.order[-1] is not Axis.PP:
            return []
        return [fixed.order] if plan.ep == 1 or ep_follows_order(plan, fixed.order) else []
    if not options.search_placement:
        return [DEFAULT_ORDER] if plan.ep == 1 or ep_follows_order(plan, DEFAULT_ORDER) else []
    active = [a for a in DEFAULT_ORDER if plan.degree(a) > 1]
    tail = (Axis.PP,) if pooled and Axis.PP in active else ()  # pooled: pp stays outermost
    movable = [a for a in active if a not in tail]
    candidates = [
        o
        for o in (_canonical(p + tail) for p in permutations(movable))
        if plan.ep == 1 or ep_follows_order(plan, o)
    ]
    return sorted(candidates, key=lambda o: [DEFAULT_ORDER.index(a) for a in o])


def _orders(
    plan: Layout,
    cluster: Cluster,
    fixed: PartialPlan,
    options: Options,
    prune: bool = True,
    expert_tps: tuple[int | None, ...] = (None,),
    family: Layout | None = None,
    cache: OrderCache | None = None,
) -> list[tuple[Axis, ...]]:
    """Placements worth searching: one per non-dominated communication profile (all distinct
    ones when ``prune`` is off), the profile covering every expert TP degree in ``expert_tps``.
    Under a layout filter, the orders ``family`` fails are removed before any comparison."""
    if cache is None:
        candidates = _candidate_orders(plan, fixed, options)
    else:  # the same for every family with ``plan``'s degrees (one search's fixed and options)
        found = cache.get(("candidates", plan))
        if found is None:
            found = cache["candidates", plan] = _candidate_orders(plan, fixed, options)
        candidates = found
    if prune and options.layout_limits is not None and family is not None:
        return _orders_by_limits(candidates, plan, cluster, fixed, options, expert_tps, family, cache)
    if options.layout_filter is not None and family is not None:
        candidates = [o for o in candidates if options.layout_filter(replace(family, order=o))]
    if len(candidates) <= 1:
        return candidates
    profiles = [(o, _profile(cluster, replace(plan, order=o), expert_tps)) for o in candidates]
    limits = options.layout_limits

    def signature(order: tuple[Axis, ...]) -> object:
        """Under per-layout limits an order is only compared with orders searched under the same
        ones (a faster order a narrower framework runs does not stand for a wider one)."""
        return limits(replace(family, order=order)) if limits is not None and family is not None else None

    if not prune:
        distinct: dict[tuple[object, ...], tuple[Axis, ...]] = {}
        for order, prof in profiles:
            distinct.setdefault((prof, signature(order)), order)
        return list(distinct.values())
    kept: list[tuple[tuple[Axis, ...], tuple[float, ...], object]] = []
    for order, prof in profiles:
        sig = signature(order)
        if any(_dominated(prof, other) and s == sig for _, other, s in kept):
            continue
        kept = [(o, p, s) for o, p, s in kept if not (s == sig and _dominated(p, prof))]
        kept.append((order, prof, sig))
    return [o for o, _, _ in kept]


def _orders_by_limits(
    candidates: list[tuple[Axis, ...]],
    plan: Layout,
    cluster: Cluster,
    fixed: PartialPlan,
    options: Options,
    expert_tps: tuple[int | None, ...],
    family: Layout,
    cache: OrderCache | None,
) -> list[tuple[Axis, ...]]:
    """``_orders`` under per-layout limits (Options.layout_limits): an order is dropped when
    another it is no better than is searched under the same limits, or under limits that hold
    the whole search's per-stage space (limits.spans_search: then it holds any order's); an
    order such a one dominates is dropped before the filter is asked about it. So is one that
    such an order of the family's ZeRO-1 / SP-on twin dominates (limits.twins: never slower,
    never larger, so that twin layout is no worse than the order's own twin, nor that than it).
    ``cache`` keeps the profiles of the family's degrees and each family's kept orders."""
    from paraplan.solver.limits import twins  # limits imports space, space this

    limits, layout_filter = options.layout_limits, options.layout_filter
    assert limits is not None and layout_filter is not None
    by_order = options.order_limits(family) if options.order_limits is not None else None
    key = ("profiles", plan, expert_tps)
    profiles = cache.get(key) if cache is not None else None
    if profiles is None:
        profiles = [(o, _profile(cluster, derive(plan, order=o), expert_tps)) for o in candidates]
        if cache is not None:
            cache[key] = profiles
    wide_twins: list[tuple[float, ...]] = []  # profiles of the twins' orders searched under it all
    if cache is not None:
        for twin in twins(family, fixed):
            orders(twin, cluster, fixed, options, cache=cache)
            wide_twins += [p for _, p, _, wide in cache[("kept", *plan_key(twin, frozenset()))] if wide]
    kept: list[tuple[tuple[Axis, ...], tuple[float, ...], object, bool]] = []
    for order, prof in profiles:
        if any(_dominated(prof, other) for other in wide_twins):
            continue
        if any(wide and _dominated(prof, other) for _, other, _, wide in kept):
            continue
        if by_order is not None:  # the same verdicts, no layout built (Options.order_limits)
            sig = by_order(order)
            if not sig:
                continue
        else:
            layout = derive(family, order=order)
            if not layout_filter(layout):
                continue
            sig = limits(layout)
        if any(_dominated(prof, other) and s == sig for _, other, s, _ in kept):
            continue
        wide = _spans_search(options, sig, cache)
        kept = [k for k in kept if not ((wide or k[2] == sig) and _dominated(k[1], prof))]
        kept.append((order, prof, sig, wide))
    if cache is not None:
        cache[("kept", *plan_key(family, frozenset()))] = kept
    return [k[0] for k in kept]


def _spans_search(options: Options, sig: tuple[Any, ...], cache: OrderCache | None) -> bool:
    """limits.spans_search, remembered per limits in ``cache`` (one search's options)."""
    from paraplan.solver.limits import spans_search  # limits imports space, space this

    key = ("spans", sig)
    if cache is None:
        return spans_search(options, sig)
    if key not in cache:
        cache[key] = spans_search(options, sig)
    return bool(cache[key])


def _shapes(cluster: Cluster, fixed: PartialPlan) -> tuple[tuple[int, ...], ...]:
    """Slice shapes to weigh: a TPU cluster's (hardware/tpu.py; the fixed one if given), else ()."""
    torus = cluster.torus
    if torus is None or fixed.torus_shape is not None or len(torus.shapes) <= 1:
        return ()
    return torus.shapes


def _placement_base(family: Layout) -> Layout:
    """The family's degrees, pools and slice shape (micro-batch 1, ZeRO and SP at their
    defaults): what a rank order's communication terms depend on."""
    return Layout(
        dp=family.dp,
        tp=family.tp,
        pp=family.pp,
        cp=family.cp,
        ep=family.ep,
        etp=family.etp,
        micro_batch=1,
        stage_pools=family.stage_pools,
        torus_shape=family.torus_shape,
    )


def placements(
    family: Layout,
    cluster: Cluster,
    fixed: PartialPlan,
    options: Options,
    *,
    prune_dominated: bool = True,
    cache: OrderCache | None = None,
) -> list[tuple[tuple[Axis, ...], tuple[int, ...]]]:
    """(rank order, slice shape) pairs of a family. On a TPU cluster whose slices may take several
    shapes (optical circuit switching, hardware/tpu.py), the orders of every shape, pruned
    jointly: a placement no better than another one, of any shape, on every communication term
    of ``_comm_profile`` is dropped (ties keep the earlier shape, the most cubic first).
    Elsewhere: ``orders`` with the family's own shape."""
    shapes = _shapes(cluster, fixed)
    if not shapes:
        return [
            (o, family.torus_shape)
            for o in orders(family, cluster, fixed, options, prune_dominated=prune_dominated, cache=cache)
        ]
    ignore = frozenset() if options.layout_filter else _ORDERS_IGNORE | {"torus_shape"}
    key = ("placements", prune_dominated, *plan_key(family, ignore))
    if cache is not None and key in cache:
        return cache[key]
    pairs = [
        (o, s)
        for s in shapes
        for o in orders(
            replace(family, torus_shape=s),
            cluster,
            fixed,
            options,
            prune_dominated=prune_dominated,
            cache=cache,
        )
    ]
    if prune_dominated and len(pairs) > 1:
        base = _placement_base(family)
        kept: list[tuple[tuple[tuple[Axis, ...], tuple[int, ...]], tuple[float, ...], object]] = []
        limits = options.layout_limits
        for pair in pairs:
            prof = _profile(cluster, replace(base, order=pair[0], torus_shape=pair[1]), (family.etp,))
            sig = limits(replace(family, order=pair[0], torus_shape=pair[1])) if limits is not None else None
            if any(_dominated(prof, other) and s == sig for _, other, s in kept):
                continue
            kept = [(q, p, s) for q, p, s in kept if not (s == sig and _dominated(p, prof))]
            kept.append((pair, prof, sig))
        pairs = [q for q, _, _ in kept]
    if cache is not None:
        cache[key] = pairs
    return pairs


def orders(
    family: Layout,
    cluster: Cluster,
    fixed: PartialPlan,
    options: Options,
    *,
    prune_dominated: bool = True,
    cache: OrderCache | None = None,
) -> list[tuple[Axis, ...]]:
    """Rank orders of a family (module docstring); ``cache`` keeps them across families with the
    same degrees. Under a layout filter, the orders are those ``family`` (with its ZeRO stage)
    passes."""
    filtered = options.layout_filter is not None
    key = (prune_dominated, *plan_key(family, frozenset() if filtered else _ORDERS_IGNORE))
    if cache is not None and key in cache:
        return cache[key]
    base = _placement_base(family)
    out = _orders(base, cluster, fixed, options, prune_dominated, (family.etp,), family, cache)
    if cache is not None:
        cache[key] = out
    return out


def num_orders(family: Layout, fixed: PartialPlan, options: Options, cache: OrderCache | None = None) -> int:
    """Rank orders of a family before dominance pruning (the size of the placement space)."""
    if family.ep == 1 and fixed.order is None and options.search_placement and not family.stage_pools:
        return factorial(sum(1 for a in DEFAULT_ORDER if family.degree(a) > 1))
    key = ("count", *plan_key(family, COUNT_IGNORE))
    if cache is None or key not in cache:
        count = len(_candidate_orders(family, fixed, options))
        if cache is None:
            return count
        cache[key] = count
    return cache[key]
