"""Positions: which blocks each stage holds, for a model with several block kinds.

Virtual stage j = c * pp + s (rank s, chunk c) holds the blocks after those of virtual stages
0..j-1 (cost.plan.chunk_ranges). Chunk c of rank s holds k_s blocks, less the rank's embedding
/ loss slot on its first (rank 0) or last (rank pp - 1) chunk (tables.py ``slots``), so the
boundaries are linear in the k_s:

    B_0 = 0,  B_{j+1} = B_j + k_{s(j)} - slot(j) use[L]

For each kind q other than the base, with P_q[i] its blocks among the first i (a constant
prefix-count table), AddElement gives e[q,j] = P_q[B_j], and rank s holds
n[q,s] = sum_c e[q, j+1] - e[q, j] (j = c pp + s) blocks of kind q. Its mode picks the part
y[q,s,r] (sum_r y[q,s,r] = n[q,s], y <= n_max rec[L,s,r]), so each (stage, mode) line gains
sum_q delta[q,s,r] y[q,s,r] exactly (solver/constraints/schedule.py, memory.py).
A layout that is not used has every k at 0: all boundaries are 0 and so is every n.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ortools.sat.python import cp_model

if TYPE_CHECKING:
    from paraplan.solver.model import LayoutVars

__all__ = ["add_positions"]


def add_positions(model: cp_model.CpModel, lv: LayoutVars) -> None:
    """The module docstring's boundaries, prefix counts and per-mode parts."""
    tab = lv.tables
    pp, vp, i = tab.plan.pp, tab.plan.vp, lv.index
    block_kinds = tab.terms.block_kinds
    num_blocks = len(block_kinds)
    kinds = lv.ticks.kinds
    bounds: list[cp_model.LinearExprT] = [0]
    for j in range(pp * vp):
        c, s = divmod(j, pp)
        slot = tab.slot(s) if (s == 0 and c == 0) or (s == pp - 1 and c == vp - 1) else 0
        size = lv.k(s) - slot * lv.use
        if j == pp * vp - 1:
            bounds.append(num_blocks * lv.use)
            continue
        b = model.new_int_var(0, num_blocks, f"bound_{i}_{j + 1}")
        model.add(b == bounds[-1] + size)
        bounds.append(b)
    for q in kinds:
        prefix = [0]
        for k in block_kinds:
            prefix.append(prefix[-1] + (k == q))
        total = prefix[-1]
        at: list[cp_model.LinearExprT] = [0]
        for j in range(1, pp * vp):
            e = model.new_int_var(0, total, f"prefix_{i}_{q}_{j}")
            model.add_element(bounds[j], prefix, e)
            at.append(e)
        at.append(total * lv.use)
        for s in range(pp):
            n = sum(at[c * pp + s + 1] - at[c * pp + s] for c in range(vp))
            parts = {r: model.new_int_var(0, total, f"kind_{i}_{q}_{s}_{r.value}") for r in tab.recomputes}
            for r, y in parts.items():
                model.add(y <= total * lv.rec[s][r])
            model.add(sum(parts.values()) == n)
            lv.kind_n[(q, s)] = n
            lv.kind_y.update({(q, s, r): y for r, y in parts.items()})
