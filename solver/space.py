"""The search space: every layout (degrees, micro-batch, ZeRO, SP, rank order) a plan may take.

A *layout* fixes everything but the per-stage choices (layers per stage, recompute per stage),
which the CP-SAT model decides. Domains, each filtered by the scenario's fixed knobs:
- tp: divisors of the device count that divide the heads, with tp | kv_heads or kv_heads | tp;
- cp: powers of two with seq_len / cp even (causal load balance needs 2*cp chunks);
- pp: divisors of devices / (tp*cp), at most the layer count; dp = devices / (tp*cp*pp);
- ep (mixture-of-experts models only, else 1): divisors of both dp*cp and the expert count that
  split along the rank order (ep divides, or is a multiple of, the inner of cp and dp: the EP
  group is the innermost ep ranks of dp x cp, cost/ep.py); tp > 1 forces sequence parallelism;
- etp (mixture-of-experts models with tp > 1, else unset): tp or 1 (cost/ep.py);
- cp_comm (cp > 1, else p2p): p2p or all_gather (cost/cp.py); all_gather only when the CP group
  spans more than one tier (on one tier it is dominated: _cp_comms);
- micro_batch: divisors of global_batch / dp up to ``solver.max_micro_batch``;
- vp: 1..``solver.max_vp`` when pp > 1, micro-batches a multiple of pp, layers >= pp*vp;
- zero: 0..3 (all collapse to 0 when dp*cp = 1: nothing to shard). ZeRO-0 is dropped when ZeRO-1
  is allowed: in the cost model it is never faster (RS + bf16 AG <= AR; sharded optimizer step)
  and never smaller;
- sequence_parallel: on when tp > 1 (it moves the same bytes as plain TP and never stores more;
  a fixed ``plan.sequence_parallel`` overrides);
- order: permutations of the axes with degree > 1. Each order gives every group (tp, cp, dp x cp,
  pp; ep and expert-dp under expert parallelism) a latency and a seconds-per-byte on the tiers it
  spans (cost/comm.py); all communication costs grow with both, so an order no better on any of
  them than another is dropped (equal profiles keep the order nearest Megatron's default
  tp-cp-dp-pp).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import permutations

from paraplan.cost import DEFAULT_ORDER, Axis, CPComm, Plan, Recompute, allgather_s, group_span
from paraplan.cost.comm import alltoall_s, p2p_s
from paraplan.cost.ep import ep_span, expert_dp_span
from paraplan.cost.plan import expert_axes
from paraplan.graph import ModelSpec
from paraplan.hardware import Cluster

__all__ = ["Fixed", "Options", "layouts", "divisors"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Fixed:
    """Knobs the scenario fixes (None = free)."""

    dp: int | None = None
    tp: int | None = None
    pp: int | None = None
    cp: int | None = None
    ep: int | None = None
    etp: int | None = None
    cp_comm: CPComm | None = None
    vp: int | None = None
    micro_batch: int | None = None
    zero: int | None = None
    sequence_parallel: bool | None = None
    recompute: tuple[Recompute, ...] | None = None
    layers_per_stage: tuple[int, ...] | None = None
    order: tuple[Axis, ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    allow_uneven_stages: bool = True
    search_placement: bool = True
    max_micro_batch: int = 8
    max_vp: int = 4


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _allowed(value: int, fixed: int | None) -> bool:
    return fixed is None or value == fixed


def _tp_ok(tp: int, spec: ModelSpec) -> bool:
    return spec.num_heads % tp == 0 and (spec.num_kv_heads % tp == 0 or tp % spec.num_kv_heads == 0)


def _comm_profile(cluster: Cluster, plan: Plan,
                  expert_tps: tuple[int | None, ...] = (None,)) -> tuple[float, ...]:
    """(latency, seconds per byte) of each group's collectives under the plan's order; the
    expert-data-parallel group once per expert TP degree searched."""
    profile: list[float] = []
    for axes in ((Axis.TP,), (Axis.CP,), (Axis.DP, Axis.CP), (Axis.DP,), (Axis.PP,)):
        span = group_span(cluster, plan, *axes)
        alpha = allgather_s(span, 0.0)
        profile += [alpha, allgather_s(span, 1.0) - alpha]
        tier = span.outermost
        profile += [p2p_s(tier, 0.0), p2p_s(tier, 1.0) - p2p_s(tier, 0.0)]
    if plan.ep > 1:
        a2a = ep_span(cluster, plan)
        profile += [alltoall_s(a2a, 0.0), alltoall_s(a2a, 1.0) - alltoall_s(a2a, 0.0)]
    for expert_plan in (replace(plan, etp=etp) for etp in expert_tps):
        if expert_plan.ep > 1 or expert_plan.expert_tp < expert_plan.tp:
            edp = expert_dp_span(cluster, expert_plan)
            alpha = allgather_s(edp, 0.0)
            profile += [alpha, allgather_s(edp, 1.0) - alpha]
    return tuple(profile)


def _ep_ok(plan: Plan) -> bool:
    """The EP group splits along the rank order: ep divides, or is a multiple of, the inner of
    cp and dp (cost.plan.check_expert_parallel)."""
    inner, _ = expert_axes(plan)
    return plan.ep % inner == 0 or inner % plan.ep == 0


def _eps(spec: ModelSpec, dp: int, cp: int, fixed: Fixed) -> list[int]:
    """Expert-parallel degrees: 1 for dense models; else divisors of dp*cp and of the experts."""
    if not spec.is_moe:
        return [1] if fixed.ep in (None, 1) else []
    return [e for e in divisors(dp * cp) if spec.num_experts % e == 0 and _allowed(e, fixed.ep)]


def _etps(spec: ModelSpec, tp: int, fixed: Fixed) -> list[int | None]:
    """Expert tensor-parallel degrees: tp and 1 for MoE models with tp > 1; unset otherwise."""
    if not spec.is_moe or tp == 1:
        return [None] if fixed.etp in (None, tp, 1) else []
    return [e for e in (tp, 1) if _allowed(e, fixed.etp)]


def _cp_comms(plan: Plan, cluster: Cluster, fixed: Fixed, prune: bool) -> list[CPComm]:
    """K/V exchange variants: the fixed one if given; p2p (moot) when cp = 1; else both, except
    that all_gather is dropped when the CP group spans one tier: there a one-tier all-gather of
    cp chunks, (cp-1)(alpha + c/B), equals the ring's busy time, all of it exposed, and it adds
    the gathered K/V buffer (cost/cp.py), so it is never faster nor smaller."""
    if fixed.cp_comm is not None:
        return [fixed.cp_comm]
    if plan.cp == 1:
        return [CPComm.P2P]
    tiers = sum(f > 1 for f in group_span(cluster, plan, Axis.CP).fan_in)
    if prune and tiers <= 1:
        return [CPComm.P2P]
    return [CPComm.P2P, CPComm.ALL_GATHER]


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


def _orders(plan: Plan, cluster: Cluster, fixed: Fixed, options: Options,
            prune: bool = True, expert_tps: tuple[int | None, ...] = (None,)
            ) -> list[tuple[Axis, ...]]:
    """Placements worth searching: one per non-dominated communication profile (all distinct
    ones when ``prune`` is off), the profile covering every expert TP degree searched."""
    if fixed.order is not None:
        return [fixed.order] if plan.ep == 1 or _ep_ok(replace(plan, order=fixed.order)) else []
    if not options.search_placement:
        return [DEFAULT_ORDER] if plan.ep == 1 or _ep_ok(plan) else []
    active = [a for a in DEFAULT_ORDER if plan.degree(a) > 1]
    candidates = [o for o in (_canonical(p) for p in permutations(active))
                  if plan.ep == 1 or _ep_ok(replace(plan, order=o))]
    candidates.sort(key=lambda o: [DEFAULT_ORDER.index(a) for a in o])
    profiles = [(o, _comm_profile(cluster, replace(plan, order=o), expert_tps))
                for o in candidates]
    if not prune:
        distinct: dict[tuple[float, ...], tuple[Axis, ...]] = {}
        for order, prof in profiles:
            distinct.setdefault(prof, order)
        return list(distinct.values())
    kept: list[tuple[tuple[Axis, ...], tuple[float, ...]]] = []
    for order, prof in profiles:
        if any(_dominated(prof, other) for _, other in kept):
            continue
        kept = [(o, p) for o, p in kept if not _dominated(p, prof)]
        kept.append((order, prof))
    return [o for o, _ in kept]


def layouts(spec: ModelSpec, cluster: Cluster, seq_len: int, global_batch: int,
            fixed: Fixed, options: Options, *, prune_dominated: bool = True) -> list[Plan]:
    """Every layout of the space, as Plans whose recompute/layers_per_stage are placeholders.

    ``prune_dominated=False`` keeps ZeRO-0 and every distinct placement (the exhaustive baseline
    uses it, so the oracle tests check that the pruning is exact)."""
    n = cluster.num_devices
    out: list[Plan] = []
    cps = [c for c in (1, 2, 4, 8, 16, 32, 64)
           if n % c == 0 and seq_len % (2 * c) == 0 and _allowed(c, fixed.cp)]
    if fixed.cp is not None and fixed.cp not in cps:
        cps = []
    for tp in divisors(n):
        if not (_tp_ok(tp, spec) and _allowed(tp, fixed.tp)):
            continue
        for cp in cps:
            if (n // tp) % cp:
                continue
            for pp in divisors(n // (tp * cp)):
                dp = n // (tp * cp * pp)
                if pp > spec.num_layers or not _allowed(pp, fixed.pp) or not _allowed(dp, fixed.dp):
                    continue
                if global_batch % dp:
                    continue
                for ep in _eps(spec, dp, cp, fixed):
                    out += _layouts_of(spec, cluster, global_batch, dp, tp, pp, cp, ep, fixed,
                                       options, prune_dominated)
    return out


def _layouts_of(spec: ModelSpec, cluster: Cluster, global_batch: int, dp: int, tp: int, pp: int,
                cp: int, ep: int, fixed: Fixed, options: Options, prune: bool) -> list[Plan]:
    out: list[Plan] = []
    per_replica = global_batch // dp
    mbs = [mb for mb in divisors(per_replica)
           if mb <= options.max_micro_batch and _allowed(mb, fixed.micro_batch)]
    fixed_mb = fixed.micro_batch
    if fixed_mb is not None and fixed_mb not in mbs and per_replica % fixed_mb == 0:
        mbs = [fixed_mb]  # a fixed micro-batch above solver.max_micro_batch is still allowed
    sharded = (1, 2, 3) if prune else (0, 1, 2, 3)
    zeros = [z for z in (sharded if dp * cp > 1 else (0,)) if _allowed(z, fixed.zero)]
    if fixed.zero == 0:
        zeros = [0]
    if fixed.zero is not None and not zeros:
        zeros = [fixed.zero]  # nothing to shard: every stage behaves as ZeRO-0, keep the user's value
    sps = [fixed.sequence_parallel] if fixed.sequence_parallel is not None else [tp > 1]
    if spec.is_moe and tp > 1:
        sps = [sp for sp in sps if sp]  # MoE with TP needs sequence parallelism (check_plan)
    base = Plan(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, micro_batch=1,
                recompute=(Recompute.NONE,) * pp, layers_per_stage=(1,) * pp)
    etps = tuple(_etps(spec, tp, fixed))
    placements = [(etp, order, _cp_comms(replace(base, order=order), cluster, fixed, prune))
                  for order in _orders(base, cluster, fixed, options, prune, etps)
                  for etp in etps]
    for mb in mbs:
        m = per_replica // mb
        if pp > 1:
            vps = [v for v in range(1, options.max_vp + 1)
                   if (v == 1 or m % pp == 0) and spec.num_layers >= pp * v]
        else:
            vps = [1]
        vps = [v for v in vps if _allowed(v, fixed.vp)]
        for vp in vps:
            if not options.allow_uneven_stages and spec.num_layers % (pp * vp):
                continue
            for zero in zeros:
                for sp in sps:
                    out += [Plan(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, cp_comm=cpc, vp=vp,
                                 micro_batch=mb, zero=zero, sequence_parallel=sp,
                                 recompute=(Recompute.NONE,) * pp, layers_per_stage=(1,) * pp,
                                 order=order)
                            for etp, order, cp_comms in placements for cpc in cp_comms]
    return out
