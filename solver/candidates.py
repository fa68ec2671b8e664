"""Which layouts go to CP-SAT: best-first branch and bound over the search space (solve.py, 1-2).

Layouts (space.py) are bounded in levels: a family by its compute floor, a family with a ZeRO
stage by its terms with every group on consecutive ranks, a layout by its own terms, then its
tables (tables.py: memory-aware lower bound, upper bound from a real plan). Each level's bound is
at most the next one's, so popping the least bound first and stopping once it exceeds the K-th
best upper bound examines exactly what cannot be proven worse; a layout whose lower bound
exceeds that K-th best upper bound cannot hold any of the K best plans and stays out of CP-SAT.
When nothing fits memory, ``NoFitError`` carries the least memory any plan needs.

The levels share one heap, one incumbent and the memo tables each level fills for the next, so
the loop stays in one function; what it asks lives beside it: the MoE state classes at level 0
(classes.py), a layout's tables and memory checks (layout_checks.py), the count of layouts and
the layer counts a stage allows (space_size.py).
"""

from __future__ import annotations

import heapq
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

from paraplan.cost import Job, Layout, StageTerms, stage_terms
from paraplan.cost.derive import derive
from paraplan.cost.floor import (
    FLOOR_IGNORES,
    FloorMemo,
    inner_tiers_fastest,
)
from paraplan.cost.plan import PartialPlan, plan_key
from paraplan.cost.pools import pool_floors, pooled_pipeline_floor_s
from paraplan.cost.pp import pipeline_lower_bound_s
from paraplan.cost.pp_schedule import bubble_weight_floor
from paraplan.graph import LayerGraph
from paraplan.hardware import Cluster
from paraplan.solver.bounds import quick_lower_bound_s
from paraplan.solver.caps import CapsMemo, fits_some_split
from paraplan.solver.classes import class_floors, class_states
from paraplan.solver.constraints.recompute_layers import bound_modes, searches_partial
from paraplan.solver.distinct import layout_key
from paraplan.solver.family_bound import LeastMemory, family_bound_s
from paraplan.solver.layout_checks import (
    allowed_recomputes,
    fits,
    least_memory,
    stage_modes,
    variant_tables,
)
from paraplan.solver.limits import dominated_by_twin, twins
from paraplan.solver.placement import OrderCache, orders, placements
from paraplan.solver.space import (
    Options,
    OutOfTime,
    SoftwareState,
    families,
    state_classes,
    state_of,
    zeros,
)
from paraplan.solver.space_size import KMemo, k_choices_of, space_size
from paraplan.solver.states import SHARED, with_state
from paraplan.solver.tables import LayoutTables

__all__ = [
    "NoLayoutError",
    "NoFitError",
    "allowed_recomputes",
    "bounded_tables",
    "least_memory",
]


class NoLayoutError(ValueError):
    """No layout satisfies the divisibility rules."""


class NoFitError(ValueError):
    """Layouts exist but none fits memory; ``min_bytes`` is the least any plan needs."""

    def __init__(self, message: str, min_bytes: float, capacity: float) -> None:
        super().__init__(message)
        self.min_bytes = min_bytes
        self.capacity = capacity


_BLOCKS = 3
"""The heap level of a family (its MoE software state chosen) bounded by its own blocks
(solver/family_bound.py) above its class's compute floor: its ZeRO stages come next (level 1)."""


_CLASSES = 4
"""The heap level of a family less its MoE software state (the state searched), bounded by the
least floor of its classes (space.state_classes): each class is pushed at level 0 when it is
popped, so the classes of the families never popped are never built."""


@dataclass
class _Candidates:
    kept: list[LayoutTables]
    num_layouts: int
    discarded_lb_s: float
    unfit: int
    out_of_time: bool = False  # bounding stopped at the deadline: the rest is bounded by its floor
    # the tables built but left out (lower bound above the cutoff), and the least bound of the
    # layouts never built (the heap's when it stopped): what bounds any other layout's plans
    # when the runner-up is not proven (solve.py ``_runner_up``)
    left_out: list[LayoutTables] = field(default_factory=list)
    unexamined_lb_s: float = float("inf")


def bounded_tables(
    graph: LayerGraph,
    cluster: Cluster,
    job: Job,
    fixed: PartialPlan,
    options: Options,
    top: int,
    deadline: float = float("inf"),
    distinct: bool = False,
    shared: dict[tuple[object, ...], Any] | None = None,
) -> _Candidates:
    """Best-first branch and bound over the space (solve.py docstring, 1-2), in three levels:

    0. a family (degrees, ep, micro-batch, vp, SP), bounded by its compute floor through the
       1F1B bound (cost.floor.compute_floor_s, pipeline_lower_bound_s; a MoE family's at its
       own ep, cost.floor.moe_ep_excess_s); a MoE family (each state of its class, when the
       state is searched) is then bounded by its own blocks on packed spans
       (solver/family_bound.py, heap level ``_BLOCKS``) before its ZeRO stages are; with the
       state searched, a family less its state comes first (heap level ``_CLASSES``), bounded
       by the least floor of its classes, which are built only when it is popped;
    1. a family with a ZeRO stage, bounded by quick_lower_bound_s of its terms with every group on
       consecutive ranks (``stage_terms(packed=True)``: no rank order costs less); under a layout
       filter a ZeRO-0 or SP-off family whose ZeRO-1 / SP-on twin (limits.twins) is bounded
       already takes the twin's bound until it is popped (the twin is never slower, space.py),
       and only then its own terms: most such families are never popped; one whose twin fits
       no split fits none either (the twin is never larger);
    2. a layout (that and a rank order), bounded by quick_lower_bound_s of its own terms;
    then its tables (memory-aware bounds, an upper bound). Each level's bound is at most the next
    one's, so popping the least bound first and stopping once it exceeds the K-th best upper bound
    examines exactly what cannot be proven worse. At ``deadline`` it stops with the least bound
    left as a valid bound on everything not examined. ``distinct``: the K-th best upper bound
    counts one per layout_key (near-duplicates are not listed, solver/distinct.py). ``shared``:
    stage_terms' cache, kept by a caller that searches one instance more than once."""
    spec = graph.spec
    recomputes = allowed_recomputes(fixed, options)
    if not recomputes:
        raise NoLayoutError("no recompute mode is both fixed and allowed")
    uniform = options.uniform_recompute
    partial = searches_partial(graph, fixed, options, recomputes)  # constraints/recompute_layers.py
    lb_modes = bound_modes(recomputes, partial)
    packed = inner_tiers_fastest(cluster) or cluster.torus is not None  # torus: Spans.torus_floor
    shared = {} if shared is None else shared
    order_cache: OrderCache = {}
    caps_memo: CapsMemo = {}  # a family's memory check and its layouts' tables read the same caps
    floors: dict[tuple[object, ...], Any] = {}
    floor_memo: FloorMemo = {}  # cost/floor.py: the parts every software state shares
    same_layers = len(graph.kind_blocks) == 1  # pooled_pipeline_floor_s
    # several block kinds make the memory check (layout_checks.fits: caps.layer_caps per kind) dearer than
    # the layout filter's rank orders: a filtered family is then asked for its orders first
    # (off a TPU cluster, whose unfit families' least memory reads each family's own shape)
    filter_first = options.layout_filter is not None and not same_layers and cluster.torus is None
    heap: list[tuple[Any, ...]] = []
    tick = itertools.count()
    # the family filter is asked of the families the search reaches (level 0), not of them all
    # one family per class of MoE software states with one floor (space.least_state): its
    # states are told apart at level 0 (space.states_of), each then bounded by its own terms;
    # with the state searched (off pooled clusters), one entry per family less its state,
    # bounded by its least class floor, its classes pushed when it is popped (``_CLASSES``)
    lazy = spec.is_moe and options.search_moe_state and not cluster.pools
    space = families(
        spec,
        cluster,
        job.seq_len,
        job.global_batch,
        fixed,
        options,
        deadline,
        filtered=False,
        states=False,
        one_class=lazy,
    )
    classes: dict[int, list[SoftwareState]] = {}  # space.state_classes by ep
    k_memo: KMemo = {}
    for i, family in enumerate(space):
        if i % 16 == 0 and time.perf_counter() > deadline:  # a floor may take milliseconds
            raise OutOfTime("the time limit ran out while bounding the layout families")
        ks = k_choices_of(k_memo, family, spec.num_layers, fixed, options)
        if ks == []:
            continue
        m = job.global_batch // (family.micro_batch * family.dp)
        if cluster.pools:  # per-pool floors (cost/pools.py)
            floor_key = plan_key(family, FLOOR_IGNORES)
            if floor_key not in floors:
                floors[floor_key] = pool_floors(graph, family, job, cluster)
            heap.append(
                (
                    pooled_pipeline_floor_s(floors[floor_key], family, m, same_layers),
                    next(tick),
                    0,
                    family,
                    ks,
                )
            )
            continue
        states = [state_of(family)]
        if lazy:
            states = classes.get(family.ep) or classes.setdefault(
                family.ep, state_classes(spec, cluster, family.ep, fixed, True)
            )
        per = class_floors(graph, family, job, cluster, states, floors, floor_memo)
        weight = bubble_weight_floor(family.pp_schedule, family.vp)
        floor = pipeline_lower_bound_s(min(per), family.pp, family.vp, m, weight)
        if len(states) > 1:
            heap.append((floor, next(tick), _CLASSES, (family, states, per), ks))
        else:
            heap.append((floor, next(tick), 0, family, ks))
    if not heap:
        raise NoLayoutError("no layout satisfies the divisibility rules")
    heapq.heapify(heap)
    uppers: list[float] = []
    best_upper: dict[Any, float] = {}  # per layout_key when ``distinct``, else per layout
    computed: list[LayoutTables] = []
    unfit_terms: list[StageTerms] = []  # families with a ZeRO stage whose no split fits
    unfit, discarded, out_of_time = 0, float("inf"), False
    variant_memo: dict[Any, list[Options]] = {}  # space.layout_variants
    level1: dict[Layout, float] = {}  # level-1 bounds of the families with a ZeRO stage so far
    unfit_families: set[Layout] = set()  # families with a ZeRO stage whose no split fits
    state_memo: dict[Any, Any] = {SHARED: shared}  # solver/states.py
    passed = 0  # layouts that reached level 2 (under a layout filter: that passed it)
    blocks = spec.is_moe and packed and not cluster.pools  # level 0's block bound (family_bound.py)
    roomy = None  # the states of a family and ZeRO stage that fit no split, told by one check
    if spec.is_moe and options.search_moe_state:
        roomy = LeastMemory(
            graph,
            job,
            cluster,
            shared,
            packed,
            lambda t, ks: fits(t, recomputes, spec.num_layers, ks, uniform, stage_modes(fixed, t.plan.pp)),
        )
    skipped: list[Layout] = []  # families with a ZeRO stage whose least-memory twin fits no split
    while heap:
        cutoff = uppers[top - 1] * (1 + 1e-9) if len(uppers) >= top else float("inf")
        bound, _, level, plan, ks = heapq.heappop(heap)
        if bound > cutoff:
            discarded = min(discarded, bound)
            break
        if time.perf_counter() > deadline:
            discarded, out_of_time = min(discarded, bound), True
            break
        if level == _CLASSES:  # a family less its state: each class with its own floor
            family, states, per = plan
            m = job.global_batch // (family.micro_batch * family.dp)
            weight = bubble_weight_floor(family.pp_schedule, family.vp)
            own_state = state_of(family)
            for st, per_micro_batch_s in zip(states, per, strict=True):
                f = family if st == own_state else with_state(family, st)
                b = pipeline_lower_bound_s(per_micro_batch_s, family.pp, family.vp, m, weight)
                heapq.heappush(heap, (b, next(tick), 0, f, ks))
        elif level in (0, _BLOCKS):
            found = [plan]
            if level == _BLOCKS:
                pass  # a family (its state chosen) whose block bound is known: its ZeRO stages
            elif spec.is_moe and options.search_moe_state:  # the class's states, less the dominated
                found = class_states(graph, cluster, job, fixed, options, plan, state_memo)
            elif options.family_filter is not None and not options.family_filter(plan):
                continue  # every layout of the family fails the layout filter
            for state in found:
                if level == 0 and blocks:  # solver/family_bound.py: pushed again if it is tighter
                    own = family_bound_s(graph, state, job, cluster, lb_modes, shared)
                    if own > bound:
                        heapq.heappush(heap, (own, next(tick), _BLOCKS, state, ks))
                        continue
                for zero in sorted(zeros(state, fixed, options=options), key=lambda z: z == 0):
                    p = state if zero == state.zero else derive(state, zero=zero)
                    if options.zero_filter is not None and not options.zero_filter(p):
                        continue  # every layout of the family with this ZeRO stage fails the filter
                    p_twins = twins(p, fixed)
                    if roomy is not None and roomy.unfit(p, ks, p_twins):  # family_bound.LeastMemory
                        skipped.append(p)
                        continue
                    held = [level1[t] for t in p_twins if t in level1]
                    if held:  # terms when popped (_twin_bound): most such families never are
                        heapq.heappush(heap, (max(bound, *held), next(tick), 1, (p, None), ks))
                        continue
                    terms = stage_terms(graph, p, job, cluster, shared, packed=packed)
                    b = bound
                    if packed:
                        b = max(bound, quick_lower_bound_s(terms, lb_modes, spec.num_layers))
                    level1[p] = b
                    heapq.heappush(heap, (b, next(tick), 1, (p, terms), ks))
        elif level == 1:
            plan, terms = plan
            if terms is None:  # bounded by its twin's bound so far: now by its own terms
                terms = stage_terms(graph, plan, job, cluster, shared, packed=packed)
                own = quick_lower_bound_s(terms, lb_modes, spec.num_layers) if packed else bound
                if own > bound:
                    heapq.heappush(heap, (own, next(tick), 1, (plan, terms), ks))
                    continue
            orders_found = None
            if filter_first:  # no rank order passes the filter: no layout (none counts as unfit)
                orders_found = placements(plan, cluster, fixed, options, cache=order_cache)
                if not orders_found:
                    continue
            if any(t in unfit_families for t in twins(plan, fixed)) or not fits(
                terms, recomputes, spec.num_layers, ks, uniform, stage_modes(fixed, plan.pp), caps_memo
            ):  # a twin that fits no split holds one that does not either (never larger, space.py)
                unfit_terms.append(terms)
                unfit_families.add(plan)
                continue
            if orders_found is None:
                orders_found = placements(plan, cluster, fixed, options, cache=order_cache)
            for order, shape in orders_found:
                passed += 1
                layout = derive(plan, order=order, torus_shape=shape)
                if dominated_by_twin(layout, fixed, options, variant_memo):
                    continue  # its ZeRO-1 / SP twin holds every plan it has, no slower
                terms = stage_terms(graph, layout, job, cluster, shared)
                b = max(bound, quick_lower_bound_s(terms, lb_modes, spec.num_layers))
                heapq.heappush(heap, (b, next(tick), 2, (layout, terms), ks))
        else:
            layout, terms = plan
            memos = (variant_memo, caps_memo)
            for tab in variant_tables(
                graph, cluster, job, fixed, options, layout, terms, ks, recomputes, memos, cutoff
            ):
                if not fits_some_split(tab.k_max, layout.pp, tab.k_total, tab.uniform, tab.slots):
                    unfit += 1
                    continue
                computed.append(tab)
                if tab.upper_bound_s < float("inf"):
                    key: object = layout_key(tab.plan) if distinct else tab.plan
                    best_upper[key] = min(best_upper.get(key, float("inf")), tab.upper_bound_s)
                    uppers = heapq.nsmallest(top, best_upper.values())
    num_layouts = space_size(space, spec, cluster, fixed, options, deadline, k_memo, lazy)
    if not computed and out_of_time:
        return _Candidates([], num_layouts, discarded, unfit + len(unfit_terms), out_of_time)
    if not computed:  # the skipped families' own terms, for the errors below
        unfit_terms += [stage_terms(graph, p, job, cluster, shared, packed=packed) for p in skipped]
    if not computed and options.layout_filter is not None:  # unfit families it would refuse
        unfit_terms = [t for t in unfit_terms if orders(t.plan, cluster, fixed, options, cache=order_cache)]
        if not passed and not unfit_terms:
            raise NoLayoutError("no layout passes the layout filter")
    if not computed:  # every family was examined and none fits (memory ignores the order)
        least = least_memory(graph.spec.num_layers, recomputes, unfit_terms)
        raise NoFitError("no plan fits memory", least, cluster.memory_capacity_bytes)
    cutoff = uppers[top - 1] * (1 + 1e-9) if len(uppers) >= top else float("inf")
    kept = [t for t in computed if t.lower_bound_s <= cutoff]
    left_out = [t for t in computed if t.lower_bound_s > cutoff]
    least = min([discarded] + [t.lower_bound_s for t in left_out])
    return _Candidates(kept, num_layouts, least, unfit + len(unfit_terms), out_of_time, left_out, discarded)
