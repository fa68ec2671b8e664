"""Candidate tables: the cost model's numbers for every per-stage choice of one layout.

For a layout (see space.py), each stage s and recompute mode r, cost/ gives a stage's quantities
as fixed + per-layer parts (``cost.stage.Affine``): time per micro-batch, exposed DP sync before
clamping at 0, optimizer time; and memory as the most layers that fit (caps.py). Nothing here
computes a cost; it only calls cost/ and converts to integers through scale.py.
Per-layer coefficients are per (stage, mode): on a pooled cluster each stage's pool sets them
(cost/stage.py ``StageTerms.at``); on a homogeneous one they are equal across stages.
Units of vp: stage s holds vp * k_s - slots[s] layers (cost.split.pipeline_slots: Megatron's
embedding / loss slots when vp does not divide the layers), k_s >= 1 + slots[s]; so a stage's
line in k has the fixed part fixed - slots[s] * per_layer, and k_total = (layers + sum slots)/vp.
``build_tables`` also gives the layout's lower and upper bounds (bounds.py), used to prune it
before CP-SAT.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from paraplan.cost import Job, Layout, Plan, Recompute, StageTerms, stage_terms
from paraplan.cost.memory import BaseMemo, stage_memory_model
from paraplan.cost.split import even_layers
from paraplan.cost.stage import Affine
from paraplan.graph import LayerGraph
from paraplan.hardware import Cluster
from paraplan.solver.bounds import layout_lower_bound_s, min_max_split, stage_time_by_k, upper_bound_plan
from paraplan.solver.caps import CapsMemo, layer_caps, layout_slots
from paraplan.solver.constraints.recompute_layers import bound_caps, partial_floor, partial_may_pay
from paraplan.solver.kinds import INF, folded_min_max
from paraplan.solver.scale import TIME_RESOLUTION_S, bytes_down, bytes_up, to_ticks, tolerance_s

__all__ = [
    "LayoutTables",
    "build_tables",
    "even_layers",
]


@dataclass
class LayoutTables:
    plan: Layout  # the layout (no layer split or recompute modes yet)
    terms: StageTerms
    num_micro_batches: int
    k_total: int  # layers / vp
    k_choices: list[int] | None  # allowed k per stage (None: 1..k_total - pp + 1)
    recomputes: list[Recompute]
    k_max: dict[tuple[int, Recompute], int]  # most k that fit memory (0: none)
    lower_bound_s: float
    upper_bound_s: float
    upper_plan: Plan | None
    uniform: bool = False  # every stage runs the same recompute mode
    split: tuple[int, ...] | None = None  # the one layer split allowed (None: free)
    resolution_s: float = TIME_RESOLUTION_S  # seconds per tick (scale.resolution_for)
    slots: tuple[int, ...] = ()  # per stage: layers = vp * k - slots[s] (pipeline_slots)
    partial: bool = False  # FULL stages may store some layers (constraints/recompute_layers.py)

    def slot(self, stage: int) -> int:
        return self.slots[stage] if self.slots else 0

    @property
    def heterogeneous(self) -> bool:
        """The model has several block kinds: the CP-SAT model places them by position."""
        return self.terms.heterogeneous

    @property
    def rounding_k(self) -> int:
        """Coefficients per stage that round (scale.tolerance_s): k, plus each block's kind
        correction when the model has several kinds."""
        return (
            self.k_total
            + (len(self.terms.block_kinds) if self.heterogeneous else 0)
            + (2 if self.partial else 0)  # the stored-layer rows' slot terms round too
        )

    def ticks(self) -> TickTables:
        return _tick_tables(self)

    def ceiling_s(self) -> float:
        """The largest step time the layout's model can take (every stage at its slowest mode
        holding the most layers), per unit of the objective scale: what its ticks must hold."""
        pp, vp, m = self.plan.pp, self.plan.vp, self.num_micro_batches
        k_hi = max(self.k_choices) if self.k_choices else self.k_total - (pp - 1)
        n = vp * k_hi
        t = self.terms

        def worst(line: Affine, deltas: tuple[float, ...]) -> float:  # every block the worst kind
            return line.fixed + n * (line.per_layer + max(0.0, *deltas))

        stage = max(
            worst(t.stage_time(s, r), t.time_deltas(s, r)) for s in range(pp) for r in self.recomputes
        )
        sync = max(
            worst(t.dp_exposed(s, r), t.exposed_deltas(s, r)) for s in range(pp) for r in self.recomputes
        )
        opt = max(worst(t.optimizer(s), t.optimizer_deltas(s)) for s in range(pp))
        return (m + pp) * max(0.0, stage) + max(0.0, sync) + max(0.0, opt)


@dataclass(frozen=True)
class TickTables:
    """Integer coefficients, per unit of k (vp layers): value = per_k[s, r] * k + fixed[s, r]."""

    time_per_k: dict[tuple[int, Recompute], int]
    time_fixed: dict[tuple[int, Recompute], int]
    dp_per_k: dict[tuple[int, Recompute], int]
    dp_fixed: dict[tuple[int, Recompute], int]
    opt_per_k: dict[int, int]
    opt_fixed: dict[int, int]
    lower_bound: int
    # several block kinds (empty otherwise): per kind k other than the base, what each of its
    # blocks adds over a base block; memory in MEMORY_UNIT_BYTES, rounded up, capacity down
    kinds: tuple[int, ...] = ()
    time_delta: dict[tuple[int, int, Recompute], int] = field(default_factory=dict)
    dp_delta: dict[tuple[int, int, Recompute], int] = field(default_factory=dict)
    opt_delta: dict[tuple[int, int], int] = field(default_factory=dict)
    mem_fixed: dict[tuple[int, Recompute], int] = field(default_factory=dict)
    mem_per_k: dict[tuple[int, Recompute], int] = field(default_factory=dict)
    mem_delta: dict[tuple[int, int, Recompute], int] = field(default_factory=dict)
    mem_cap: dict[int, int] = field(default_factory=dict)


def build_tables(
    graph: LayerGraph,
    cluster: Cluster,
    job: Job,
    layout: Layout,
    recomputes: list[Recompute],
    k_choices: list[int] | None = None,
    terms: StageTerms | None = None,
    uniform: bool = False,
    split: tuple[int, ...] | None = None,
    stage_modes: tuple[Recompute, ...] | None = None,
    partial: bool = False,
    partial_fixed: bool = False,
    cutoff_s: float = INF,
    caps_memo: CapsMemo | None = None,
) -> LayoutTables:
    """Memory capacities and bounds of one layout (integer coefficients via ``.ticks()``).

    ``terms``: the layout's StageTerms when the caller already has them; ``uniform``: one
    recompute mode for every stage; ``split``: the only layer split allowed (its upper bound);
    ``stage_modes``: the one recompute mode each stage may run (layer_caps); ``partial``: FULL
    stages may store some layers, so the lower bounds relax (recompute_layers.partial_floor,
    bound_caps), unless storing cannot pay (partial_may_pay); ``partial_fixed``: the scenario
    fixes the counts, so the model always carries them; ``cutoff_s``: the search's current
    cutoff (candidates.py): a layout whose lower bound is above it is left out whatever its
    upper bound (a real plan of the layout, never below its lower bound, so never below the
    cutoff either), so its upper bound is not scored (INF, no plan). The lower bound is the
    bound's own sum whether or not the upper bound is scored, so both builds give the same
    float: where the upper plan is the bound's own split the two equal sums, added in different
    orders, may differ in the last bit (every comparison with a plan's step allows
    scale.tolerance_s, candidates.py's cutoff a relative 1e-9).
    """
    terms = terms or stage_terms(graph, layout, job, cluster)
    pp, vp = layout.pp, layout.vp
    num_layers = graph.spec.num_layers
    slots = layout_slots(terms, num_layers)
    k_total = (num_layers + sum(slots)) // vp
    k_hi = max(k_choices) if k_choices else k_total - (pp - 1)
    bound = terms.relaxed()  # several block kinds: bounds from the least of them
    k_max = layer_caps(terms, recomputes, k_hi, stage_modes, num_layers, caps_memo)
    partial = partial_fixed or (partial and partial_may_pay(terms, k_max, k_hi, slots))
    caps, modes = bound_caps(k_max, recomputes, pp) if partial else (k_max, recomputes)
    f = [stage_time_by_k(terms, s, k_max, recomputes, k_hi, slots) for s in range(pp)]
    if partial:  # FULL stages storing some layers (constraints/recompute_layers.py)
        f = partial_floor(terms, f, k_max, slots)
    ks = min_max_split(f, k_total)
    folded_tmax, folded_ks = (
        folded_min_max(terms, recomputes, k_total, k_hi, slots) if terms.heterogeneous else (0.0, None)
    )
    lower = layout_lower_bound_s(bound, f, ks, caps, modes, num_layers, exact=terms, tmax_floor=folded_tmax)
    candidates = [even_layers(num_layers, pp, vp)]
    if lower > cutoff_s:
        candidates = []
    elif split:
        candidates = [split]
    elif k_choices is None:
        candidates.append(tuple(vp * k - sl for k, sl in zip(ks, slots, strict=True)) if ks else None)
        if folded_ks:
            candidates.append(tuple(vp * k - sl for k, sl in zip(folded_ks, slots, strict=True)))
    else:
        candidates = [
            c
            for c in candidates
            if c and all((n + sl) // vp in k_choices for n, sl in zip(c, slots, strict=True))
        ]
    upper, upper_plan = min(
        (upper_bound_plan(terms, layout, c, k_max, recomputes, uniform, slots) for c in candidates),
        key=lambda u: u[0],
        default=(INF, None),
    )
    return LayoutTables(
        layout,
        terms,
        terms.num_micro_batches,
        k_total,
        k_choices,
        recomputes,
        k_max,
        lower,
        upper,
        upper_plan,
        uniform,
        split or None,
        slots=slots,
        partial=partial,
    )


def _tick_tables(tab: LayoutTables) -> TickTables:
    terms, vp, res = tab.terms, tab.plan.vp, tab.resolution_s
    stages = range(tab.plan.pp)
    time_per_k, dp_per_k = {}, {}
    time_fixed, dp_fixed = {}, {}

    def fixed(line: Affine, s: int) -> int:  # the line at k = 0: fixed - slot * per_layer
        return to_ticks(line.fixed - tab.slot(s) * line.per_layer, res)

    for r in tab.recomputes:
        for s in stages:
            time_per_k[(s, r)] = to_ticks(vp * terms.stage_time(s, r).per_layer, res)
            dp_per_k[(s, r)] = to_ticks(vp * terms.dp_exposed(s, r).per_layer, res)
            time_fixed[(s, r)] = fixed(terms.stage_time(s, r), s)
            dp_fixed[(s, r)] = fixed(terms.dp_exposed(s, r), s)
    ticks = TickTables(
        time_per_k=time_per_k,
        time_fixed=time_fixed,
        dp_per_k=dp_per_k,
        dp_fixed=dp_fixed,
        opt_per_k={s: to_ticks(vp * terms.optimizer(s).per_layer, res) for s in stages},
        opt_fixed={s: fixed(terms.optimizer(s), s) for s in stages},
        lower_bound=_lower_bound_ticks(tab),
    )
    return _kind_ticks(tab, ticks) if tab.heterogeneous else ticks


def _kind_ticks(tab: LayoutTables, ticks: TickTables) -> TickTables:
    """The per-kind corrections and the memory rows of a model with several block kinds."""
    terms, vp, res = tab.terms, tab.plan.vp, tab.resolution_s
    kinds = tuple(k for k in range(terms.num_kinds) if k != terms.base_kind)
    out = replace(ticks, kinds=kinds)
    bases: BaseMemo = {}  # each stage's mode-free memory parts, shared by its modes
    for s in range(tab.plan.pp):
        opt = terms.optimizer_deltas(s)
        out.mem_cap[s] = bytes_down(terms.stage_capacity_bytes(s))
        for k in kinds:
            out.opt_delta[(k, s)] = to_ticks(opt[k], res)
        for r in tab.recomputes:
            time_d, dp_d = terms.time_deltas(s, r), terms.exposed_deltas(s, r)
            mem = stage_memory_model(terms, s, r, bases)
            per_layer = mem.per_layer.total_bytes
            out.mem_fixed[(s, r)] = bytes_up(mem.fixed.total_bytes - tab.slot(s) * per_layer)
            out.mem_per_k[(s, r)] = bytes_up(vp * per_layer)
            for k in kinds:
                out.time_delta[(k, s, r)] = to_ticks(time_d[k], res)
                out.dp_delta[(k, s, r)] = to_ticks(dp_d[k], res)
                out.mem_delta[(k, s, r)] = bytes_up(mem.per_kind[k].total_bytes)
    return out


def _lower_bound_ticks(tab: LayoutTables) -> int:
    """The layout's lower bound in ticks, below anything the model can compute for it: the
    model sums rounded coefficients, off from cost/ by at most scale.tolerance_s, so the bound
    drops by that much (and a millionth, for floating point) before the floor."""
    if tab.lower_bound_s == INF:
        return 0
    res = tab.resolution_s
    slack = tolerance_s(tab.num_micro_batches, tab.plan.pp, tab.rounding_k, res) / res
    ticks = to_ticks(tab.lower_bound_s, res)
    return max(0, int(min(ticks * 0.999999, ticks - slack - 1)))
