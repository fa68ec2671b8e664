"""The CP-SAT side of one layout's solve: SolverOptions and the parameters they set, the
scenario's fixed split and modes as constraints, the tie-break objective and progress reports.

``layout_rank`` orders equally fast layouts (solve.py picks the better rank across layouts), and
``tie_break`` is the secondary objective of the second solve that picks one plan among a
layout's ties: layout rank, then no recompute first, then the distance from the even split. The
progress callback only reports; it never constrains the search.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ortools.sat.python import cp_model
from paraplan.cost import DEFAULT_ORDER, Layout, Recompute
from paraplan.cost.plan import PartialPlan
from paraplan.solver.model import ModelVars
from paraplan.solver.scale import from_ticks
from paraplan.solver.tables import even_layers

__all__ = [
    "SolverOptions",
    "layout_rank",
    "Progress",
    "stage_rules",
    "tie_break",
    "configure",
]


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
    # top = 1: also name the best plan of another layout the search saw, and whether it is
    # proven the next best (solve.py Seen: the explanation's runner-up without a second proof)
    runner_up_seen: bool = False


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


class Progress(cp_model.CpSolverSolutionCallback):
    """Reports each improving plan and the bound; never constrains the search."""

    def __init__(self, report: Callable[[str], None], mv: ModelVars, start: float) -> None:
        super().__init__()
        self._report, self._mv, self._start = report, mv, start

    def _seconds(self, value: float) -> float:
        return from_ticks(value, self._mv.layouts[0].tables.resolution_s) / self._mv.scale

    def on_solution_callback(self) -> None:
        p = self._mv.chosen(self).tables.plan
        best, bound = self._seconds(self.objective_value), self._seconds(self.best_objective_bound)
        gap = max(0.0, (best - bound) / best) if best > 0 else 0.0
        self._report(
            f"  {time.perf_counter() - self._start:6.2f} s  best {best:.4f} s  bound "
            f"{bound:.4f} s  gap {gap:.2%}  (dp={p.dp} tp={p.tp} "
            f"pp={p.pp} cp={p.cp} ep={p.ep} etp={p.expert_tp} vp={p.vp} mb={p.micro_batch} "
            f"zero={p.zero})"
        )


def stage_rules(model: cp_model.CpModel, mv: ModelVars, fixed: PartialPlan) -> None:
    for lv in mv.layouts:
        pp, vp = lv.tables.plan.pp, lv.tables.plan.vp
        if lv.tables.split:  # the scenario's fixed split, or the one the framework builds
            for s, n in enumerate(lv.tables.split):
                model.add(lv.k(s) == ((n + lv.tables.slot(s)) // vp) * lv.use)
        if fixed.recompute is not None and len(fixed.recompute) == pp:
            for s, r in enumerate(fixed.recompute):
                model.add(lv.rec[s][r] == lv.use)


def tie_break(model: cp_model.CpModel, mv: ModelVars, num_layers: int) -> cp_model.LinearExpr | int:
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


def configure(solver: cp_model.CpSolver, opts: SolverOptions, seconds: float) -> None:
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
