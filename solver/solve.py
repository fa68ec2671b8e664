"""Solve: enumerate layouts, prune by bounds, build and solve the CP-SAT model, re-check the plan.

1. Layouts (space.py) are bounded best-first in levels (family, + ZeRO stage, + rank order, then
   tables; see ``_bounded_tables``), cheapest bound first, until the least bound left exceeds the
   K-th best upper bound found so far (branch and bound).
2. Layouts whose lower bound exceeds that K-th best upper bound cannot hold any of the K best plans
   and stay out of CP-SAT. Both steps are exact, so OPTIMAL means optimal over the whole space;
   the reported bound is min(CP-SAT's bounds, the least lower bound left out).
3. Each kept layout is solved in its own CP-SAT model (model.py), least lower bound first and
   capped by the best objective so far, until a layout's lower bound exceeds it; within a layout
   a second solve with the step fixed breaks ties (no recompute first, then the even split), and
   across layouts the better layout_rank wins, so the plan does not depend on the worker count.
4. Every plan is re-evaluated by ``cost.evaluate``: it must fit and match the objective within
   scale.tolerance_s.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from ortools.sat.python import cp_model
from paraplan.cost import (
    DEFAULT_ORDER,
    Job,
    Layout,
    Plan,
    Recompute,
    StageTerms,
    evaluate,
    stage_memory,
    stage_terms,
)
from paraplan.cost.floor import FLOOR_IGNORES, compute_floor_s, inner_tiers_fastest
from paraplan.cost.plan import even_split, pipeline_slots, plan_key
from paraplan.cost.pools import pool_floors, pooled_pipeline_floor_s
from paraplan.cost.pp import pipeline_lower_bound_s
from paraplan.graph import LayerGraph, ModelSpec
from paraplan.hardware import Cluster
from paraplan.solver.bounds import quick_lower_bound_s
from paraplan.solver.caps import fits_some_split, layer_caps
from paraplan.solver.constraints.recompute_layers import bound_modes, partial_counts, searches_partial
from paraplan.solver.distinct import is_near_duplicate, layout_key
from paraplan.solver.model import ModelVars, add_hint, build_model
from paraplan.solver.scale import from_ticks, resolution_for, tolerance_s
from paraplan.solver.space import (
    Fixed,
    Options,
    OrderCache,
    OutOfTime,
    exact_split,
    families,
    num_orders,
    orders,
    placements,
    zeros,
)
from paraplan.solver.tables import LayoutTables, build_tables, even_layers

__all__ = [
    "SolverOptions",
    "Solution",
    "Outcome",
    "solve_instance",
    "NoLayoutError",
    "OutOfTime",
    "NoFitError",
    "layout_rank",
]

MIN_CP_SAT_S = 0.2  # past the deadline, time CP-SAT still gets to return the warm start
_ZERO_PREFERENCE = (1, 0, 2, 3)  # distributed optimizer first: what Megatron and NeMo run


@dataclass(frozen=True, slots=True, kw_only=True)
class SolverOptions:
    time_limit_s: float = 30.0
    num_workers: int = 2
    random_seed: int = 0
    relative_gap: float = 0.0
    top: int = 1
    log_search_progress: bool = False
    # top-K lists plans that differ in a degree or mode: a runner-up that differs from a listed
    # plan only in rank order, ZeRO stage or layer split, within this relative step time, is
    # skipped (solver/distinct.py); None lists the best plan of every layout
    duplicate_rel: float | None = None


@dataclass(frozen=True, slots=True)
class Solution:
    plan: Plan
    objective_s: float


@dataclass(frozen=True, slots=True)
class Outcome:
    status: str
    solutions: list[Solution]  # best first, distinct layouts
    bound_s: float
    wall_s: float
    num_layouts: int
    num_pruned: int


class NoLayoutError(ValueError):
    """No layout satisfies the divisibility rules."""


class NoFitError(ValueError):
    """Layouts exist but none fits memory; ``min_bytes`` is the least any plan needs."""

    def __init__(self, message: str, min_bytes: float, capacity: float) -> None:
        super().__init__(message)
        self.min_bytes = min_bytes
        self.capacity = capacity


def layout_rank(plan: Layout) -> tuple[object, ...]:
    """Tie-break order among equally fast layouts: fewer stages, less cp, no interleaving,
    smaller tp, ZeRO 1/0/2/3, smaller micro-batch, the default rank order, p2p context
    parallelism, expert TP = tp (Megatron's defaults), then (pooled clusters) the pools of the
    stages in lexicographic order, then (TPU) the most cubic slice shape (hardware/tpu.py)."""
    order_rank = [DEFAULT_ORDER.index(a) for a in plan.order]
    return (
        plan.pp,
        plan.cp,
        plan.vp,
        plan.tp,
        _ZERO_PREFERENCE.index(plan.zero),
        plan.micro_batch,
        order_rank,
        plan.cp_comm != "p2p",
        plan.expert_tp != plan.tp,
        plan.stage_pools,
        (max(plan.torus_shape, default=0), sorted(plan.torus_shape), plan.torus_shape),
    )


def _recomputes(fixed: Fixed, options: Options) -> list[Recompute]:
    if fixed.recompute is not None and len(set(fixed.recompute)) == 1:
        modes = [fixed.recompute[0]]
    else:
        modes = list(Recompute)
    allowed = options.recompute_modes
    return [r for r in modes if allowed is None or r in allowed]


def _stage_modes(fixed: Fixed, pp: int) -> tuple[Recompute, ...] | None:
    """The scenario's recompute mode of each stage when it fixes one per stage, else None."""
    if fixed.recompute is not None and len(fixed.recompute) == pp and len(set(fixed.recompute)) > 1:
        return tuple(fixed.recompute)
    return None


def _k_choices(layout: Layout, num_layers: int, fixed: Fixed, options: Options) -> list[int] | None:
    """Allowed k = (layers + slot) / vp per stage (cost.plan.pipeline_slots); None = any;
    [] = the layout is impossible."""
    slots = pipeline_slots(num_layers, layout.pp, layout.vp)
    if slots is None or (num_layers + sum(slots)) // layout.vp < layout.pp + sum(slots):
        return []  # no split in units of vp, or too few for each stage's least k (1 + slot)
    split = exact_split(layout, num_layers, fixed, options)
    if split is not None:  # () : no valid split, so no k
        return sorted({(n + sl) // layout.vp for n, sl in zip(split, slots, strict=True)}) if split else []
    if not options.allow_uneven_stages:  # equal stages and chunks (no slots: vp | layers)
        if num_layers % (layout.pp * layout.vp):
            return []
        return [num_layers // (layout.pp * layout.vp)]
    return None


@dataclass
class _Candidates:
    kept: list[LayoutTables]
    num_layouts: int
    discarded_lb_s: float
    unfit: int
    out_of_time: bool = False  # bounding stopped at the deadline: the rest is bounded by its floor


def _bounded_tables(
    graph: LayerGraph,
    cluster: Cluster,
    job: Job,
    fixed: Fixed,
    options: Options,
    top: int,
    deadline: float = float("inf"),
    distinct: bool = False,
    shared: dict[tuple[object, ...], Any] | None = None,
) -> _Candidates:
    """Best-first branch and bound over the space (module docstring, 1-2), in three levels:

    0. a family (degrees, ep, micro-batch, vp, SP), bounded by its compute floor through the
       1F1B bound (cost.floor.compute_floor_s, pipeline_lower_bound_s);
    1. a family with a ZeRO stage, bounded by quick_lower_bound_s of its terms with every group on
       consecutive ranks (``stage_terms(packed=True)``: no rank order costs less);
    2. a layout (that and a rank order), bounded by quick_lower_bound_s of its own terms;
    then its tables (memory-aware bounds, an upper bound). Each level's bound is at most the next
    one's, so popping the least bound first and stopping once it exceeds the K-th best upper bound
    examines exactly what cannot be proven worse. At ``deadline`` it stops with the least bound
    left as a valid bound on everything not examined. ``distinct``: the K-th best upper bound
    counts one per layout_key (near-duplicates are not listed, solver/distinct.py). ``shared``:
    stage_terms' cache, kept by a caller that searches one instance more than once."""
    spec = graph.spec
    recomputes = _recomputes(fixed, options)
    if not recomputes:
        raise NoLayoutError("no recompute mode is both fixed and allowed")
    uniform = options.uniform_recompute
    partial = searches_partial(graph, fixed, options, recomputes)  # constraints/recompute_layers.py
    lb_modes = bound_modes(recomputes, partial)
    packed = inner_tiers_fastest(cluster) or cluster.torus is not None  # torus: Spans.torus_floor
    shared = {} if shared is None else shared
    order_cache: OrderCache = {}
    floors: dict[tuple[object, ...], Any] = {}
    same_layers = len(graph.kind_blocks) == 1  # pooled_pipeline_floor_s
    heap: list[tuple[Any, ...]] = []
    tick = itertools.count()
    space = families(spec, cluster, job.seq_len, job.global_batch, fixed, options, deadline)
    for i, family in enumerate(space):
        if i % 256 == 0 and time.perf_counter() > deadline:
            raise OutOfTime("the time limit ran out while bounding the layout families")
        ks = _k_choices(family, spec.num_layers, fixed, options)
        if ks == []:
            continue
        floor_key = plan_key(family, FLOOR_IGNORES)
        if floor_key not in floors:
            floors[floor_key] = (
                pool_floors(graph, family, job, cluster)
                if cluster.pools
                else compute_floor_s(graph, family, job, cluster)
            )
        m = job.global_batch // (family.micro_batch * family.dp)
        if cluster.pools:  # per-pool floors (cost/pools.py)
            floor = pooled_pipeline_floor_s(floors[floor_key], family, m, same_layers)
        else:
            floor = pipeline_lower_bound_s(floors[floor_key], family.pp, family.vp, m)
        heap.append((floor, next(tick), 0, family, ks))
    if not heap:
        raise NoLayoutError("no layout satisfies the divisibility rules")
    heapq.heapify(heap)
    uppers: list[float] = []
    best_upper: dict[Any, float] = {}  # per layout_key when ``distinct``, else per layout
    computed: list[LayoutTables] = []
    unfit_terms: list[StageTerms] = []  # families with a ZeRO stage whose no split fits
    unfit, discarded, out_of_time = 0, float("inf"), False
    passed = 0  # layouts that reached level 2 (under a layout filter: that passed it)
    while heap:
        cutoff = uppers[top - 1] * (1 + 1e-9) if len(uppers) >= top else float("inf")
        bound, _, level, plan, ks = heapq.heappop(heap)
        if bound > cutoff:
            discarded = min(discarded, bound)
            break
        if time.perf_counter() > deadline:
            discarded, out_of_time = min(discarded, bound), True
            break
        if level == 0:
            for zero in zeros(plan, fixed, options=options):
                p = replace(plan, zero=zero)
                terms = stage_terms(graph, p, job, cluster, shared, packed=packed)
                b = bound
                if packed:
                    b = max(bound, quick_lower_bound_s(terms, lb_modes, spec.num_layers))
                heapq.heappush(heap, (b, next(tick), 1, (p, terms), ks))
        elif level == 1:
            plan, terms = plan
            if not _fits(terms, recomputes, spec.num_layers, ks, uniform, _stage_modes(fixed, plan.pp)):
                unfit_terms.append(terms)
                continue
            for order, shape in placements(plan, cluster, fixed, options, cache=order_cache):
                passed += 1
                layout = replace(plan, order=order, torus_shape=shape)
                terms = stage_terms(graph, layout, job, cluster, shared)
                b = max(bound, quick_lower_bound_s(terms, lb_modes, spec.num_layers))
                heapq.heappush(heap, (b, next(tick), 2, (layout, terms), ks))
        else:
            layout, terms = plan
            tab = build_tables(
                graph,
                cluster,
                job,
                layout,
                recomputes,
                ks,
                terms,
                uniform,
                exact_split(layout, spec.num_layers, fixed, options),
                _stage_modes(fixed, layout.pp),
                partial=partial,
                partial_fixed=fixed.recompute_layers is not None,
            )
            if not fits_some_split(tab.k_max, layout.pp, tab.k_total, uniform, tab.slots):
                unfit += 1
                continue
            computed.append(tab)
            if tab.upper_bound_s < float("inf"):
                key: object = layout_key(tab.plan) if distinct else len(computed)
                best_upper[key] = min(best_upper.get(key, float("inf")), tab.upper_bound_s)
                uppers = heapq.nsmallest(top, best_upper.values())
    num_layouts = _space_size(space, spec, fixed, options, deadline)
    if not computed and out_of_time:
        return _Candidates([], num_layouts, discarded, unfit + len(unfit_terms), out_of_time)
    if not computed and options.layout_filter is not None:  # unfit families it would refuse
        unfit_terms = [t for t in unfit_terms if orders(t.plan, cluster, fixed, options, cache=order_cache)]
        if not passed and not unfit_terms:
            raise NoLayoutError("no layout passes the layout filter")
    if not computed:  # every family was examined and none fits (memory ignores the order)
        least = _least_memory(graph.spec.num_layers, recomputes, unfit_terms)
        raise NoFitError("no plan fits memory", least, cluster.memory_capacity_bytes)
    cutoff = uppers[top - 1] * (1 + 1e-9) if len(uppers) >= top else float("inf")
    kept = [t for t in computed if t.lower_bound_s <= cutoff]
    left_out = [t.lower_bound_s for t in computed if t.lower_bound_s > cutoff]
    return _Candidates(kept, num_layouts, min([discarded] + left_out), unfit + len(unfit_terms), out_of_time)


def _fits(
    terms: StageTerms,
    recomputes: list[Recompute],
    num_layers: int,
    ks: list[int] | None,
    uniform: bool = False,
    stage_modes: tuple[Recompute, ...] | None = None,
) -> bool:
    """Some split of the layout's layers fits memory (the rank order does not change memory);
    with several block kinds, of the runs of blocks each rank can hold at their least memory
    (caps.layer_caps: a relaxation)."""
    pp, vp = terms.plan.pp, terms.plan.vp
    slots = pipeline_slots(num_layers, pp, vp) or (0,) * pp
    k_total = (num_layers + sum(slots)) // vp
    k_hi = max(ks) if ks else k_total - (pp - 1)
    return fits_some_split(
        layer_caps(terms, recomputes, k_hi, stage_modes, num_layers), pp, k_total, uniform, slots
    )


def _space_size(space: list[Layout], spec: ModelSpec, fixed: Fixed, options: Options, deadline: float) -> int:
    """Layouts in the space: families x ZeRO stages x rank orders (before dominance pruning);
    0 when the deadline has passed (the count is a report, not part of the proof)."""
    cache: dict[tuple[object, ...], Any] = {}
    total = 0
    for i, f in enumerate(space):
        if i % 1024 == 0 and time.perf_counter() > deadline:
            return 0
        if _k_choices(f, spec.num_layers, fixed, options) != []:
            total += len(zeros(f, fixed, options=options)) * num_orders(f, fixed, options, cache)
    return total


def _least_memory(num_layers: int, recomputes: list[Recompute], unfit: list[StageTerms]) -> float:
    """Least peak memory per device any layout needs, over its even split and modes."""
    best = float("inf")
    for terms in unfit:
        pp, vp = terms.plan.pp, terms.plan.vp
        split = even_layers(num_layers, pp, vp) or even_split(num_layers, pp)
        counts = terms.stage_counts(terms.plan.plan(split, (Recompute.NONE,) * pp))
        peak = max(
            min(stage_memory(terms, s, counts[s], r).total_bytes for r in recomputes) for s in range(pp)
        )
        best = min(best, peak)
    return best


class _Progress(cp_model.CpSolverSolutionCallback):
    """Reports each improving plan and the bound; never constrains the search."""

    def __init__(self, report: Callable[[str], None], mv: ModelVars, start: float) -> None:
        super().__init__()
        self._report, self._mv, self._start = report, mv, start

    def _seconds(self, value: float) -> float:
        return from_ticks(value, self._mv.layouts[0].tables.resolution_s) / self._mv.scale

    def on_solution_callback(self) -> None:
        p = self._mv.chosen(self).tables.plan
        self._report(
            f"  {time.perf_counter() - self._start:6.2f} s  best "
            f"{self._seconds(self.objective_value):.4f} s  bound "
            f"{self._seconds(self.best_objective_bound):.4f} s  (dp={p.dp} tp={p.tp} "
            f"pp={p.pp} cp={p.cp} ep={p.ep} etp={p.expert_tp} vp={p.vp} mb={p.micro_batch} "
            f"zero={p.zero})"
        )


def _stage_rules(model: cp_model.CpModel, mv: ModelVars, fixed: Fixed) -> None:
    for lv in mv.layouts:
        pp, vp = lv.tables.plan.pp, lv.tables.plan.vp
        if lv.tables.split:  # the scenario's fixed split, or the one the framework builds
            for s, n in enumerate(lv.tables.split):
                model.add(lv.k(s) == ((n + lv.tables.slot(s)) // vp) * lv.use)
        if fixed.recompute is not None and len(fixed.recompute) == pp:
            for s, r in enumerate(fixed.recompute):
                model.add(lv.rec[s][r] == lv.use)


def _tie_break(model: cp_model.CpModel, mv: ModelVars, num_layers: int) -> cp_model.LinearExpr | int:
    """Secondary objective, in priority order: layout rank, recompute (none < selective < full),
    then the distance sum_s |k_s - even_s| from the even split (tables.even_layers)."""
    ranked = sorted(mv.layouts, key=lambda lv: (layout_rank(lv.tables.plan), lv.index))
    rank_of = {lv.index: i for i, lv in enumerate(ranked)}
    max_pp = max(len(lv.rec) for lv in mv.layouts)
    rec_unit = 2 * num_layers + 1  # above the largest distance
    rank_unit = 2 * max_pp * rec_unit + 1  # above the largest recompute penalty
    penalty = {Recompute.NONE: 0, Recompute.SELECTIVE: 1, Recompute.FULL: 2}
    terms = [rank_unit * rank_of[lv.index] * lv.use for lv in mv.layouts]
    for lv in mv.layouts:
        for rs in lv.rec:
            terms += [penalty[r] * rec_unit * b for r, b in rs.items()]
        plan = lv.tables.plan
        even = even_layers(num_layers, plan.pp, plan.vp)
        for s, n in enumerate(even or ()):
            dist = model.new_int_var(0, lv.tables.k_total, f"dist_{lv.index}_{s}")
            k_even = (n + lv.tables.slot(s)) // plan.vp
            model.add(dist >= lv.k(s) - k_even * lv.use)
            model.add(dist >= k_even * lv.use - lv.k(s))
            terms.append(dist)
    return sum(terms)


def _configure(solver: cp_model.CpSolver, opts: SolverOptions, seconds: float) -> None:
    solver.parameters.max_time_in_seconds = max(0.01, seconds)
    solver.parameters.num_workers = opts.num_workers
    solver.parameters.random_seed = opts.random_seed
    solver.parameters.relative_gap_limit = opts.relative_gap
    solver.parameters.log_search_progress = opts.log_search_progress
    solver.parameters.linearization_level = 2  # the model is linear: use its full LP relaxation
    solver.parameters.use_lns = False  # one small model per layout; LNS only adds noise
    # every worker runs a full search: with 2 workers CP-SAT otherwise runs one (default_lp)
    # beside feasibility jump and local search, whose first solutions the warm start
    # (add_hint) already gives. default_lp and no_lp together proved a 128-layer hybrid's
    # pp 8 x vp 4 layout worse than the cap in ~1 s against ~3-4 s; DeepSeek-V3's layouts
    # solved as fast as before
    solver.parameters.num_full_subsolvers = opts.num_workers
    # presolve gains nothing on a model of a few dozen variables, and on tick domains of 10^10
    # and more OR-Tools 9.15's presolve ran 10 s past max_time_in_seconds on a 12-variable
    # model (Qwen3-235B on 1,024 B200); without it each layout solves in ~10 ms
    solver.parameters.cp_model_presolve = False


def _solve_layout(
    tab: LayoutTables,
    graph: LayerGraph,
    fixed: Fixed,
    opts: SolverOptions,
    cap: Fraction | None,
    deadline: float,
    progress: Callable[[str], None] | None,
    start: float,
) -> tuple[str, Solution | None, float, Fraction]:
    """One layout's own model, its step at most ``cap`` ticks when given (the best plan so far:
    ties stay feasible). Returns (status, solution, bound s, step in ticks: objective / scale,
    exact, so that layouts with different objective scales compare without rounding)."""
    model, mv = build_model([tab], fixed.recompute_layers)
    _stage_rules(model, mv, fixed)
    if cap is not None:
        model.add(mv.objective <= math.floor(cap * mv.scale))
    if tab.upper_plan is not None and fixed.layers_per_stage is None and fixed.recompute is None:
        add_hint(model, mv, 0, list(tab.upper_plan.layers_per_stage), list(tab.upper_plan.recompute))
    solver = cp_model.CpSolver()
    # the time limit covers bounding too; CP-SAT still gets a moment to return the warm start
    _configure(solver, opts, max(MIN_CP_SAT_S, deadline - time.perf_counter()))
    cb = _Progress(progress, mv, start) if progress else None
    status = solver.solve(model, cb) if cb else solver.solve(model)
    name = solver.status_name(status)
    res = tab.resolution_s
    bound = from_ticks(solver.best_objective_bound, res) / mv.scale
    if name not in ("OPTIMAL", "FEASIBLE"):
        return name, None, bound, Fraction(0)
    lv = mv.layouts[0]
    layers, recs = lv.extract(solver)
    plan = tab.plan.plan(
        tuple(layers), tuple(recs), recompute_layers=partial_counts(lv, solver, fixed.recompute_layers)
    )
    ticks = int(solver.value(mv.objective))
    return name, Solution(plan, from_ticks(ticks, res) / mv.scale), bound, Fraction(ticks, mv.scale)


def _break_ties(
    tab: LayoutTables,
    graph: LayerGraph,
    fixed: Fixed,
    opts: SolverOptions,
    sol: Solution,
    ticks: Fraction,
    deadline: float,
) -> Solution:
    """The layout's plan at its proven optimum ``ticks`` that the tie-break prefers (no recompute
    first, then the even split): a second solve with the step fixed, one worker, so the same
    tied plan comes out for any worker count. Run once, for the layout that wins."""
    model, mv = build_model([tab], fixed.recompute_layers)
    _stage_rules(model, mv, fixed)
    model.add(mv.objective <= int(ticks * mv.scale))
    model.minimize(_tie_break(model, mv, graph.spec.num_layers))
    solver = cp_model.CpSolver()
    _configure(solver, replace(opts, num_workers=1), max(MIN_CP_SAT_S, deadline - time.perf_counter()))
    if solver.status_name(solver.solve(model)) != "OPTIMAL":
        return sol
    layers, recs = mv.layouts[0].extract(solver)
    plan = tab.plan.plan(
        tuple(layers),
        tuple(recs),
        recompute_layers=partial_counts(mv.layouts[0], solver, fixed.recompute_layers),
    )
    return Solution(plan, sol.objective_s)


def _solve_once(
    kept: list[LayoutTables],
    graph: LayerGraph,
    fixed: Fixed,
    opts: SolverOptions,
    excluded: list[int],
    deadline: float,
    progress: Callable[[str], None] | None,
    start: float,
    memo: dict[int, tuple[Any, ...]] | None = None,
) -> tuple[str, Solution | None, float, int | None]:
    """The best plan over the kept layouts but ``excluded`` (module docstring, 3).

    Each layout is solved in its own model, least lower bound first, capped by the best
    objective so far; once a layout's lower bound exceeds it, that layout and every later one
    are proven worse. Ties go to the better layout_rank. One model per layout keeps each LP
    relaxation tight (a model over several layouts mixes them fractionally and proved slowly).
    ``memo`` keeps across the top-K rounds each layout's proven optimum (a cap does not change
    an optimum found under it) or the cap it was proven worse than, so a layout is solved to
    optimality once and not re-proven worse than a cap at least as low."""
    order = sorted(
        (i for i in range(len(kept)) if i not in excluded),
        key=lambda i: (kept[i].lower_bound_s, layout_rank(kept[i].plan), i),
    )
    best: tuple[Fraction, tuple[object, ...], int, Solution] | None = None  # ticks, rank, index, solution
    statuses: list[str] = []
    winner_optimal: dict[int, bool] = {}  # layouts solved to their own optimum (tie-break them)
    proven, bound = True, float("inf")
    for i in order:
        tab = kept[i]
        if best is not None and tab.lower_bound_s > best[3].objective_s + tolerance_s(
            tab.num_micro_batches, tab.plan.pp, tab.rounding_k, tab.resolution_s
        ):
            bound = min(bound, tab.lower_bound_s)
            break
        if statuses and time.perf_counter() > deadline:  # one layout may start past it
            proven, bound = False, min(bound, tab.lower_bound_s)
            break
        cached = memo.get(i) if memo is not None else None
        if cached is not None and (cached[0] == "OPTIMAL" or (best and best[0] <= cached[3])):
            name, sol, bnd, ticks = cached  # INFEASIBLE: its step exceeds a cap >= the best
        else:
            name, sol, bnd, ticks = _solve_layout(
                tab, graph, fixed, opts, best[0] if best else None, deadline, progress, start
            )
            if memo is not None and name == "OPTIMAL":
                memo[i] = (name, sol, bnd, ticks)
            elif memo is not None and name == "INFEASIBLE" and best is not None:
                memo[i] = (name, sol, bnd, best[0])  # the cap it was proven worse than
        statuses.append(name)
        if name == "INFEASIBLE":
            continue  # no plan of this layout within the cap: proven no better
        if sol is None or name != "OPTIMAL":
            proven, bound = False, min(bound, bnd)
        if sol is not None and (best is None or (ticks, layout_rank(tab.plan)) < best[:2]):
            best = (ticks, layout_rank(tab.plan), i, sol)
            winner_optimal[i] = name == "OPTIMAL"
    if best is None:
        name = "INFEASIBLE" if statuses and all(n == "INFEASIBLE" for n in statuses) else "UNKNOWN"
        return name, None, bound, None
    ticks, _, i, sol = best
    if winner_optimal.get(i):
        sol = _break_ties(kept[i], graph, fixed, opts, sol, ticks, deadline)
    return ("OPTIMAL" if proven else "FEASIBLE"), sol, min(bound, sol.objective_s), i


def solve_instance(
    graph: LayerGraph,
    cluster: Cluster,
    job: Job,
    fixed: Fixed,
    options: Options,
    opts: SolverOptions,
    progress: Callable[[str], None] | None = None,
    shared: dict[tuple[object, ...], Any] | None = None,
) -> Outcome:
    """The K best distinct-layout plans (with ``opts.duplicate_rel``: distinct in a degree or
    mode, solver/distinct.py), each runner-up proven the next best, in order, stopping at the
    time limit; status OPTIMAL only when CP-SAT proved it. ``shared``: a dict the caller keeps
    across searches of the same graph, cluster and job (cost terms computed once)."""
    start = time.perf_counter()
    deadline = start + opts.time_limit_s
    cand = _bounded_tables(
        graph, cluster, job, fixed, options, opts.top, deadline, opts.duplicate_rel is not None, shared
    )
    resolution_s = resolution_for(
        max((t.ceiling_s() for t in cand.kept), default=0.0), max((t.plan.vp for t in cand.kept), default=1)
    )
    kept = [replace(t, resolution_s=resolution_s) for t in cand.kept]
    if progress and cand.out_of_time:
        progress(
            f"paraplan: the time limit ran out while bounding; {len(kept)} layouts examined "
            f"go to CP-SAT ({time.perf_counter() - start:.2f} s)"
        )
    elif progress:
        progress(
            f"paraplan: {cand.num_layouts} layouts; {cand.num_layouts - len(kept)} proven "
            f"worse by bound or dominance or unable to fit; {len(kept)} in the CP-SAT model "
            f"({time.perf_counter() - start:.2f} s)"
        )
    solutions: list[Solution] = []
    excluded: list[int] = []
    memo: dict[int, tuple[Any, ...]] = {}
    status, bound = "UNKNOWN", float("inf")
    while len(solutions) < opts.top:
        first = not solutions
        if len(excluded) == len(kept) or (not first and time.perf_counter() > deadline):
            break
        name, sol, bnd, idx = _solve_once(
            kept, graph, fixed, opts, excluded, deadline, progress if first else None, start, memo
        )
        if first and name == "INFEASIBLE" and sol is None and not cand.out_of_time:
            # every kept layout passed the memory relaxations (caps.layer_caps) and CP-SAT,
            # uncapped, proved that none of its splits fits: as when no family fits at all
            least = _least_memory(graph.spec.num_layers, _recomputes(fixed, options), [t.terms for t in kept])
            raise NoFitError("no plan fits memory", least, cluster.memory_capacity_bytes)
        if first:
            status, bound = name, min(bnd, cand.discarded_lb_s)
            if (
                status == "OPTIMAL"
                and cand.out_of_time
                and sol is not None
                and idx is not None
                and bound < sol.objective_s - tolerance_s(1, 1, kept[idx].rounding_k, resolution_s)
            ):
                status = "FEASIBLE"  # optimal among the layouts examined before the deadline
        elif name != "OPTIMAL":
            break  # a runner-up is listed only when proven the next best
        if sol is None or idx is None:
            break
        _check(graph, cluster, job, sol, kept[idx].rounding_k, resolution_s)
        excluded.append(idx)
        if (
            not first
            and opts.duplicate_rel is not None
            and is_near_duplicate(
                sol.plan, sol.objective_s, [(s.plan, s.objective_s) for s in solutions], opts.duplicate_rel
            )
        ):
            continue  # a near-duplicate of a listed plan: the next distinct one instead
        solutions.append(sol)
    counted = max(cand.num_layouts, len(kept))  # the count stops at the deadline
    return Outcome(status, solutions, bound, time.perf_counter() - start, counted, counted - len(kept))


def _check(
    graph: LayerGraph, cluster: Cluster, job: Job, sol: Solution, k_total: int, resolution_s: float
) -> None:
    """Invariant: cost.evaluate re-scores the plan to the objective, and it fits memory."""
    b = evaluate(graph, cluster, job, sol.plan)
    tol = tolerance_s(b.num_micro_batches, sol.plan.pp, k_total, resolution_s)
    if not b.fits or abs(b.step_time_s - sol.objective_s) > tol:
        raise AssertionError(
            f"solver/evaluator mismatch: objective {sol.objective_s!r} s vs evaluate "
            f"{b.step_time_s!r} s (tolerance {tol:.2e} s), fits={b.fits}, plan {sol.plan}"
        )
