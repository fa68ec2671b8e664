"""The search space: every layout (degrees, micro-batch, ZeRO, SP, rank order) a plan may take.

A *layout* fixes everything but the per-stage choices (layers per stage, recompute per stage),
which the CP-SAT model decides. Domains, each filtered by the scenario's fixed knobs:
- tp: divisors of the device count that divide the heads, with tp | kv_heads or kv_heads | tp;
- cp: powers of two with seq_len / cp even (causal load balance needs 2*cp chunks);
- pp: divisors of devices / (tp*cp), at most the layer count; dp = devices / (tp*cp*pp);
- ep (mixture-of-experts models only, else 1): divisors of both dp*cp and the expert count that
  split along the rank order (ep divides, or is a multiple of, the inner of cp and dp: the EP
  group is the innermost ep ranks of dp x cp, cost/ep.py); with etp = 1 < tp, Megatron's MoE
  parallel folding, divisors of tp*dp*cp taking the innermost ep ranks of tp x cp x dp
  (cost/validity.py folded_ep_axes); tp > 1 forces sequence parallelism;
- etp (mixture-of-experts models with tp > 1, else unset): tp or 1 (cost/ep.py);
- cp_comm (cp > 1, else p2p): p2p or all_gather (cost/cp.py), on every placement: all_gather runs
  the attention as one kernel over the gathered keys, the ring as cp kernels over seq/cp-key
  chunks (cost/compute.attention_shape), so neither dominates the other even on one tier;
- micro_batch: divisors of global_batch / dp up to ``solver.max_micro_batch``;
- vp: 1..``solver.max_vp`` when pp > 1, micro-batches a multiple of pp, layers >= pp*vp; stages
  hold vp k - slot layers (cost.split.pipeline_slots: where vp does not divide the layers,
  Megatron's embedding / loss slots on the first / last stage make up the difference);
- zero: 0..3 (all collapse to 0 when dp*cp = 1: nothing to shard). ZeRO-0 is dropped when ZeRO-1
  is allowed: in the cost model it is never faster (RS + bf16 AG <= AR; sharded optimizer step)
  and never smaller;
- sequence_parallel: on when tp > 1 (it moves the same bytes as plain TP and never stores more;
  a fixed ``plan.sequence_parallel`` overrides);
- the MoE software state (mixture-of-experts models only; each field the scenario fixes keeps its
  value): ``moe_dispatcher`` every dispatcher the cluster runs when ep > 1 (DeepEP / HybridEP on
  NVIDIA GPUs only, cost/dispatch.py), else alltoall; ``moe_overlap`` on and off when ep > 1,
  else off; ``cuda_graphs`` none, partial and full. Each changes time (cost/dispatch.py, ep.py,
  host.py) and memory (cost/moe_memory.py, pp.py), so none dominates another in general; the
  frameworks' rules (rules/moe_state.py) judge each through the layout filter;
- order: permutations of the axes with degree > 1. Each order gives every group (tp, cp, dp x cp,
  pp; ep and expert-dp under expert parallelism) a latency and a seconds-per-byte on the tiers it
  spans (cost/comm.py); all communication costs grow with both, so an order no better on any of
  them than another is dropped (equal profiles keep the order nearest Megatron's default
  tp-cp-dp-pp; placement.py).
Under a layout filter (``Options.layout_filter``, e.g. solver.target) no alternative is dropped as
dominated before the filter has judged it: SP off and ZeRO-0 stay, and the orders a layout fails
are removed before profiles are compared.

Pooled (mixed-GPU) clusters (cost/pools.py): for each ordered selection of pools (every
non-empty subset, in every order: stage 0 holds the most in-flight activations, so which pool
comes first matters), tp, cp and dp range over the divisors of the gcd of those pools' device
counts, each pool hosts its devices / (tp*cp*dp) stages and pp is their sum; orders keep pp
outermost, and an order is dropped when another is no worse on the profile of every used pool.
Degrees are the same on every pool (Megatron-LM and NeMo build one process-group layout).

Size: one module because the domains above are one enumeration (families, ZeRO stages, rank
orders, pool selections) read together by candidates.py and enumerate.py; the per-layout limits
of the runnable default are solver/limits.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import cache
from math import gcd, isqrt
from typing import TYPE_CHECKING

from paraplan.cost import Axis, CPComm, CudaGraphs, Layout, MoEDispatcher, Recompute
from paraplan.cost.dispatch import check_dispatcher, dispatcher_sm_fraction
from paraplan.cost.plan import PartialPlan
from paraplan.cost.pools import pool_sequence, stage_pools_of
from paraplan.cost.pp_schedule import PPSchedule, implied_schedule, micro_batch_rule, schedule_rule
from paraplan.cost.split import pipeline_slots
from paraplan.cost.validity import (
    batch_splits,
    cp_splits_layer_kinds,
    cp_splits_sequence,
    ep_splits_experts,
    tp_splits_heads,
    tp_splits_layer_kinds,
)
from paraplan.graph import ModelSpec
from paraplan.hardware import Cluster
from paraplan.solver.placement import OrderCache, placements

if TYPE_CHECKING:
    from paraplan.solver.limits import StageLimits

__all__ = [
    "Options",
    "layouts",
    "families",
    "zeros",
    "divisors",
    "exact_split",
    "OutOfTime",
    "software_states",
    "SoftwareState",
    "least_state",
    "state_of",
    "states_of",
    "state_classes",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    """How wide to search. ``uniform_recompute``: every stage runs the same recompute mode;
    ``recompute_modes``: the modes allowed (None: all); ``layout_filter``: a predicate on a layout
    (a Layout: no split or recompute modes yet) that the layout must pass, e.g. a
    framework's rules; ``stage_split(layers, pp, vp)``: the one split a framework builds (None:
    it cannot), instead of a free one; ``partial_recompute``: search Plan.recompute_layers
    (models with one block kind; solver/constraints/recompute_layers.py). With a filter no
    alternative is dropped as dominated before the filter has seen it (SP off, ZeRO-0, every
    rank order), so the search stays exact over what passes. ``family_filter``: a predicate on a
    layout family (ZeRO stage and rank order not chosen yet) that is False only when
    ``layout_filter`` refuses every layout of the family; such families are dropped before they
    are bounded. ``zero_filter``: the same on a family with its ZeRO stage chosen (rank order
    not yet), False only when ``layout_filter`` refuses every rank order and slice shape of it.
    ``layout_limits``: for each layout ``layout_filter`` passes, the per-stage
    limits it is searched under (one or more, e.g. those of every framework that accepts it:
    solver/limits.py); the options' own per-stage fields must then hold all of them (they bound
    every variant). ``order_limits(family)``: optionally, ``layout_limits`` of ``family``'s
    layouts by rank order (a function of the order: that of ``replace(family, order=o)``, () where
    ``layout_filter`` refuses it), which the placement search asks of every order of a family
    (placement.py), cheaper than building each layout. ``search_moe_state``: a
    mixture-of-experts model's software state fields the scenario leaves unset are searched
    (``software_states``), else they take cost.Layout's defaults. ``state_holds(a, b)``: under
    ``layout_filter``, every plan of family ``b`` the filter passes, family ``a`` (the same but
    its MoE software state) passes too, under per-stage limits that hold ``b``'s
    (solver/states.py drops a dominated state only then; None with a filter: never)."""

    allow_uneven_stages: bool = True
    search_placement: bool = True
    max_micro_batch: int = 8
    max_vp: int = 4
    uniform_recompute: bool = False
    recompute_modes: tuple[Recompute, ...] | None = None
    layout_filter: Callable[[Layout], bool] | None = None
    family_filter: Callable[[Layout], bool] | None = None
    zero_filter: Callable[[Layout], bool] | None = None
    stage_split: Callable[[int, int, int], tuple[int, ...] | None] | None = None
    partial_recompute: bool = True  # FULL stages may store some layers (Plan.recompute_layers)
    layout_limits: Callable[[Layout], tuple[StageLimits, ...]] | None = None
    order_limits: Callable[[Layout], Callable[[tuple[Axis, ...]], tuple[StageLimits, ...]]] | None = None
    state_holds: Callable[[Layout, Layout], bool] | None = None
    search_moe_state: bool = False
    pp_schedules: tuple[PPSchedule, ...] = ()  # schedules tried beyond the one vp implies


def exact_split(
    layout: Layout, num_layers: int, fixed: PartialPlan, options: Options
) -> tuple[int, ...] | None:
    """The one layer split ``layout`` must use, if any: the scenario's fixed split, else
    ``options.stage_split(layers, pp, vp)`` (a framework that builds its own split). None: free;
    () : no valid split (wrong length, not the model's layers, or a stage not vp k - slot
    layers with k >= 1 + slot, cost.split.pipeline_slots)."""
    pp, vp = layout.pp, layout.vp
    if fixed.layers_per_stage is not None:
        split: tuple[int, ...] | None = fixed.layers_per_stage
    elif options.stage_split is not None:
        split = options.stage_split(num_layers, pp, vp)
    else:
        return None
    slots = pipeline_slots(num_layers, pp, vp)
    if (
        split is None
        or slots is None
        or len(split) != pp
        or sum(split) != num_layers
        or any(n + sl < vp * (1 + sl) or (n + sl) % vp for n, sl in zip(split, slots, strict=True))
    ):
        return ()
    return tuple(split)


@cache
def divisors(n: int) -> list[int]:
    """Every divisor of n, ascending (trial division to isqrt(n): exact for any int)."""
    small = [d for d in range(1, isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


class OutOfTime(RuntimeError):
    """The deadline passed while the space was being enumerated."""


def _on_time(deadline: float) -> None:
    if time.perf_counter() > deadline:
        raise OutOfTime("the time limit ran out while enumerating the search space")


def _allowed(value: int, fixed: int | None) -> bool:
    return fixed is None or value == fixed


def _cp_degrees(spec: ModelSpec, devices: int, seq_len: int, fixed: PartialPlan) -> list[int]:
    """The cp degrees searched: powers of two up to 64 dividing ``devices`` that split the
    sequence and the model's layers (cost/validity.py), or only the fixed one."""
    return [
        c
        for c in (1, 2, 4, 8, 16, 32, 64)
        if devices % c == 0
        and cp_splits_sequence(seq_len, c)
        and cp_splits_layer_kinds(spec, c)
        and _allowed(c, fixed.cp)
    ]


def _tp_splits(spec: ModelSpec, tp: int) -> bool:
    """tp splits the attention heads and the Mamba / vision layers (cost/validity.py)."""
    return tp_splits_heads(spec.num_heads, spec.num_kv_heads, tp) and tp_splits_layer_kinds(spec, tp)


def _eps(spec: ModelSpec, dp: int, cp: int, fixed: PartialPlan, tp: int = 1) -> list[int]:
    """Expert-parallel degrees: 1 for dense models; else divisors of the experts and of dp*cp, or,
    where etp = 1 < tp may fold the EP group over the tp ranks (cost/validity.py expert_folded,
    Megatron-core's MoE parallel folding), of tp*dp*cp (``_families_of`` pairs an ep that does not
    divide dp*cp with etp = 1 only)."""
    if not spec.is_moe:
        return [1] if fixed.ep in (None, 1) else []
    ranks = tp * dp * cp if 1 in _etps(spec, tp, fixed) and tp > 1 else dp * cp
    return [e for e in divisors(ranks) if ep_splits_experts(spec.num_experts, e) and _allowed(e, fixed.ep)]


def _etps(spec: ModelSpec, tp: int, fixed: PartialPlan) -> list[int | None]:
    """Expert tensor-parallel degrees: tp and 1 for MoE models with tp > 1; unset otherwise."""
    if not spec.is_moe or tp == 1:
        return [None] if fixed.etp in (None, tp, 1) else []
    return [e for e in (tp, 1) if _allowed(e, fixed.etp)]


SoftwareState = tuple[MoEDispatcher, bool, CudaGraphs]
"""(plan.moe_dispatcher, plan.moe_overlap, plan.cuda_graphs) of a layout."""


def _runs_dispatcher(dispatcher: MoEDispatcher, cluster: Cluster) -> bool:
    """The cluster runs ``dispatcher`` (cost.dispatch.check_dispatcher) and the cost model has
    its SM share on every accelerator of the cluster (hardware/data/dispatch.yaml)."""
    try:
        check_dispatcher(dispatcher, cluster)
        for pool in cluster.pools or (cluster,):
            dispatcher_sm_fraction(dispatcher, pool.accelerator)
    except ValueError:
        return False
    return True


def software_states(
    spec: ModelSpec, cluster: Cluster, ep: int, fixed: PartialPlan, search: bool = True
) -> list[SoftwareState]:
    """The MoE software states searched (module docstring): each field the scenario fixes keeps
    its value; else, with ``search`` (Options.search_moe_state) on a mixture-of-experts model,
    the dispatchers the cluster runs (cost.dispatch.check_dispatcher) and the EP overlap on and
    off when ep > 1 (with one EP rank neither moves a byte: the default alone), and every
    CUDA-graph scope. A dense model keeps
    cost.Layout's defaults (nothing to dispatch; its host time does not read the graphs)."""
    moe = spec.is_moe and search
    default = Layout(dp=1, tp=1, pp=1, micro_batch=1)
    if fixed.moe_dispatcher is not None:
        dispatchers = [fixed.moe_dispatcher]
    elif moe and ep > 1:
        dispatchers = [d for d in MoEDispatcher if _runs_dispatcher(d, cluster)]
    else:
        dispatchers = [default.moe_dispatcher]
    if fixed.moe_overlap is not None:
        overlaps = [fixed.moe_overlap]
    else:
        overlaps = [False, True] if moe and ep > 1 else [default.moe_overlap]
    if fixed.cuda_graphs is not None:
        graphs = [fixed.cuda_graphs]
    else:
        graphs = list(CudaGraphs) if moe else [default.cuda_graphs]
    return [(d, o, g) for d in dispatchers for o in overlaps for g in graphs]


def least_state(state: SoftwareState, fixed: PartialPlan) -> SoftwareState:
    """The state whose compute floor (cost.floor.compute_floor_s) bounds ``state``'s and those
    of its other CUDA-graph scopes: the graphs full (no exposed sync); the floor reads the graphs
    through nothing else (the dispatcher and the overlap set its exposed all-to-all)."""
    dispatcher, overlap, graphs = state
    if fixed.cuda_graphs is None:
        graphs = CudaGraphs.FULL
    return dispatcher, overlap, graphs


def state_classes(
    spec: ModelSpec, cluster: Cluster, ep: int, fixed: PartialPlan, search: bool = True
) -> list[SoftwareState]:
    """The least states (``least_state``) of ``software_states``, each once, in their order:
    one per class of states with one compute floor (``families(states=False)``)."""
    return list(
        dict.fromkeys(least_state(st, fixed) for st in software_states(spec, cluster, ep, fixed, search))
    )


def state_of(layout: Layout) -> SoftwareState:
    """``layout``'s MoE software state."""
    return layout.moe_dispatcher, layout.moe_overlap, layout.cuda_graphs


def states_of(
    spec: ModelSpec, cluster: Cluster, family: Layout, fixed: PartialPlan, search: bool = True
) -> list[Layout]:
    """The families of ``family``'s class (``families(states=False)``): ``family`` with each
    software state whose least state is ``family``'s."""
    least = state_of(family)
    return [
        replace(family, moe_dispatcher=d, moe_overlap=o, cuda_graphs=g)
        for d, o, g in software_states(spec, cluster, family.ep, fixed, search)
        if least_state((d, o, g), fixed) == least
    ]


def _cp_comms(cp: int, fixed: PartialPlan) -> list[CPComm]:
    """K/V exchange variants: the fixed one if given; p2p (moot) when cp = 1; else both."""
    if fixed.cp_comm is not None:
        return [fixed.cp_comm]
    return [CPComm.P2P] if cp == 1 else [CPComm.P2P, CPComm.ALL_GATHER]


def families(
    spec: ModelSpec,
    cluster: Cluster,
    seq_len: int,
    global_batch: int,
    fixed: PartialPlan,
    options: Options,
    deadline: float = float("inf"),
    filtered: bool = True,
    states: bool = True,
    one_class: bool = False,
) -> list[Layout]:
    """Every layout family: degrees, ep, micro-batch, vp, SP and the MoE software state fixed;
    ZeRO and the rank order left to ``zeros`` and ``orders`` (placeholders here: the first ZeRO
    stage, Megatron's order). Under ``options.family_filter``, only the families it passes
    (``filtered``; the branch and bound asks it only of the families it reaches). ``states``
    False: one family per class of software states with the same least state (``least_state``,
    its value; ``states_of`` gives the class), as the branch and bound bounds them; with
    ``one_class`` too, only the first class's family (``state_classes`` gives the others: they
    differ in the state alone). OutOfTime once ``deadline`` (time.perf_counter) has passed."""
    if cluster.pools:
        pooled = _pooled_families(
            spec, cluster, seq_len, global_batch, fixed, options, deadline, states, one_class
        )
        return _passing(pooled, options) if filtered else pooled
    n = cluster.num_devices
    out: list[Layout] = []
    cps = _cp_degrees(spec, n, seq_len, fixed)
    for tp in divisors(n):
        if not (_tp_splits(spec, tp) and _allowed(tp, fixed.tp)):
            continue
        for cp in cps:
            if (n // tp) % cp:
                continue
            _on_time(deadline)
            for pp in divisors(n // (tp * cp)):
                dp = n // (tp * cp * pp)
                if pp > spec.num_layers or not _allowed(pp, fixed.pp) or not _allowed(dp, fixed.dp):
                    continue
                if not batch_splits(global_batch, 1, dp):
                    continue
                for ep in _eps(spec, dp, cp, fixed, tp):
                    out += _families_of(
                        spec, cluster, global_batch, dp, tp, pp, cp, ep, fixed, options, (), states, one_class
                    )
    if fixed.torus_shape is not None:
        out = [replace(f, torus_shape=fixed.torus_shape) for f in out]
    return _passing(out, options) if filtered else out


def _passing(found: list[Layout], options: Options) -> list[Layout]:
    """The families ``options.family_filter`` passes (all without one)."""
    if options.family_filter is None:
        return found
    return [f for f in found if options.family_filter(f)]


def _families_of(
    spec: ModelSpec,
    cluster: Cluster,
    global_batch: int,
    dp: int,
    tp: int,
    pp: int,
    cp: int,
    ep: int,
    fixed: PartialPlan,
    options: Options,
    stage_pools: tuple[int, ...] = (),
    with_states: bool = True,
    one_class: bool = False,
) -> list[Layout]:
    out: list[Layout] = []
    per_replica = global_batch // dp
    mbs = [
        mb
        for mb in range(1, min(options.max_micro_batch, per_replica) + 1)
        if per_replica % mb == 0 and _allowed(mb, fixed.micro_batch)
    ]
    fixed_mb = fixed.micro_batch
    if fixed_mb is not None and fixed_mb not in mbs and per_replica % fixed_mb == 0:
        mbs = [fixed_mb]  # a fixed micro-batch above solver.max_micro_batch is still allowed
    sps = [fixed.sequence_parallel] if fixed.sequence_parallel is not None else [tp > 1]
    if fixed.sequence_parallel is None and tp > 1 and options.layout_filter is not None:
        sps = [True, False]  # SP off is dominated, but a filter may refuse SP
    if spec.is_moe and tp > 1:
        sps = [sp for sp in sps if sp]  # MoE with TP needs sequence parallelism (check_plan)
    etps, cp_comms = _etps(spec, tp, fixed), _cp_comms(cp, fixed)
    if (dp * cp) % ep:
        etps = [e for e in etps if e == 1]  # an ep beyond dp*cp folds over the tp ranks
    states = software_states(spec, cluster, ep, fixed, options.search_moe_state)
    if not with_states and options.search_moe_state:
        states = list(dict.fromkeys(least_state(st, fixed) for st in states))
        if one_class:
            states = states[:1]
    for mb in mbs:
        m = per_replica // mb
        if pp > 1:
            vps = [
                v for v in range(1, min(options.max_vp, spec.num_layers // pp) + 1) if v == 1 or m % pp == 0
            ]
        else:
            vps = [1]
        for vp in (v for v in vps if _allowed(v, fixed.vp)):
            if not options.allow_uneven_stages and spec.num_layers % (pp * vp):
                continue  # equal stages and chunks: no embedding/loss slots either
            out += [
                Layout(
                    dp=dp,
                    tp=tp,
                    pp=pp,
                    cp=cp,
                    ep=ep,
                    etp=etp,
                    cp_comm=cpc,
                    vp=vp,
                    micro_batch=mb,
                    sequence_parallel=sp,
                    stage_pools=stage_pools,
                    moe_dispatcher=dispatcher,
                    moe_overlap=overlap,
                    cuda_graphs=graphs,
                    pp_schedule=schedule,
                )
                for schedule in pp_schedules(pp, vp, m, fixed, options, pooled=bool(stage_pools))
                for sp in sps
                for etp in etps
                for cpc in cp_comms
                for dispatcher, overlap, graphs in states
            ]
    return out


SEARCHABLE_SCHEDULES: tuple[PPSchedule, ...] = (PPSchedule.ZB1P, PPSchedule.DUALPIPEV)
"""The schedules beyond the ones vp implies that the CP-SAT model expresses (every one but
DualPipe, whose rank pairs it does not): ``solver.target: any`` searches them all, a target those
it runs (the front door narrows ``Options.pp_schedules``)."""


def pp_schedules(
    pp: int, vp: int, m: int, fixed: PartialPlan, options: Options, pooled: bool = False
) -> list[PPSchedule | None]:
    """The pipeline schedules of a (pp, vp, micro-batches) family: the fixed one where it fits
    these degrees (cost/pp_schedule.py schedule_rule, micro_batch_rule), else the one vp implies
    (None) and each of ``options.pp_schedules`` that fits. DualPipe is never searched: no target
    runs it, and its rank pairs (stages s and p - 1 - s) are not in the CP-SAT model. A pooled
    cluster (``pooled``) searches the implied one only (Megatron alone runs pools)."""
    if fixed.pp_schedule is not None:
        candidates: list[PPSchedule | None] = [fixed.pp_schedule]
    elif pp == 1 or pooled:
        return [None]
    else:
        candidates = [None, *(s for s in options.pp_schedules if s != implied_schedule(vp))]
    return [
        s
        for s in candidates
        if s != PPSchedule.DUALPIPE
        and schedule_rule(s, pp, vp) is None
        and micro_batch_rule(s, pp, m) is None
    ]


def zeros(
    family: Layout, fixed: PartialPlan, *, prune_dominated: bool = True, options: Options | None = None
) -> list[int]:
    """ZeRO stages of a family (module docstring); ZeRO-0 kept under a layout filter."""
    if options is not None and options.layout_filter is not None:
        prune_dominated = False
    sharded = (1, 2, 3) if prune_dominated else (0, 1, 2, 3)
    out = [z for z in (sharded if family.dp * family.cp > 1 else (0,)) if _allowed(z, fixed.zero)]
    if fixed.zero == 0:
        out = [0]
    if fixed.zero is not None and not out:
        out = [fixed.zero]  # nothing to shard: every stage behaves as ZeRO-0, keep the user's value
    return out


def layouts(
    spec: ModelSpec,
    cluster: Cluster,
    seq_len: int,
    global_batch: int,
    fixed: PartialPlan,
    options: Options,
    *,
    prune_dominated: bool = True,
) -> list[Layout]:
    """Every layout of the space, as Plans whose recompute/layers_per_stage are placeholders.

    ``prune_dominated=False`` keeps ZeRO-0 and every distinct placement (the exhaustive baseline
    uses it, so the oracle tests check that the pruning is exact)."""
    cache: OrderCache = {}
    return [
        replace(family, zero=zero, order=order, torus_shape=shape)
        for family in families(spec, cluster, seq_len, global_batch, fixed, options)
        for zero in zeros(family, fixed, prune_dominated=prune_dominated, options=options)
        for order, shape in placements(
            replace(family, zero=zero), cluster, fixed, options, prune_dominated=prune_dominated, cache=cache
        )
    ]


def _pool_sequences(cluster: Cluster, fixed: PartialPlan) -> Iterator[tuple[int, ...]]:
    """Ordered selections of pools: every non-empty subset in every order (or the fixed one),
    up to the symmetry of identical pools (same node type and size: exchanging two changes no
    cost), of which only the first ones are used, in index order."""
    if fixed.stage_pools is not None:
        yield pool_sequence(fixed.stage_pools)
        return
    classes: dict[str, list[int]] = {}
    for i, pool in enumerate(cluster.pools):
        classes.setdefault(repr(pool), []).append(i)  # equal fields: an identical pool
    members = list(classes.values())

    def extend(seq: tuple[int, ...], used: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
        if seq:
            yield seq
        for c, ids in enumerate(members):
            if used[c] < len(ids):
                yield from extend(seq + (ids[used[c]],), used[:c] + (used[c] + 1,) + used[c + 1 :])

    yield from extend((), (0,) * len(members))


def _pooled_families(
    spec: ModelSpec,
    cluster: Cluster,
    seq_len: int,
    global_batch: int,
    fixed: PartialPlan,
    options: Options,
    deadline: float = float("inf"),
    states: bool = True,
    one_class: bool = False,
) -> list[Layout]:
    """``families`` on a pooled cluster (module docstring), each with its ``stage_pools``."""
    out: list[Layout] = []
    for seq in _pool_sequences(cluster, fixed):
        _on_time(deadline)
        g = gcd(*(cluster.pools[p].num_devices for p in seq))
        cps = _cp_degrees(spec, g, seq_len, fixed)
        for tp in divisors(g):
            if not (_tp_splits(spec, tp) and _allowed(tp, fixed.tp)):
                continue
            for cp in cps:
                if (g // tp) % cp:
                    continue
                for dp in divisors(g // (tp * cp)):
                    pools = stage_pools_of(cluster, seq, tp * cp * dp)
                    if pools is None or (fixed.stage_pools is not None and pools != fixed.stage_pools):
                        continue
                    pp = len(pools)
                    if (
                        pp > spec.num_layers
                        or not _allowed(pp, fixed.pp)
                        or not _allowed(dp, fixed.dp)
                        or global_batch % dp
                    ):
                        continue
                    for ep in _eps(spec, dp, cp, fixed, tp):
                        out += _families_of(
                            spec,
                            cluster,
                            global_batch,
                            dp,
                            tp,
                            pp,
                            cp,
                            ep,
                            fixed,
                            options,
                            pools,
                            states,
                            one_class,
                        )
    return out
