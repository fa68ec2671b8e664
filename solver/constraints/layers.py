"""Layer split: every block on exactly one stage, in units of vp (less the stage's embedding /
loss slot); one mode per stage."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ortools.sat.python import cp_model

if TYPE_CHECKING:
    from paraplan.solver.model import LayoutVars

__all__ = ["add_layer_split"]


def add_layer_split(model: cp_model.CpModel, lv: LayoutVars) -> None:
    """sum_{s,r} x[L,s,r] = k_total use[L] (k_total = (layers + sum slots) / vp);
    sum_r rec[L,s,r] = use[L]; (1 + slot_s) rec <= x <= k_hi rec (a stage holds vp x - slot_s
    layers, at least one per virtual stage); under uniform recompute rec[L,s,r] = rec[L,0,r]."""
    tab = lv.tables
    model.add(sum(v for xs in lv.x for v in xs.values()) == tab.k_total * lv.use)
    k_hi = max(tab.k_choices) if tab.k_choices else tab.k_total - (tab.plan.pp - 1)
    for s in range(tab.plan.pp):
        model.add(sum(lv.rec[s].values()) == lv.use)
        for r, b in lv.rec[s].items():
            model.add(lv.x[s][r] >= (1 + tab.slot(s)) * b)
            model.add(lv.x[s][r] <= k_hi * b)
        if tab.k_choices and len(tab.k_choices) < k_hi:
            k = model.new_int_var_from_domain(
                cp_model.Domain.FromValues([0, *tab.k_choices]), f"k_{lv.index}_{s}"
            )
            model.add(k == lv.k(s))
        if tab.uniform and s > 0:
            for r, b in lv.rec[s].items():
                model.add(b == lv.rec[0][r])
