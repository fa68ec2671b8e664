"""Memory: the peak bytes of every stage fit the device (decided per mode in cost/memory.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ortools.sat.python import cp_model

if TYPE_CHECKING:
    from paraplan.solver.model import LayoutVars

__all__ = ["add_memory"]


def add_memory(model: cp_model.CpModel, lv: LayoutVars) -> None:
    """x[L,s,r] <= kmax[L,s,r] * rec[L,s,r]: a mode that fits no layer is off on that stage.
    Several block kinds: also M0 rec + M1 x + sum_q Mq y[q] <= cap rec per stage and mode, in
    scale.MEMORY_UNIT_BYTES (the peak of cost/memory.py, affine in the blocks of each kind)."""
    tk = lv.ticks
    for s, rs in enumerate(lv.rec):
        for r, b in rs.items():
            model.add(lv.x[s][r] <= lv.tables.k_max[(s, r)] * b)
            if tk.kinds:
                used = tk.mem_fixed[(s, r)] * b + tk.mem_per_k[(s, r)] * lv.x[s][r]
                used += sum(tk.mem_delta[(q, s, r)] * lv.kind_y[(q, s, r)] for q in tk.kinds)
                model.add(used <= tk.mem_cap[s] * b)
