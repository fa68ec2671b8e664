"""Schedule: stage times, the slowest stage, exposed DP sync and the optimizer step."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ortools.sat.python import cp_model

if TYPE_CHECKING:
    from paraplan.solver.model import LayoutVars

__all__ = ["add_schedule"]


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
        rs, xs = lv.rec[s], lv.x[s]
        t = sum(tk.time_per_k[(s, r)] * xs[r] + tk.time_fixed[(s, r)] * rs[r] for r in rs)
        e_lin = sum(tk.dp_per_k[(s, r)] * xs[r] + tk.dp_fixed[(s, r)] * rs[r] for r in rs)
        o_lin = tk.opt_per_k[s] * lv.k(s) + tk.opt_fixed[s] * lv.use
        for q in tk.kinds:  # several block kinds (constraints/positions.py)
            t += sum(tk.time_delta[(q, s, r)] * lv.kind_y[(q, s, r)] for r in rs)
            e_lin += sum(tk.dp_delta[(q, s, r)] * lv.kind_y[(q, s, r)] for r in rs)
            o_lin += tk.opt_delta[(q, s)] * lv.kind_n[(q, s)]
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
