"""Memory: the peak bytes of every stage fit the device (decided per mode in cost/memory.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ortools.sat.python import cp_model

if TYPE_CHECKING:
    from paraplan.solver.model import LayoutVars

__all__ = ["add_memory"]


def add_memory(model: cp_model.CpModel, lv: LayoutVars) -> None:
    """x[L,s,r] <= kmax[L,s,r] * rec[L,s,r]: a mode that fits no layer is off on that stage."""
    for s, rs in enumerate(lv.rec):
        for r, b in rs.items():
            model.add(lv.x[s][r] <= lv.tables.k_max[(s, r)] * b)
