"""Schedule: stage times, the slowest stage, exposed DP sync and the optimizer step."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ortools.sat.python import cp_model

if TYPE_CHECKING:
    from paraplan.solver.model import LayoutVars

__all__ = ["add_schedule"]


def add_schedule(model: cp_model.CpModel, lv: LayoutVars) -> None:
    """t = sum_r T1_{s,r} x + T0_{s,r} rec; tmax = max_s t; dpmax = max(0, max_s sum_r E1_{s,r} x
    + E0_{s,r} rec); omax = max_s O1_s k + O0_s use.

    Each max is stated twice: as linear >= rows (what the LP relaxation bounds with) and as a
    max equality, so every solution's objective is its plan's step time. With >= alone a
    feasible solution may carry slack, and a single-worker search spends its time removing it a
    tick at a time instead of changing the split."""
    tk, pp, i = lv.ticks, lv.tables.plan.pp, lv.index
    k_hi = lv.tables.k_total

    def upper(per_k: list[int], fixed: list[int]) -> int:
        return max(0, max(fixed) + max(0, max(per_k)) * k_hi)

    lv.tmax = model.new_int_var(
        0, upper(list(tk.time_per_k.values()), list(tk.time_fixed.values())), f"tmax_{i}"
    )
    lv.dpmax = model.new_int_var(
        0, upper(list(tk.dp_per_k.values()), list(tk.dp_fixed.values())), f"dpmax_{i}"
    )
    lv.omax = model.new_int_var(
        0, upper(list(tk.opt_per_k.values()), list(tk.opt_fixed.values())), f"omax_{i}"
    )
    exposed, optimizer = [], []
    for s in range(pp):
        rs, xs = lv.rec[s], lv.x[s]
        t = sum(tk.time_per_k[(s, r)] * xs[r] + tk.time_fixed[(s, r)] * rs[r] for r in rs)
        lv.t.append(t)
        model.add(lv.tmax >= t)
        e_lin = sum(tk.dp_per_k[(s, r)] * xs[r] + tk.dp_fixed[(s, r)] * rs[r] for r in rs)
        model.add(lv.dpmax >= e_lin)
        exposed.append(e_lin)
        o_lin = tk.opt_per_k[s] * lv.k(s) + tk.opt_fixed[s] * lv.use
        model.add(lv.omax >= o_lin)
        optimizer.append(o_lin)
    model.add_max_equality(lv.tmax, lv.t)
    model.add_max_equality(lv.dpmax, [0, *exposed])
    model.add_max_equality(lv.omax, optimizer)
