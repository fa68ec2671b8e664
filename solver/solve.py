"""Solve: enumerate layouts, prune by bounds, build and solve the CP-SAT model, re-check the plan.

1. Layouts (space.py) are bounded best-first in levels (family, + ZeRO stage, + rank order, then
   tables; candidates.py), cheapest bound first, until the least bound left exceeds the
   K-th best upper bound found so far (branch and bound).
2. Layouts whose lower bound exceeds that K-th best upper bound cannot hold any of the K best plans
   and stay out of CP-SAT. Both steps are exact, so OPTIMAL means optimal over the whole space;
   the reported bound is min(CP-SAT's bounds, the least lower bound left out).
3. Each kept layout is solved in its own CP-SAT model (model.py), least lower bound first and
   capped by the best objective so far, until a layout's lower bound exceeds it; within a layout
   a second solve with the step fixed breaks ties (no recompute first, then the even split), and
   across layouts the better layout_rank wins, so the plan does not depend on the worker count
   (the solver parameters, tie-break objective and progress reports: cpsat.py).
4. Every plan is re-evaluated by ``cost.evaluate``: it must fit and match the objective within
   scale.tolerance_s.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from ortools.sat.python import cp_model
from paraplan.cost import Job, Layout, Plan, evaluate
from paraplan.cost.plan import PartialPlan
from paraplan.graph import LayerGraph
from paraplan.hardware import Cluster
from paraplan.solver.candidates import (
    NoFitError,
    NoLayoutError,
    allowed_recomputes,
    bounded_tables,
    least_memory,
)
from paraplan.solver.constraints.recompute_layers import partial_counts
from paraplan.solver.cpsat import Progress, SolverOptions, configure, layout_rank, stage_rules, tie_break
from paraplan.solver.distinct import is_near_duplicate
from paraplan.solver.gc_pause import gc_paused
from paraplan.solver.model import add_hint, build_model
from paraplan.solver.scale import from_ticks, objective_scale, resolution_for, tolerance_s
from paraplan.solver.space import Options, OutOfTime
from paraplan.solver.tables import LayoutTables

__all__ = [
    "SolverOptions",
    "Solution",
    "Outcome",
    "Seen",
    "solve_instance",
    "NoLayoutError",
    "OutOfTime",
    "NoFitError",
    "layout_rank",
]


MIN_CP_SAT_S = 0.2  # past the deadline, time CP-SAT still gets to return the warm start


@dataclass(frozen=True, slots=True)
class Solution:
    plan: Plan
    objective_s: float


@dataclass(frozen=True, slots=True)
class Seen:
    """With ``top`` = 1, the runner-up proven lazily (``_runner_up``): the best plan of another
    layout (not a near-duplicate of the best) that the search saw, proven the next best when the
    search showed it (``proven``); ``others_bound_s``: no plan of any layout but the best's is
    faster (proven; the runner-up's own step when proven). ``plan`` None: none seen."""

    plan: Solution | None
    proven: bool
    others_bound_s: float


@dataclass(frozen=True, slots=True)
class Outcome:
    status: str
    solutions: list[Solution]  # best first, distinct layouts
    bound_s: float
    wall_s: float
    num_layouts: int
    num_pruned: int
    seen: Seen | None = None  # top = 1: the runner-up the search saw (``Seen``)


def _solve_layout(
    tab: LayoutTables,
    graph: LayerGraph,
    fixed: PartialPlan,
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
    stage_rules(model, mv, fixed)
    if cap is not None:
        model.add(mv.objective <= math.floor(cap * mv.scale))
    if tab.upper_plan is not None and fixed.layers_per_stage is None and fixed.recompute is None:
        add_hint(model, mv, 0, list(tab.upper_plan.layers_per_stage), list(tab.upper_plan.recompute))
    solver = cp_model.CpSolver()
    # the time limit covers bounding too; CP-SAT still gets a moment to return the warm start
    configure(solver, opts, max(MIN_CP_SAT_S, deadline - time.perf_counter()))
    cb = Progress(progress, mv, start) if progress else None
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
    fixed: PartialPlan,
    opts: SolverOptions,
    sol: Solution,
    ticks: Fraction,
    deadline: float,
) -> Solution:
    """The layout's plan at its proven optimum ``ticks`` that the tie-break prefers (no recompute
    first, then the even split): a second solve with the step fixed, one worker, so the same
    tied plan comes out for any worker count. Run once, for the layout that wins."""
    model, mv = build_model([tab], fixed.recompute_layers)
    stage_rules(model, mv, fixed)
    model.add(mv.objective <= int(ticks * mv.scale))
    model.minimize(tie_break(model, mv, graph.spec.num_layers))
    solver = cp_model.CpSolver()
    configure(solver, replace(opts, num_workers=1), max(MIN_CP_SAT_S, deadline - time.perf_counter()))
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
    fixed: PartialPlan,
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
    fixed: PartialPlan,
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
    with gc_paused():  # the Python branch and bound: no cyclic collections (solver/gc_pause.py)
        cand = bounded_tables(
            graph, cluster, job, fixed, options, opts.top, deadline, opts.duplicate_rel is not None, shared
        )
    resolution_s = resolution_for(
        max((t.ceiling_s() for t in cand.kept), default=0.0),
        objective_scale([t.terms.bubble_weight.denominator for t in cand.kept]),
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
    seen = None
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
            least = least_memory(
                graph.spec.num_layers, allowed_recomputes(fixed, options), [t.terms for t in kept]
            )
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
        if first and opts.top == 1 and opts.runner_up_seen:  # the runner-up this search saw (Seen)
            where = (graph, cluster, job, deadline)
            seen = _runner_up(kept, cand.left_out, cand.unexamined_lb_s, memo, idx, sol, fixed, opts, where)
        excluded += [j for j, t in enumerate(kept) if t.plan == kept[idx].plan]  # its variants too
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
    wall_s = time.perf_counter() - start
    return Outcome(status, solutions, bound, wall_s, counted, counted - len(kept), seen)


def _runner_up(
    kept: list[LayoutTables],
    left_out: list[LayoutTables],
    unexamined_lb_s: float,
    memo: dict[int, tuple[Any, ...]],
    best_index: int,
    best: Solution,
    fixed: PartialPlan,
    opts: SolverOptions,
    where: tuple[LayerGraph, Cluster, Job, float],
) -> Seen:
    """The runner-up of a ``top`` = 1 search from what it saw (``Seen``), with no second search.

    Plans of other layouts seen: each kept layout CP-SAT solved to its own optimum (``memo``: a
    cap does not change an optimum found under it; tie-broken as the winner is) and each built
    table's upper-bound plan (a real plan, tables.build_tables; not where the scenario fixes
    recompute_layers, which it does not read); least step first (then layout_rank),
    near-duplicates of the best skipped (solver/distinct.py), each re-scored by cost.evaluate
    (it must fit). A layout's plans are at least: its optimum when solved; the cap CP-SAT proved
    them above, less the rounding tolerance; else its table's lower bound; a layout never built,
    the heap's least bound when bounding stopped (``unexamined_lb_s``). The runner-up is proven
    the next best, as the top-2 search proves it, when it is its layout's optimum and no other
    layout's bound is below its step less the rounding tolerance (scale.tolerance_s)."""
    graph, cluster, job, deadline = where
    tables = kept + left_out
    own, res = kept[best_index].plan, kept[best_index].resolution_s
    lower: dict[Layout, float] = {}  # per layout (its variants together): least bound of its plans
    found: list[tuple[float, tuple[object, ...], int, int, Solution]] = []  # step, rank, proof, index
    uppers = fixed.recompute_layers is None
    for j, tab in enumerate(tables):
        if tab.plan == own:
            continue
        entry = memo.get(j) if j < len(kept) else None
        least = tab.lower_bound_s
        if entry is not None and entry[0] == "OPTIMAL":
            least = entry[1].objective_s
            found.append((least, layout_rank(tab.plan), 0, j, entry[1]))
        elif entry is not None:  # INFEASIBLE under a cap (ticks): its plans are above the cap
            tol = tolerance_s(tab.num_micro_batches, tab.plan.pp, tab.rounding_k, res)
            least = max(least, min(tab.upper_bound_s, from_ticks(entry[3], res) - tol))
        lower[tab.plan] = min(lower.get(tab.plan, float("inf")), least)
        if uppers and tab.upper_plan is not None:
            found.append(
                (tab.upper_bound_s, layout_rank(tab.plan), 1, j, Solution(tab.upper_plan, tab.upper_bound_s))
            )
    rel = opts.duplicate_rel
    for step_s, _, kind, j, sol in sorted(found, key=lambda f: f[:4]):
        if rel is not None and is_near_duplicate(sol.plan, step_s, [(best.plan, best.objective_s)], rel):
            continue
        tab = tables[j]
        if kind == 0:  # the layout's optimum: the tied plan the tie-break prefers
            sol = _break_ties(tab, graph, fixed, opts, sol, memo[j][3], deadline)
        if not evaluate(graph, cluster, job, sol.plan).fits:
            continue
        others = min([unexamined_lb_s] + [v for k, v in lower.items() if k != tab.plan])
        tol = tolerance_s(tab.num_micro_batches, tab.plan.pp, tab.rounding_k, res)
        if kind == 0 and others >= step_s - tol:
            return Seen(sol, True, step_s)
        return Seen(sol, False, min(others, lower[tab.plan]))
    return Seen(None, False, min([unexamined_lb_s, *lower.values()]))


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
