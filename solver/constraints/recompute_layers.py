"""Partial (block) recompute: how many layers of each chunk a full-recompute stage stores.

cost/recompute_layers.py defines it (Megatron ``--recompute-method block --recompute-num-layers
N``: the first N layers of each chunk recomputed in full, the rest stored). With one block kind
every layer costs the same, so only the count matters. Under mode FULL, stage s holding
k = x[L,s,FULL] per chunk (vp k - slot_s layers; the slot chunk is one shorter) stores

    u[s] in 0..k-1 layers per chunk (N = k - u),  p[s] = [u >= 1],  stored = vp u - slot_s p

(N = k recomputes the slot chunk's k - 1 layers too: stored 0). Its stage line gains, linear in
(u, p), what storing saves and costs (ticks and MEMORY_UNIT_BYTES from cost/, per unit of k):

    time  += (T1_none - T1_full) u + slot_s tau p        tau = t_full - t_none per layer
    dp    += (E1_none - E1_full) u + slot_s eps p        (exposed sync: a shorter window)
    if p:  M0_full + M1_full x + D vp u - D slot_s <= cap    (D: cost's stored-layer bytes)

With u = 0 the stage is today's FULL (its memory is the k_max row of constraints/memory.py).
One N for every rank (``uniform``, Megatron's one flag; or a fixed single ``recompute_layers``):
an integer n in 1..k_hi and u[s] = max(0, x[L,s,FULL] - n). PartialPlan per-stage counts n_s: the
same with n_s, and the stage's mode FULL (n_s >= 1) or not (n_s = 0). Models with several block
kinds are not searched (which blocks are recomputed depends on their positions); the API refuses
a fixed ``recompute_layers`` for them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ortools.sat.python import cp_model
from paraplan.cost import Recompute
from paraplan.cost.memory import stage_memory_model
from paraplan.cost.memory_layers import kind_bytes_per_stage
from paraplan.cost.recompute_layers import stored_extra_bytes
from paraplan.solver.scale import bytes_down, bytes_up, to_ticks

if TYPE_CHECKING:
    from paraplan.cost import PartialPlan, StageTerms
    from paraplan.graph import LayerGraph
    from paraplan.solver.model import LayoutVars
    from paraplan.solver.space import Options

__all__ = [
    "searches_partial",
    "PartialVars",
    "add_recompute_layers",
    "partial_counts",
    "bound_caps",
    "bound_modes",
]


@dataclass
class PartialVars:
    """Per stage: u (layers stored per chunk), p (u >= 1), and the stage's time / exposed-sync
    additions; ``n``: the one N of every rank when there is one."""

    u: list[cp_model.IntVar] = field(default_factory=list)
    p: list[cp_model.IntVar] = field(default_factory=list)
    time: list[cp_model.LinearExpr] = field(default_factory=list)
    dp: list[cp_model.LinearExpr] = field(default_factory=list)
    n: cp_model.IntVar | None = None
    time_hi: int = 0  # the most the rows can add to a stage's time / exposed sync (ticks)
    dp_hi: int = 0


def add_recompute_layers(
    model: cp_model.CpModel, lv: LayoutVars, fixed: tuple[int, ...] | None = None
) -> None:
    """The module docstring's variables and rows for layout ``lv`` (``lv.partial``);
    ``fixed``: the scenario's recompute_layers (one N, or one per stage)."""
    tab, terms = lv.tables, lv.tables.terms
    pp, vp, i, res = tab.plan.pp, tab.plan.vp, lv.index, tab.resolution_s
    if terms.heterogeneous or Recompute.FULL not in lv.rec[0]:
        raise ValueError("partial recompute is searched for models with one block kind under full recompute")
    k_hi = max(tab.k_choices) if tab.k_choices else tab.k_total - (pp - 1)
    pv = PartialVars()
    one_n = fixed[0] if fixed is not None and len(fixed) == 1 else None
    if fixed is None and tab.uniform or one_n is not None:
        lo, hi = (one_n, one_n) if one_n is not None else (1, k_hi)
        pv.n = model.new_int_var(lo, max(lo, hi), f"recompute_layers_{i}")
    for s in range(pp):
        x, on = lv.x[s][Recompute.FULL], lv.rec[s][Recompute.FULL]
        u = model.new_int_var(0, max(0, k_hi - 1), f"stored_per_chunk_{i}_{s}")
        p = model.new_bool_var(f"stores_{i}_{s}")
        model.add(u <= max(0, k_hi - 1) * p)
        model.add(u >= p)
        model.add(p <= on)
        model.add(u <= x - on)
        if fixed is not None and len(fixed) == pp:
            if fixed[s] < 1:
                model.add(on == 0)
            else:
                model.add(on == lv.use)
                model.add_max_equality(u, [0, x - fixed[s] * on])
        elif pv.n is not None:
            gap = model.new_int_var(-k_hi, k_hi, f"chunk_minus_n_{i}_{s}")
            model.add(gap == x - pv.n).only_enforce_if(on)
            model.add(gap == 0).only_enforce_if(~on)
            model.add_max_equality(u, [0, gap])
        slot = tab.slot(s)
        full, none = terms.stage_time(s, Recompute.FULL), terms.stage_time(s, Recompute.NONE)
        dfull, dnone = terms.dp_exposed(s, Recompute.FULL), terms.dp_exposed(s, Recompute.NONE)
        # differences of the rounded per-k coefficients (tables._tick_tables rounds each mode's
        # line alike): a stage's line is then T1_full (k - u) + T1_none u, off by k/2 ticks at
        # most, as a pure mode's
        t_u = to_ticks(vp * none.per_layer, res) - to_ticks(vp * full.per_layer, res)
        t_p = to_ticks(slot * full.per_layer, res) - to_ticks(slot * none.per_layer, res)
        e_u = to_ticks(vp * dnone.per_layer, res) - to_ticks(vp * dfull.per_layer, res)
        e_p = to_ticks(slot * dfull.per_layer, res) - to_ticks(slot * dnone.per_layer, res)
        pv.time.append(t_u * u + t_p * p)
        pv.dp.append(e_u * u + e_p * p)
        pv.time_hi = max(pv.time_hi, max(0, t_u) * k_hi + max(0, t_p))
        pv.dp_hi = max(pv.dp_hi, max(0, e_u) * k_hi + max(0, e_p))
        mem = stage_memory_model(terms, s, Recompute.FULL)
        per_layer, extra = mem.per_layer.total_bytes, stored_extra_bytes(terms, s)[0]
        used = (
            bytes_up(vp * per_layer) * x
            + bytes_up(vp * extra) * u
            + bytes_up(mem.fixed.total_bytes - slot * (per_layer + extra))
        )
        model.add(used <= bytes_down(terms.stage_capacity_bytes(s))).only_enforce_if(p)
        pv.u.append(u)
        pv.p.append(p)
    lv.partial = pv


def partial_counts(
    lv: LayoutVars, solver: cp_model.CpSolver, fixed: tuple[int, ...] | None = None
) -> tuple[int, ...]:
    """The solution's Plan.recompute_layers: the scenario's when it fixes them (one N: on every
    FULL stage, 0 elsewhere); else () when no stage stores a layer, or per stage N = k - u on
    FULL stages (k: the whole chunk) and 0 on the others; one N for every stage when the layout
    has one (``n``), which is then exact on every rank (N >= k: all)."""
    pv = lv.partial
    if pv is None:
        return ()
    full = [solver.boolean_value(rs[Recompute.FULL]) for rs in lv.rec]
    if fixed is not None:
        return tuple(fixed) if len(fixed) == len(full) else tuple(fixed[0] if f else 0 for f in full)
    if not any(solver.value(u) for u in pv.u):
        return ()
    out = []
    for s in range(len(lv.rec)):
        if not full[s]:
            out.append(0)
        elif pv.n is not None:
            out.append(int(solver.value(pv.n)))
        else:
            out.append(int(solver.value(lv.x[s][Recompute.FULL]) - solver.value(pv.u[s])))
    return tuple(out)


def bound_modes(recomputes: list[Recompute], partial: bool) -> list[Recompute]:
    """The modes a lower bound ranges over: with partial recompute a FULL stage may run as fast
    as NONE (each stored layer costs a NONE block), so NONE joins FULL."""
    if partial and Recompute.FULL in recomputes and Recompute.NONE not in recomputes:
        return [*recomputes, Recompute.NONE]
    return list(recomputes)


def bound_caps(
    k_max: dict[tuple[int, Recompute], int], recomputes: list[Recompute], pp: int
) -> tuple[dict[tuple[int, Recompute], int], list[Recompute]]:
    """Caps and modes for the lower bounds under partial recompute (a relaxation): a stage runs
    no faster than NONE and holds no more than FULL lets it, so NONE's time line with FULL's
    cap bounds every stored/recomputed mix from below."""
    modes = bound_modes(recomputes, True)
    caps = dict(k_max)
    if Recompute.FULL in recomputes:
        for s in range(pp):
            caps[(s, Recompute.NONE)] = max(k_max.get((s, Recompute.NONE), 0), k_max[(s, Recompute.FULL)])
    return caps, modes


def searches_partial(
    graph: LayerGraph, fixed: PartialPlan, options: Options, recomputes: list[Recompute]
) -> bool:
    """Whether the search covers partial recompute: allowed by the options, FULL among the
    modes, and one block kind. A fixed ``recompute_layers`` outside that is refused (ValueError
    naming the reason; paraplan/api.py says it as a ConfigError first)."""
    ok = options.partial_recompute and Recompute.FULL in recomputes and len(graph.kind_blocks) == 1
    if fixed.recompute_layers is not None and not ok:
        raise ValueError(
            f"plan.recompute_layers={list(fixed.recompute_layers)} cannot be searched here: "
            + (
                "the model has several block kinds"
                if len(graph.kind_blocks) > 1
                else "full recompute is not among the allowed modes"
                if Recompute.FULL not in recomputes
                else "the target framework has no partial recompute"
            )
        )
    return ok


def partial_floor(
    terms: StageTerms, f: list[list[float]], k_max: dict[tuple[int, Recompute], int], slots: tuple[int, ...]
) -> list[list[float]]:
    """Each stage's least time by k (bounds.stage_time_by_k's f) with partial recompute too:
    where FULL fits k, a stage of L = vp k - slot layers stores at most
    S(L) = min(L, floor((cap - M_full(L)) / D)) of them, so it takes at least
    max(t_none(L), t_full(L) - S(L) (t_full - t_none) per layer): a relaxation (S need not be
    a multiple of vp), non-decreasing in k like f, so the greedy min-max over it stays exact."""
    vp, pp = terms.plan.vp, terms.plan.pp
    memory = kind_bytes_per_stage(terms, Recompute.FULL)
    out = []
    for s in range(pp):
        full, none = terms.stage_time(s, Recompute.FULL), terms.stage_time(s, Recompute.NONE)
        saving = full.per_layer - none.per_layer
        fixed, (per_layer,) = memory[s]
        extra = stored_extra_bytes(terms, s)[0]
        room = terms.stage_capacity_bytes(s) - fixed
        row = list(f[s])
        for k in range(1, min(len(row) - 1, k_max[(s, Recompute.FULL)]) + 1):
            layers = max(0, vp * k - slots[s])
            stored = layers if extra <= 0 else max(0, min(layers, int((room - per_layer * layers) // extra)))
            row[k] = min(row[k], max(none.at(layers), full.at(layers) - stored * saving))
        out.append(row)
    return out


def partial_may_pay(
    terms: StageTerms, k_max: dict[tuple[int, Recompute], int], k_hi: int, slots: tuple[int, ...]
) -> bool:
    """Whether storing layers of a FULL stage can beat the layout's other choices; if not, the
    layout's model leaves partial recompute out (smaller, same optimum). A stage storing layers
    takes at least NONE's time at the same k, and exposes no more DP sync than NONE; so it is
    dominated unless, on some stage, NONE does not fit every k FULL fits (memory binds, or NONE
    is not allowed there), or NONE leaves some DP sync exposed (a longer backward can hide it,
    with vp > 1 cheaper than the bubble it adds)."""
    vp = terms.plan.vp
    for s in range(terms.plan.pp):
        if k_max.get((s, Recompute.NONE), 0) < min(k_hi, k_max.get((s, Recompute.FULL), 0)):
            return True
        line = terms.dp_exposed(s, Recompute.NONE)
        if max(line.at(vp - slots[s]), line.at(vp * k_hi - slots[s])) > 0:
            return True
    return False
