"""Candidate tables: the cost model's numbers for every per-stage choice of one layout.

For a layout (see space.py), each stage s and recompute mode r, cost/ gives a stage's quantities
as fixed + per-layer parts (``cost.stage.Affine``): time per micro-batch, exposed DP sync before
clamping at 0, optimizer time; and memory as the most layers that fit. Nothing here computes a
cost; it only calls cost/ and converts to integers through scale.py.
Per-layer coefficients are per (stage, mode): on a pooled cluster each stage's pool sets them
(cost/stage.py ``StageTerms.at``); on a homogeneous one they are equal across stages.
Units of vp: stage s holds vp * k_s - slots[s] layers (cost.plan.pipeline_slots: Megatron's
embedding / loss slots when vp does not divide the layers), k_s >= 1 + slots[s]; so a stage's
line in k has the fixed part fixed - slots[s] * per_layer, and k_total = (layers + sum slots)/vp.
Also the layout's bounds used to prune before CP-SAT:
- lower bound: the 1F1B step (m - 1/vp) * tmax + sum_t / vp + optimizer grows with each term, so
  it is bounded below by tmax >= the least max over integer splits of each stage's fastest
  memory-feasible time (greedy min-max, exact for these non-decreasing functions), sum_t >= blocks
  filling the cheapest (stage, mode) memory first, optimizer >= its least per-stage value;
- upper bound: the better of the even split and that min-max split, each stage running its
  fastest recompute that fits (a real plan, scored by cost/); under ``uniform`` recompute the
  fastest single mode every stage fits in. The lower bounds ignore ``uniform`` (a relaxation).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field, replace
from functools import cache, lru_cache

from paraplan.cost import Job, Layout, Plan, Recompute, StageTerms, stage_terms
from paraplan.cost.evaluate import step_time_s
from paraplan.cost.memory import kind_bytes_per_stage, max_layers_per_stage, stage_memory, stage_memory_model
from paraplan.cost.plan import even_split, pipeline_slots
from paraplan.cost.pp import pipeline_lower_bound_s
from paraplan.cost.stage import Affine
from paraplan.graph import LayerGraph
from paraplan.hardware import Cluster
from paraplan.solver.constraints.recompute_layers import bound_caps, partial_floor, partial_may_pay
from paraplan.solver.scale import TIME_RESOLUTION_S, bytes_down, bytes_up, to_ticks, tolerance_s

__all__ = [
    "LayoutTables",
    "build_tables",
    "even_layers",
    "quick_lower_bound_s",
    "layer_caps",
    "fits_some_split",
]

INF = float("inf")


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


def even_layers(num_layers: int, pp: int, vp: int) -> tuple[int, ...] | None:
    """Even split in units of vp (less the embedding / loss slots, pipeline_slots), the
    remainder on the middle stages; None if impossible."""
    slots = pipeline_slots(num_layers, pp, vp)
    if slots is None:
        return None
    k_total = (num_layers + sum(slots)) // vp
    ks = even_split(k_total, pp)
    if any(k < 1 + slot for k, slot in zip(ks, slots, strict=True)):
        return None
    return tuple(vp * k - slot for k, slot in zip(ks, slots, strict=True))


def _slots(terms: StageTerms, num_layers: int) -> tuple[int, ...]:
    """pipeline_slots of the layout (all zero when it has none: such layouts are refused
    before their tables are built)."""
    pp, vp = terms.plan.pp, terms.plan.vp
    return pipeline_slots(num_layers, pp, vp) or (0,) * pp


def _least_total_s(
    terms: StageTerms, k_max: dict[tuple[int, Recompute], int], recomputes: list[Recompute], num_layers: int
) -> float:
    """Least sum of stage times over all splits: blocks fill the cheapest (stage, mode) memory first.

    Relaxation: stage s holding n layers in some mode costs n * c[s, r] for a mode r whose
    capacity holds n, which is at least h_s(n): the first cap_1 layers at the stage's cheapest
    per-layer cost c_1, the next up to cap_2 (the most any of its two cheapest modes holds) at
    c_2, and so on (cap_j = max of the j cheapest modes' capacities). Each h_s is convex, so the
    least sum_s h_s(n_s) with sum_s n_s = layers takes the cheapest segments over all stages
    first; plus each stage's least fixed part. Several block kinds: ``_least_kind_total_s``.
    """
    pp, vp = terms.plan.pp, terms.plan.vp
    if terms.heterogeneous:
        return _least_kind_total_s(terms, recomputes, {s: 1 for s in range(pp)})
    slots = _slots(terms, num_layers)
    total = sum(min(terms.stage_time(s, r).fixed for r in recomputes) for s in range(pp))
    segments: list[tuple[float, int]] = []
    for s in range(pp):
        held = 0
        for r in sorted(recomputes, key=lambda r: terms.block_at(s, r).time_s):
            cap = max(held, vp * k_max[(s, r)] - slots[s])
            segments.append((terms.block_at(s, r).time_s, cap - held))
            held = cap
    left = num_layers
    for cost, length in sorted(segments):
        take = min(left, length)
        total += take * cost
        left -= take
    return total if left == 0 else INF


def quick_lower_bound_s(terms: StageTerms, recomputes: list[Recompute], num_layers: int) -> float:
    """Bound from the layout's terms alone: every block at the cheapest (stage, mode), perfectly
    balanced (pipeline_lower_bound_s), memory ignored, plus the least exposed DP sync. Stage
    fixed parts: their least over modes (middle stages share stage 1's on a homogeneous cluster).
    Several block kinds: the total is every block at its kind's cheapest cost
    (_least_kind_total_s); per stage, the cheapest kind's.
    Pooled clusters: the slowest stage is also at least the water level of the stages' own
    fixed + per-layer lines (_water_level_s), so (m - 1/vp) * max(that, sum/pp) + sum/vp."""
    pp = terms.plan.pp
    stages = range(pp) if terms.pool_terms else sorted({0, min(1, pp - 1), pp - 1})
    weight = {s: 1 for s in stages}
    if not terms.pool_terms and pp > 2:
        weight[1] = pp - 2
    fixed_s = {s: min(terms.stage_time(s, r).fixed for r in recomputes) for s in stages}
    if terms.heterogeneous:  # the least kind per layer; the exact kind sum for the total
        per_layer_s = {s: min(min(terms.kind_time_s(s, r)) for r in recomputes) for s in stages}
        total = _least_kind_total_s(terms, recomputes, weight, fixed_s)
        dp_lb = 0.0  # relaxed terms do not bound exposed sync (StageTerms.relaxed)
    else:
        per_layer_s = {s: min(terms.block_at(s, r).time_s for r in recomputes) for s in stages}
        total = sum(weight[s] * fixed_s[s] for s in stages) + num_layers * min(per_layer_s.values())
        dp_lb = _dp_lower_bound_s(terms, recomputes, num_layers)
    vp, m = terms.plan.vp, terms.num_micro_batches
    if not terms.pool_terms:
        return pipeline_lower_bound_s(total, pp, vp, m) + dp_lb
    # pooled: the slowest stage is at least the water level of the stages' own lines
    slowest = max(
        total / pp, _water_level_s([fixed_s[s] for s in stages], [per_layer_s[s] for s in stages], num_layers)
    )
    return (m - 1 / vp) * slowest + total / vp + dp_lb


def _water_level_s(fixed_s: list[float], per_layer_s: list[float], num_layers: int) -> float:
    """Least max_s (F_s + c_s n_s) over real n_s >= 0 with sum_s n_s = layers (water-filling):
    the level T with sum_s max(0, (T - F_s) / c_s) = layers. A stage holding n layers takes at
    least its least fixed part plus n times its cheapest per-layer time, so this bounds the
    slowest stage of any split. Units: seconds."""
    if any(c <= 0 for c in per_layer_s):
        return max(fixed_s) if fixed_s else 0.0
    order = sorted(range(len(fixed_s)), key=lambda s: fixed_s[s])
    inv, weighted = 0.0, 0.0
    level = 0.0
    for j, s in enumerate(order):
        inv += 1 / per_layer_s[s]
        weighted += fixed_s[s] / per_layer_s[s]
        level = (num_layers + weighted) / inv
        nxt = fixed_s[order[j + 1]] if j + 1 < len(order) else float("inf")
        if level <= nxt:
            break
    return max(level, min(fixed_s))


def _stage_time_by_k(
    terms: StageTerms,
    stage: int,
    k_max: dict[tuple[int, Recompute], int],
    recomputes: list[Recompute],
    k_hi: int,
    slots: tuple[int, ...],
) -> list[float]:
    """f(k), k = 0..k_hi: the least time of ``stage`` holding vp*k - slot layers over the
    recompute modes whose memory fits them (INF where none does). Non-decreasing in k.
    Several block kinds: a bound, each of the stage's vp chunks at the cheapest run of as many
    consecutive blocks the rank can reach (``_least_in_reach``)."""
    vp = terms.plan.vp
    if terms.heterogeneous:
        return _least_stage_s(terms, stage, k_hi, k_max, recomputes, slots)
    modes = sorted(recomputes, key=lambda r: terms.block_at(stage, r).time_s)
    lines = [(k_max[(stage, r)], terms.stage_time(stage, r)) for r in modes]
    out = []
    for k in range(k_hi + 1):
        line = next((line for cap, line in lines if cap >= k), None)
        out.append(INF if line is None else line.at(max(0, vp * k - slots[stage])))
    return out


@cache
def run_kind_counts(kinds: tuple[int, ...], length: int, num_kinds: int) -> tuple[tuple[int, ...], ...]:
    """The distinct per-kind counts (``num_kinds`` of them) of every run of ``length``
    consecutive entries of ``kinds``."""
    out = set()
    for start in range(len(kinds) - length + 1):
        counts = [0] * num_kinds
        for k in kinds[start : start + length]:
            counts[k] += 1
        out.add(tuple(counts))
    return tuple(sorted(out))


def _least_run(kinds: tuple[int, ...], costs: tuple[float, ...], length: int) -> float:
    """Least summed cost of ``length`` consecutive entries of ``kinds`` (0 for none; INF when
    ``kinds`` is shorter)."""
    if length <= 0:
        return 0.0
    counts = run_kind_counts(kinds, length, len(costs))
    if not counts:
        return INF
    return min(sum(n * c for n, c in zip(cnt, costs, strict=True)) for cnt in counts)


@cache
def chunk_reach(
    block_kinds: tuple[int, ...], pp: int, vp: int, stage: int, slots: tuple[int, ...]
) -> tuple[tuple[int, ...], ...]:
    """Per chunk c of rank ``stage``, the kinds of the virtual positions it can cover over every
    split: [c K + P_lo, (c + 1) K - R) of [embedding slot] + blocks + [loss slot] (K = k_total;
    P_lo the least k of the ranks before it, R of those after; a slot is kind max + 1, free).
    Runs inside these ranges include every chunk the rank can hold (and possibly runs across
    ranges, which only lowers a least run: a bound stays a bound)."""
    slot_kind = max(block_kinds) + 1
    virtual = (slot_kind,) * slots[0] + block_kinds + (slot_kind,) * (slots[-1] if pp > 1 else 0)
    k_total = len(virtual) // vp
    low = [1 + sl for sl in slots]
    first, after = sum(low[:stage]), sum(low[stage + 1 :])
    return tuple(virtual[c * k_total + first : (c + 1) * k_total - after] for c in range(vp))


@cache
def _one_kind(reach: tuple[tuple[int, ...], ...], slot_kind: int) -> int | None:
    """The one block kind every chunk's reach holds (slot positions aside), else None."""
    kinds = {k for chunk in reach for k in chunk if k != slot_kind}
    return next(iter(kinds)) if len(kinds) == 1 else None


def _least_in_reach(reach: tuple[tuple[int, ...], ...], costs: tuple[float, ...], k: int) -> float:
    """Least cost of a rank's vp chunks of k virtual positions each, chunk c within reach[c]
    (chunk_reach), with ``costs`` per block kind (slots cost nothing)."""
    return sum(_least_run(kinds, (*costs, 0.0), k) for kinds in reach)


def _least_stage_s(
    terms: StageTerms,
    stage: int,
    k_hi: int,
    k_max: dict[tuple[int, Recompute], int],
    recomputes: list[Recompute],
    slots: tuple[int, ...],
) -> list[float]:
    """For k = 0..k_hi, a bound on ``stage`` holding vp chunks of k blocks (its slot among them):
    its fixed part plus each chunk at its least run (_least_in_reach), over the modes whose memory
    cap holds k (INF where none does)."""
    modes = tuple(
        (k_max[(stage, r)], terms.stage_time(stage, r).fixed, terms.kind_time_s(stage, r)) for r in recomputes
    )
    reach = chunk_reach(terms.block_kinds, terms.plan.pp, terms.plan.vp, stage, slots)
    return list(_least_stage_curve(reach, modes, k_hi))


@lru_cache(maxsize=1 << 14)
def _least_stage_curve(
    reach: tuple[tuple[int, ...], ...], modes: tuple[tuple[int, float, tuple[float, ...]], ...], k_hi: int
) -> tuple[float, ...]:
    """_least_stage_s of a stage's reach and its modes' (cap, fixed s, per-kind s): pure, so the
    rank orders of one family (same memory caps, often the same times) compute it once."""
    out = []
    for k in range(k_hi + 1):
        best = INF
        for cap, fixed, costs in modes:
            if cap >= k:
                best = min(best, fixed + _least_in_reach(reach, costs, k))
        out.append(best)
    return tuple(out)


def _least_kind_total_s(
    terms: StageTerms,
    recomputes: list[Recompute],
    stages: dict[int, int],
    fixed_s: dict[int, float] | None = None,
) -> float:
    """Several block kinds: every block of each kind at its cheapest (stage, mode), whatever the
    split (memory ignored), plus each stage's least fixed part; ``stages`` weighs stage s."""
    counts = [terms.block_kinds.count(k) for k in range(terms.num_kinds)]
    costs = [terms.kind_time_s(s, r) for s in stages for r in recomputes]
    least = [min(c[k] for c in costs) for k in range(terms.num_kinds)]
    if fixed_s is None:
        fixed_s = {s: min(terms.stage_time(s, r).fixed for r in recomputes) for s in stages}
    fixed = sum(w * fixed_s[s] for s, w in stages.items())
    return fixed + sum(n * c for n, c in zip(counts, least, strict=True))


def _folded_min_max(
    terms: StageTerms, recomputes: list[Recompute], k_total: int, k_hi: int, slots: tuple[int, ...]
) -> tuple[float, list[int] | None]:
    """Several block kinds: the least slowest-stage time over every split, memory ignored and
    each block at its stage's cheapest mode, and a split that attains it (within 1e-9).

    Chunk c of rank s holds virtual positions [c K + P_s, c K + P_{s+1}) of the sequence
    [embedding slot] + blocks + [loss slot] (K = k_total, P_s = k_0 + ... + k_{s-1}), so stage s
    costs F_s + sum_{i in [P_s, P_{s+1})} u_s[i] with u_s[i] = sum_c cost_s(block at c K + i):
    a contiguous partition of the folded sequence u. Its min-max is found by bisection on T,
    each T checked greedily (each stage takes the longest prefix within T that leaves every
    later stage its least k = 1 + slot): exact for non-negative costs. Returns (a lower bound on
    that least time, the greedy split at the upper end of the bisection)."""
    pp, vp = terms.plan.pp, terms.plan.vp
    kinds = terms.block_kinds
    virtual: list[int | None] = [None] * slots[0] + list(kinds) + [None] * (slots[-1] if pp > 1 else 0)
    if len(virtual) != vp * k_total:
        return 0.0, None
    stages = range(pp) if terms.pool_terms else [0]
    folded: dict[int, list[float]] = {}
    fixed = [min(terms.stage_time(s, r).fixed for r in recomputes) for s in range(pp)]
    for s in stages:
        costs = [min(terms.kind_time_s(s, r)[k] for r in recomputes) for k in range(terms.num_kinds)]
        prefix = [0.0]
        for i in range(k_total):
            u = sum(costs[b] for c in range(vp) if (b := virtual[c * k_total + i]) is not None)
            prefix.append(prefix[-1] + u)
        folded[s] = prefix
    low = [1 + sl for sl in slots]

    def split_within(t: float) -> list[int] | None:
        ks, at = [], 0
        for s in range(pp):
            prefix = folded[s if terms.pool_terms else 0]
            need_after = sum(low[s + 1 :])
            longest = min(k_total - need_after - at, k_hi)
            k = longest
            while k >= low[s] and fixed[s] + prefix[at + k] - prefix[at] > t:
                k -= 1
            if k < low[s]:
                return None
            ks.append(k)
            at += k
        return ks if at == k_total else None

    hi = max(fixed) + folded[stages[-1] if terms.pool_terms else 0][-1] * 2 + 1.0
    lo = 0.0
    best = split_within(hi)
    if best is None:
        return 0.0, None
    for _ in range(64):
        mid = (lo + hi) / 2
        ks = split_within(mid)
        if ks is None:
            lo = mid
        else:
            hi, best = mid, ks
        if hi - lo <= 1e-9 * hi:
            break
    return lo, best


def _min_max_split(f: list[list[float]], k_total: int) -> list[int] | None:
    """Integer split (each stage >= 1) minimising max_s f_s(k_s) for non-decreasing f_s.

    Greedy: each next unit goes to the stage whose time after taking it is least; optimal for
    the min-max of non-decreasing functions (an exchange argument)."""
    pp = len(f)
    if k_total < pp or any(len(fs) < 2 or fs[1] == INF for fs in f):
        return None
    ks = [1] * pp
    heap = [(f[s][2], s) for s in range(pp) if len(f[s]) > 2 and f[s][2] < INF]
    heapq.heapify(heap)
    for _ in range(k_total - pp):
        if not heap:
            return None
        _, s = heapq.heappop(heap)
        ks[s] += 1
        if ks[s] + 1 < len(f[s]) and f[s][ks[s] + 1] < INF:
            heapq.heappush(heap, (f[s][ks[s] + 1], s))
    return ks


def _lower_bound_s(
    terms: StageTerms,
    f: list[list[float]],
    ks: list[int] | None,
    k_max: dict[tuple[int, Recompute], int],
    recomputes: list[Recompute],
    num_layers: int,
    exact: StageTerms | None = None,
    tmax_floor: float = 0.0,
) -> float:
    """(m - 1/vp) * tmax_lb + sum_lb / vp + optimizer_lb (see the module docstring); ``terms``
    relaxed (several block kinds: StageTerms.relaxed), ``exact`` the layout's own for the sum;
    ``tmax_floor`` a bound on the slowest stage from elsewhere (_folded_min_max)."""
    pp, vp, m = terms.plan.pp, terms.plan.vp, terms.num_micro_batches
    total = _least_total_s(exact or terms, k_max, recomputes, num_layers)
    if ks is None or total == INF:
        return INF
    tmax = max(total / pp, max(f[s][k] for s, k in enumerate(ks)), tmax_floor)
    opt = [terms.optimizer(s) for s in range(pp)]
    opt_lb = max(
        max(o.at(vp) for o in opt),
        sum(o.fixed for o in opt) / pp + min(o.per_layer for o in opt) * num_layers / pp,
    )
    return (m - 1 / vp) * tmax + total / vp + opt_lb + _dp_lower_bound_s(terms, recomputes, num_layers)


def _dp_lower_bound_s(terms: StageTerms, recomputes: list[Recompute], num_layers: int) -> float:
    """Least exposed DP sync over all splits and modes.

    Each stage's exposure max(0, sync - window) is at least g_s(k) = sync_s(k) - window_s(k) with
    the largest window any mode gives that stage. Some stage holds k in [ceil(K/pp), K - pp + 1]
    and some k in [1, floor(K/pp)] (K = k_total; a stage holds vp k - slot layers); g_s is
    affine, so on each range it is least at an end, and the exposure is at least the larger of
    the two minima over stages. Relaxed terms (several block kinds) bound time, not this
    difference: 0 then."""
    if terms.relaxation:
        return 0.0
    pp, vp = terms.plan.pp, terms.plan.vp
    slots = _slots(terms, num_layers)
    k_total = (num_layers + sum(slots)) // vp
    stages = range(pp) if terms.pool_terms else sorted({0, min(1, pp - 1), pp - 1})  # middles alike
    g = [
        (terms.dp_exposed(s, max(recomputes, key=lambda r: terms.block_at(s, r).backward_s)), slots[s])
        for s in stages
    ]
    hi, lo = -(-k_total // pp), k_total // pp
    k_last = k_total - pp + 1

    def at(gs: Affine, k: int, slot: int) -> float:
        return gs.at(max(0, vp * k - slot))

    above = min(min(at(gs, hi, sl), at(gs, k_last, sl)) for gs, sl in g)
    below = min(min(at(gs, 1, sl), at(gs, lo, sl)) for gs, sl in g) if lo >= 1 else above
    return max(0.0, above, below)


def _upper_plan(
    terms: StageTerms,
    layout: Layout,
    split: tuple[int, ...] | None,
    k_max: dict[tuple[int, Recompute], int],
    recomputes: list[Recompute],
    uniform: bool = False,
    slots: tuple[int, ...] = (),
) -> tuple[float, Plan | None]:
    """Score ``split`` with each stage's fastest fitting mode (INF if some stage cannot fit or
    holds fewer than vp (1 + slot) - slot layers); ``uniform``: the fastest single mode that
    fits every stage."""
    if split is None:
        return INF, None
    vp = layout.vp
    slots = slots or (0,) * layout.pp
    if any(n < vp * (1 + sl) - sl or (n + sl) % vp for n, sl in zip(split, slots, strict=True)):
        return INF, None
    counts = terms.stage_counts(layout.plan(split, (Recompute.NONE,) * layout.pp))

    def fits(s: int, r: Recompute) -> bool:
        if k_max[(s, r)] * vp - slots[s] < split[s]:
            return False
        if not terms.heterogeneous:  # k_max is exact with one block kind
            return True
        return stage_memory(terms, s, counts[s], r).total_bytes <= terms.stage_capacity_bytes(s)

    if uniform:
        scored = [
            (step_time_s(replace(terms, plan=p)).step_s, p)
            for p in (
                layout.plan(split, (r,) * layout.pp)
                for r in recomputes
                if all(fits(s, r) for s in range(layout.pp))
            )
        ]
        return min(scored, key=lambda u: u[0], default=(INF, None))
    rec: list[Recompute] = []
    for s in range(layout.pp):
        modes = [r for r in recomputes if fits(s, r)]
        if not modes:
            return INF, None
        rec.append(min(modes, key=lambda r: terms.stage_time_s(s, counts[s], r)))
    plan = layout.plan(split, tuple(rec))
    return step_time_s(replace(terms, plan=plan)).step_s, plan


def layer_caps(
    terms: StageTerms,
    recomputes: list[Recompute],
    k_hi: int,
    stage_modes: tuple[Recompute, ...] | None = None,
    num_layers: int | None = None,
) -> dict[tuple[int, Recompute], int]:
    """Most k (units of vp layers less the stage's slot, at most ``k_hi``) each stage holds in
    each mode within memory: (most layers + slot) // vp; 0 for a mode other than the stage's own
    in ``stage_modes`` (the scenario fixes one mode per stage), so every bound and the model see
    only what that stage may run. Memory does not depend on the rank order, so any order's terms
    give the same caps. ``num_layers``: the model's (for the slots; None: no slots).
    Several block kinds: the most k whose least memory fits (``_kind_cap``), a relaxation."""
    vp = terms.plan.vp
    slots = _slots(terms, num_layers) if num_layers is not None else (0,) * terms.plan.pp
    if terms.heterogeneous:
        slots = _slots(terms, len(terms.block_kinds))
        caps = {}
        for r in recomputes:
            for s, (fixed, per_kind) in enumerate(kind_bytes_per_stage(terms, r)):
                own = stage_modes is None or stage_modes[s] == r
                caps[(s, r)] = _kind_cap(terms, s, fixed, per_kind, k_hi, slots) if own else 0
        return caps
    return {
        (s, r): min(k_hi, (n + slots[s]) // vp) if stage_modes is None or stage_modes[s] == r else 0
        for r in recomputes
        for s, n in enumerate(max_layers_per_stage(terms, r))
    }


def _kind_cap(
    terms: StageTerms,
    stage: int,
    fixed_bytes: float,
    per_kind: tuple[float, ...],
    k_hi: int,
    slots: tuple[int, ...],
) -> int:
    """Most k (at most k_hi) for which ``stage`` holding vp chunks of k blocks can fit memory:
    its fixed bytes plus each chunk at the least memory of a run it can hold (_least_in_reach of
    the per-kind bytes, cost.memory.kind_bytes_per_stage). 0 if even k = 1 + slot does not fit."""
    room = terms.stage_capacity_bytes(stage) - fixed_bytes
    reach = chunk_reach(terms.block_kinds, terms.plan.pp, terms.plan.vp, stage, slots)
    return _cap_in_reach(reach, terms.plan.vp, 1 + slots[stage], per_kind, room, k_hi)


@lru_cache(maxsize=1 << 16)
def _cap_in_reach(
    reach: tuple[tuple[int, ...], ...],
    vp: int,
    least: int,
    per_kind: tuple[float, ...],
    room: float,
    k_hi: int,
) -> int:
    """_kind_cap of a stage's reach, its least k, per-kind bytes and room: pure, so the rank
    orders of one family (memory does not depend on the order) compute it once."""
    num_kinds = len(per_kind)
    kind = _one_kind(reach, num_kinds)
    if kind is not None and per_kind[kind] > 0:  # closed form: vp k c - (slots in reach) c <= room
        c = per_kind[kind]
        free = sum(1 for chunk in reach if num_kinds in chunk)
        k = min(k_hi, min(len(chunk) for chunk in reach), math.floor((room + free * c) / (vp * c)))
        return k if k >= least else 0

    def fits(k: int) -> bool:
        return _least_in_reach(reach, per_kind, k) <= room

    if k_hi < least or not fits(least):
        return 0
    lo, hi = least, k_hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def fits_some_split(
    k_max: dict[tuple[int, Recompute], int],
    pp: int,
    k_total: int,
    uniform: bool = False,
    slots: tuple[int, ...] = (),
) -> bool:
    """Some split fits: the most layers each stage can hold (best mode; ``uniform``: one mode
    for all stages), each at least its least k (1 + slot), add up to the model."""
    low = [1 + sl for sl in slots] if slots else [1] * pp
    if sum(low) > k_total:
        return False
    if uniform:
        modes = {r for _, r in k_max}
        return any(
            all(k_max[(s, r)] >= low[s] for s in range(pp))
            and sum(k_max[(s, r)] for s in range(pp)) >= k_total
            for r in modes
        )
    cap = [max(k for (s, _), k in k_max.items() if s == stage) for stage in range(pp)]
    return all(c >= lo for c, lo in zip(cap, low, strict=True)) and sum(cap) >= k_total


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
) -> LayoutTables:
    """Memory capacities and bounds of one layout (integer coefficients via ``.ticks()``).

    ``terms``: the layout's StageTerms when the caller already has them; ``uniform``: one
    recompute mode for every stage; ``split``: the only layer split allowed (its upper bound);
    ``stage_modes``: the one recompute mode each stage may run (layer_caps); ``partial``: FULL
    stages may store some layers, so the lower bounds relax (recompute_layers.partial_floor,
    bound_caps), unless storing cannot pay (partial_may_pay); ``partial_fixed``: the scenario
    fixes the counts, so the model always carries them.
    """
    terms = terms or stage_terms(graph, layout, job, cluster)
    pp, vp = layout.pp, layout.vp
    num_layers = graph.spec.num_layers
    slots = _slots(terms, num_layers)
    k_total = (num_layers + sum(slots)) // vp
    k_hi = max(k_choices) if k_choices else k_total - (pp - 1)
    bound = terms.relaxed()  # several block kinds: bounds from the least of them
    k_max = layer_caps(terms, recomputes, k_hi, stage_modes, num_layers)
    partial = partial_fixed or (partial and partial_may_pay(terms, k_max, k_hi, slots))
    caps, modes = bound_caps(k_max, recomputes, pp) if partial else (k_max, recomputes)
    f = [_stage_time_by_k(terms, s, k_max, recomputes, k_hi, slots) for s in range(pp)]
    if partial:  # FULL stages storing some layers (constraints/recompute_layers.py)
        f = partial_floor(terms, f, k_max, slots)
    ks = _min_max_split(f, k_total)
    folded_tmax, folded_ks = (
        _folded_min_max(terms, recomputes, k_total, k_hi, slots) if terms.heterogeneous else (0.0, None)
    )
    lower = _lower_bound_s(bound, f, ks, caps, modes, num_layers, exact=terms, tmax_floor=folded_tmax)
    candidates = [even_layers(num_layers, pp, vp)]
    if split:
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
        (_upper_plan(terms, layout, c, k_max, recomputes, uniform, slots) for c in candidates),
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
        min(lower, upper),
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
    for s in range(tab.plan.pp):
        opt = terms.optimizer_deltas(s)
        out.mem_cap[s] = bytes_down(terms.stage_capacity_bytes(s))
        for k in kinds:
            out.opt_delta[(k, s)] = to_ticks(opt[k], res)
        for r in tab.recomputes:
            time_d, dp_d = terms.time_deltas(s, r), terms.exposed_deltas(s, r)
            mem = stage_memory_model(terms, s, r)
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
