"""The CP-SAT model: choose one layout, its layer split and per-stage recompute, minimising step time.

solve.py builds it over one layout at a time (a list of one); the formulation below holds for
any number of layouts.

Instance -> candidate tables (tables.py: every number from cost/) -> variables -> constraints ->
objective -> solve -> extract. Over the kept layouts L (the others are proven worse by bound before
the model is built, see solve.py), with k = (layers + slot) / vp per stage (slot: Megatron's
embedding / loss slot on the first / last stage when vp does not divide the layers,
cost.split.pipeline_slots; 0 elsewhere) and all times in integer ticks:

Variables (every per-layout variable is 0 unless its layout is used)
    use[L]          Boolean; exactly one layout
    rec[L,s,r]      Boolean; sum_r rec[L,s,r] = use[L]: one recompute mode per stage
    x[L,s,r]        integer; k of stage s if it runs mode r, else 0
    y[L,q,s,r]      integer; blocks of kind q (not the base kind) stage s holds if it runs
                    mode r, else 0 (models with several block kinds; constraints/positions.py)
    tmax, dpmax, omax[L]   slowest stage time, exposed DP sync, optimizer (ticks)
Constraints (solver/constraints/)
    layers.add_layer_split     sum_{s,r} x = k_total use;  (1 + slot_s) rec <= x <= k_hi rec
                               (uniform recompute: rec[L,s,r] = rec[L,0,r])
    positions.add_positions    (several kinds) boundaries B_j linear in the k, e = P_q[B_j] by
                               AddElement, sum_r y[L,q,s,r] = blocks of kind q on stage s
    memory.add_memory          x[L,s,r] <= kmax[L,s,r] rec[L,s,r]   (peak memory fits)
    recompute_layers.add_recompute_layers   (partial recompute, one block kind) u[L,s] layers
                               per chunk stored under FULL: time, DP and memory rows linear in
                               u and p = [u >= 1]
                               (several kinds: M0 rec + M1 x + sum_q Mq y <= cap rec, kmax
                               then from the least kind: a cut)
    schedule.add_schedule      t[L,s] = sum_r T1_{s,r} x + T0_{s,r} rec (+ sum_q Tq y);
                               tmax = max_s t[L,s]
                               dpmax = max(0, max_s sum_r E1_{s,r} x + E0_{s,r} rec)
                               omax = max_s O1_s k[L,s] + O0_s use
                               (each max also as linear >= rows, which the LP relaxation uses)
    (per-layer coefficients are per stage: on a pooled cluster each stage's pool sets them;
    T0 is the cost/ line at vp k - slot layers: fixed - slot_s * per_layer, tables.py)
Objective
    minimise z = sum_L S m tmax + S w_L (sum_s t[L,s] - tmax) + S (dpmax + omax), w_L the
    layout's bubble weight (1/vp under 1F1B and interleaving; the schedule's, a fraction of
    denominator 1000 vp, cost/pp_schedule.py) and S the lcm of the w_L's denominators, with the
    cut z >= sum_L S LB_L use[L] (the layouts' lower bounds). Only the used layout's terms are
    non-zero, and z / S is cost.evaluate's step time: m max_s t_s + (sum_s t_s - max_s t_s) w
    + DP + optimizer, for every solution (the max equalities leave no slack), not only the
    optimum.
Ties are broken by a second solve with z fixed (see solve.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from ortools.sat.python import cp_model
from paraplan.cost import Recompute
from paraplan.solver.constraints.layers import add_layer_split
from paraplan.solver.constraints.memory import add_memory
from paraplan.solver.constraints.positions import add_positions
from paraplan.solver.constraints.recompute_layers import PartialVars, add_recompute_layers
from paraplan.solver.constraints.schedule import add_schedule, stage_lines
from paraplan.solver.scale import objective_scale
from paraplan.solver.tables import LayoutTables, TickTables

__all__ = ["LayoutVars", "ModelVars", "build_model"]


@dataclass
class LayoutVars:
    index: int
    tables: LayoutTables
    ticks: TickTables
    use: cp_model.IntVar
    rec: list[dict[Recompute, cp_model.IntVar]]
    x: list[dict[Recompute, cp_model.IntVar]]
    t: list[cp_model.LinearExpr | int] = field(default_factory=list)
    tmax: cp_model.IntVar | None = None
    dpmax: cp_model.IntVar | None = None
    omax: cp_model.IntVar | None = None
    step: cp_model.LinearExpr | None = None
    kind_n: dict[tuple[int, int], cp_model.LinearExpr] = field(default_factory=dict)  # (kind, stage)
    kind_y: dict[tuple[int, int, Recompute], cp_model.IntVar] = field(default_factory=dict)
    partial: PartialVars | None = None  # partial recompute (constraints/recompute_layers.py)

    def k(self, s: int) -> cp_model.LinearExpr:
        return cp_model.LinearExpr.sum(list(self.x[s].values()))

    def maxima(self) -> tuple[cp_model.IntVar, cp_model.IntVar, cp_model.IntVar]:
        """tmax, dpmax, omax (set by constraints.add_schedule)."""
        assert self.tmax is not None and self.dpmax is not None and self.omax is not None
        return self.tmax, self.dpmax, self.omax

    def extract(self, solver: cp_model.CpSolver) -> tuple[list[int], list[Recompute]]:
        vp, tab = self.tables.plan.vp, self.tables
        layers = [vp * sum(solver.value(v) for v in xs.values()) - tab.slot(s) for s, xs in enumerate(self.x)]
        recs = [next(r for r, b in rs.items() if solver.boolean_value(b)) for rs in self.rec]
        return layers, recs


@dataclass
class ModelVars:
    layouts: list[LayoutVars]
    objective: cp_model.IntVar
    scale: int  # objective ticks per tick of step time (objective_scale of the bubble weights)

    def chosen(self, solver: cp_model.CpSolver | cp_model.CpSolverSolutionCallback) -> LayoutVars:
        return next(lv for lv in self.layouts if solver.boolean_value(lv.use))


def _layout_vars(model: cp_model.CpModel, i: int, tab: LayoutTables) -> LayoutVars:
    pp = tab.plan.pp
    k_hi = max(tab.k_choices) if tab.k_choices else tab.k_total - (pp - 1)
    use = model.new_bool_var(f"use_{i}")
    rec = [{r: model.new_bool_var(f"rec_{i}_{s}_{r.value}") for r in tab.recomputes} for s in range(pp)]
    x = [{r: model.new_int_var(0, k_hi, f"x_{i}_{s}_{r.value}") for r in tab.recomputes} for s in range(pp)]
    return LayoutVars(i, tab, tab.ticks(), use, rec, x)


def build_model(
    kept: list[LayoutTables], recompute_layers: tuple[int, ...] | None = None
) -> tuple[cp_model.CpModel, ModelVars]:
    """The model of the module docstring over the kept layouts; layouts searching partial
    recompute (``tables.partial``) gain its rows, ``recompute_layers`` the scenario's fixed
    counts (constraints/recompute_layers.py)."""
    model = cp_model.CpModel()
    lvs = [_layout_vars(model, i, tab) for i, tab in enumerate(kept)]
    model.add_exactly_one(lv.use for lv in lvs)
    horizon = 1
    steps = []
    weights = [lv.tables.terms.bubble_weight for lv in lvs]  # 1/vp under (interleaved) 1F1B
    full = objective_scale([w.denominator for w in weights])
    for lv, weight in zip(lvs, weights, strict=True):
        add_layer_split(model, lv)
        if lv.tables.heterogeneous:
            add_positions(model, lv)
        add_memory(model, lv)
        if lv.tables.partial:
            add_recompute_layers(model, lv, recompute_layers)
        add_schedule(model, lv)
        plan = lv.tables.plan
        bubble = int(full * weight)  # S x the bubble weight, an integer (objective_scale)
        m = lv.tables.num_micro_batches
        tmax, dpmax, omax = lv.maxima()
        lv.step = full * m * tmax + bubble * (sum(lv.t) - tmax) + full * (dpmax + omax)
        horizon = max(
            horizon, full * (m + plan.pp) * _hi(model, tmax) + full * (_hi(model, dpmax) + _hi(model, omax))
        )
        steps.append(lv.step)
    z = model.new_int_var(0, horizon, "step_ticks_scaled")
    model.add(z == sum(steps))
    model.add(z >= sum(full * lv.ticks.lower_bound * lv.use for lv in lvs))
    model.minimize(z)
    return model, ModelVars(lvs, z, full)


def _hi(model: cp_model.CpModel, var: cp_model.IntVar) -> int:
    return list(model.proto.variables[var.index].domain)[-1]


def add_hint(
    model: cp_model.CpModel, mv: ModelVars, index: int, layers: list[int], recs: list[Recompute]
) -> None:
    """Warm start: a complete assignment for the given layout's split and modes (every other
    layout's variables at 0), so CP-SAT starts from that plan's objective."""
    for lv in mv.layouts:
        chosen = lv.index == index
        model.add_hint(lv.use, chosen)
        tk, vp = lv.ticks, lv.tables.plan.vp
        counts = None
        if chosen and tk.kinds:
            counts = lv.tables.terms.stage_counts(lv.tables.plan.plan(tuple(layers), tuple(recs)))
        t_max = e_max = o_max = 0
        for s in range(lv.tables.plan.pp):
            k = (layers[s] + lv.tables.slot(s)) // vp if chosen else 0
            for r in lv.tables.recomputes:
                on = chosen and r is recs[s]
                model.add_hint(lv.rec[s][r], on)
                model.add_hint(lv.x[s][r], k if on else 0)
                for q in tk.kinds:
                    model.add_hint(lv.kind_y[(q, s, r)], counts[s][q] if on and counts else 0)
            if chosen:
                n = {q: counts[s][q] for q in tk.kinds} if counts else {}
                rec = {r: int(r is recs[s]) for r in lv.tables.recomputes}
                y = {(q, r): n[q] * rec[r] for q in tk.kinds for r in rec}
                lines = stage_lines(tk, s, rec, {r: k * on for r, on in rec.items()}, k, 1, y, n)
                t_max = max(t_max, cast(int, lines.time))
                e_max = max(e_max, cast(int, lines.exposed_dp))
                o_max = max(o_max, cast(int, lines.optimizer))
        tmax, dpmax, omax = lv.maxima()
        model.add_hint(tmax, t_max)
        model.add_hint(dpmax, e_max)
        model.add_hint(omax, o_max)
