"""Positions: which blocks each stage holds, for a model with several block kinds.

Virtual stage j = c * pp + s (rank s, chunk c) holds the blocks after those of virtual stages
0..j-1 (cost.split.chunk_ranges). Chunk c of rank s holds k_s blocks, less the embedding slot
on chunk 0 of rank 0 and the loss slot on the last chunk of rank pp - 1 (tables.py ``slots``).
One round of chunks holds K = sum_s k_s = k_total blocks, so with P_s = sum_{r<s} k_r the
boundary before chunk c of rank s is

    B_{c pp + s} = c K + P_s - slot(0)   (j >= 1),   B_0 = 0,   B_{pp vp} = blocks.

For each kind q other than the base, with P_q[i] its blocks among the first i (a constant
prefix-count table), AddElement gives e[q,c,s] = P_q[c K - slot(0) + P_s]: one index P_s per
rank for every chunk c, over K + 1 values (not one boundary over every position per chunk, which
CP-SAT would encode value by value, ~50x more literals at 128 blocks, pp 8 x vp 4). Rank s holds
n[q,s] = sum_c e[q,c,s+1] - e[q,c,s] blocks of kind q. Its mode picks the part y[q,s,r]
(sum_r y[q,s,r] = n[q,s], y <= n_max rec[L,s,r]), so each (stage, mode) line gains
sum_q delta[q,s,r] y[q,s,r] exactly (solver/constraints/schedule.py, memory.py).
A layout that is not used has every k at 0; its index is then K + 1, where every table is 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ortools.sat.python import cp_model

if TYPE_CHECKING:
    from paraplan.solver.model import LayoutVars

__all__ = ["add_positions"]


def _clamped(prefix: list[int]) -> Callable[[int], int]:
    """P_q at a position, clamped to [0, blocks] (positions out of range are never reached)."""
    return lambda position: prefix[min(max(position, 0), len(prefix) - 1)]


def add_positions(model: cp_model.CpModel, lv: LayoutVars) -> None:
    """The module docstring's rank prefixes, prefix counts and per-mode parts."""
    tab = lv.tables
    pp, vp, i = tab.plan.pp, tab.plan.vp, lv.index
    block_kinds = tab.terms.block_kinds
    k_round = tab.k_total
    first, last = tab.slot(0), tab.slot(pp - 1)
    model.add(lv.k(0) >= first * lv.use)  # chunk sizes are not negative
    model.add(lv.k(pp - 1) >= last * lv.use)
    index: list[cp_model.IntVar] = []  # rank s's P_s, or K + 1 when the layout is not used
    for s in range(1, pp):
        p = model.new_int_var(0, k_round + 1, f"rank_prefix_{i}_{s}")
        model.add(p == sum(lv.k(r) for r in range(s)) + (k_round + 1) * (1 - lv.use))
        index.append(p)
    for q in lv.ticks.kinds:
        prefix = [0]
        for k in block_kinds:
            prefix.append(prefix[-1] + (k == q))
        total = prefix[-1]
        at = _clamped(prefix)
        starts: list[list[cp_model.LinearExprT]] = []  # [c][s]: P_q at the start of chunk (c, s)
        for c in range(vp):
            row: list[cp_model.LinearExprT] = [at(c * k_round - first) * lv.use if c else 0]
            for s in range(1, pp):
                e = model.new_int_var(0, total, f"prefix_{i}_{q}_{c}_{s}")
                table = [at(c * k_round - first + n) for n in range(k_round + 1)] + [0]
                model.add_element(index[s - 1], table, e)
                row.append(e)
            starts.append(row)
        for s in range(pp):
            ends = [
                starts[c][s + 1] if s + 1 < pp else at((c + 1) * k_round - first) * lv.use for c in range(vp)
            ]
            if s == pp - 1:
                ends[-1] = total * lv.use
            n = cp_model.LinearExpr.sum(ends) - cp_model.LinearExpr.sum([row[s] for row in starts])
            parts = {r: model.new_int_var(0, total, f"kind_{i}_{q}_{s}_{r.value}") for r in tab.recomputes}
            for r, y in parts.items():
                model.add(y <= total * lv.rec[s][r])
            model.add(sum(parts.values()) == n)
            lv.kind_n[(q, s)] = n
            lv.kind_y.update({(q, s, r): y for r, y in parts.items()})
