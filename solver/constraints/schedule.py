"""Schedule: stage times, the slowest stage, exposed DP sync and the optimizer step."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple, TypeAlias

from ortools.sat.python import cp_model
from paraplan.cost import Recompute

if TYPE_CHECKING:
    from paraplan.solver.model import LayoutVars
    from paraplan.solver.tables import TickTables

__all__ = ["add_schedule", "Lin", "StageLines", "stage_lines"]

# A linear expression over the model's variables or, for a warm start, a number. Narrower than
# cp_model.LinearExprT, whose numpy integers do not add to a LinearExpr in OR-Tools' stubs.
Lin: TypeAlias = "cp_model.LinearExpr | int"


class StageLines(NamedTuple):
    """One stage's time, exposed DP sync and optimizer step, in ticks."""

    time: Lin
    exposed_dp: Lin
    optimizer: Lin


def stage_lines(
    tk: TickTables,
    s: int,
    rec: Mapping[Recompute, Lin],
    x: Mapping[Recompute, Lin],
    k: Lin,
    use: Lin,
    y: Mapping[tuple[int, Recompute], Lin],
    n: Mapping[int, Lin],
) -> StageLines:
    """t = sum_r T1_{s,r} x_r + T0_{s,r} rec_r (+ sum_{q,r} Tq_{s,r} y_{q,r}); the exposed DP
    line alike with E; o = O1_s k + O0_s use (+ sum_q Oq_s n_q). Over the model's variables
    (linear expressions) or over a value of each (numbers: a warm start's)."""
    t: Lin = sum(tk.time_per_k[(s, r)] * x[r] + tk.time_fixed[(s, r)] * rec[r] for r in rec)
    e: Lin = sum(tk.dp_per_k[(s, r)] * x[r] + tk.dp_fixed[(s, r)] * rec[r] for r in rec)
    o: Lin = tk.opt_per_k[s] * k + tk.opt_fixed[s] * use
    for q in tk.kinds:  # several block kinds (constraints/positions.py)
        t += sum(tk.time_delta[(q, s, r)] * y[(q, r)] for r in rec)
        e += sum(tk.dp_delta[(q, s, r)] * y[(q, r)] for r in rec)
        o += tk.opt_delta[(q, s)] * n[q]
    return StageLines(t, e, o)


def add_schedule(model: cp_model.CpModel, lv: LayoutVars) -> None:
    """t = sum_r T1_{s,r} x + T0_{s,r} rec; tmax = max_s t; dpmax = max(0, max_s sum_r E1_{s,r} x
    + E0_{s,r} rec); omax = max_s O1_s k + O0_s use; with several block kinds each line adds
    sum_q D_{q,s,r} y[q,s,r] (the optimizer sum_q Dq_s n[q,s]).

    Each max is stated twice: as linear >= rows (what the LP relaxation bounds with) and as a
    max equality, so every solution's objective is its plan's step time. With >= alone a
    feasible solution may carry slack, and a single-worker search spends its time removing it a
    tick at a time instead of changing the split."""
    tk, pp, i = lv.ticks, lv.tables.plan.pp, lv.index
    k_hi = lv.tables.k_total
    n_hi = len(lv.tables.terms.block_kinds)

    def upper(per_k: list[int], fixed: list[int], deltas: list[int] | None = None, extra: int = 0) -> int:
        worst = max(0, max(deltas or [0])) * n_hi  # several kinds: every block the costliest
        return max(0, max(fixed) + max(0, max(per_k)) * k_hi + worst + extra)

    lv.tmax = model.new_int_var(
        0,
        upper(
            list(tk.time_per_k.values()),
            list(tk.time_fixed.values()),
            list(tk.time_delta.values()),
            lv.partial.time_hi if lv.partial is not None else 0,
        ),
        f"tmax_{i}",
    )
    lv.dpmax = model.new_int_var(
        0,
        upper(
            list(tk.dp_per_k.values()),
            list(tk.dp_fixed.values()),
            list(tk.dp_delta.values()),
            lv.partial.dp_hi if lv.partial is not None else 0,
        ),
        f"dpmax_{i}",
    )
    lv.omax = model.new_int_var(
        0,
        upper(list(tk.opt_per_k.values()), list(tk.opt_fixed.values()), list(tk.opt_delta.values())),
        f"omax_{i}",
    )
    exposed, optimizer = [], []
    for s in range(pp):
        y = {(q, r): lv.kind_y[(q, s, r)] for q in tk.kinds for r in lv.rec[s]}
        n = {q: lv.kind_n[(q, s)] for q in tk.kinds}
        t, e_lin, o_lin = stage_lines(tk, s, lv.rec[s], lv.x[s], lv.k(s), lv.use, y, n)
        if lv.partial is not None:  # stored layers of FULL stages (constraints/recompute_layers.py)
            t += lv.partial.time[s]
            e_lin += lv.partial.dp[s]
        lv.t.append(t)
        model.add(lv.tmax >= t)
        model.add(lv.dpmax >= e_lin)
        exposed.append(e_lin)
        model.add(lv.omax >= o_lin)
        optimizer.append(o_lin)
    model.add_max_equality(lv.tmax, lv.t)
    model.add_max_equality(lv.dpmax, [0, *exposed])
    model.add_max_equality(lv.omax, optimizer)
