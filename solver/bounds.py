"""A layout's bounds, used to prune it before CP-SAT; every number from cost/ (StageTerms).

- lower bound: the 1F1B step (m - 1/vp) * tmax + sum_t / vp + optimizer grows with each term, so
  it is bounded below by tmax >= the least max over integer splits of each stage's fastest
  memory-feasible time (greedy min-max, exact for these non-decreasing functions), sum_t >= blocks
  filling the cheapest (stage, mode) memory first, optimizer >= its least per-stage value;
- upper bound: the better of the even split and that min-max split, each stage running its
  fastest recompute that fits (a real plan, scored by cost/); under ``uniform`` recompute the
  fastest single mode every stage fits in. The lower bounds ignore ``uniform`` (a relaxation);
- ``quick_lower_bound_s``: from a layout's terms alone, memory ignored (the cheap levels of
  candidates.py's branch and bound).
Several block kinds: the per-stage curves and the slowest stage come from kinds.py.
"""

from __future__ import annotations

import heapq
from dataclasses import replace

from paraplan.cost import Layout, Plan, Recompute, StageTerms
from paraplan.cost.evaluate import step_time_s
from paraplan.cost.memory import stage_memory
from paraplan.cost.pp import pipeline_lower_bound_s
from paraplan.cost.stage import Affine
from paraplan.solver.caps import layout_slots
from paraplan.solver.kinds import INF, least_kind_total_s, least_stage_s

__all__ = [
    "quick_lower_bound_s",
    "stage_time_by_k",
    "min_max_split",
    "layout_lower_bound_s",
    "upper_bound_plan",
]


def _least_total_s(
    terms: StageTerms, k_max: dict[tuple[int, Recompute], int], recomputes: list[Recompute], num_layers: int
) -> float:
    """Least sum of stage times over all splits: blocks fill the cheapest (stage, mode) memory first.

    Relaxation: stage s holding n layers in some mode costs n * c[s, r] for a mode r whose
    capacity holds n, which is at least h_s(n): the first cap_1 layers at the stage's cheapest
    per-layer cost c_1, the next up to cap_2 (the most any of its two cheapest modes holds) at
    c_2, and so on (cap_j = max of the j cheapest modes' capacities). Each h_s is convex, so the
    least sum_s h_s(n_s) with sum_s n_s = layers takes the cheapest segments over all stages
    first; plus each stage's least fixed part. Several block kinds: ``least_kind_total_s``.
    """
    pp, vp = terms.plan.pp, terms.plan.vp
    if terms.heterogeneous:
        return least_kind_total_s(terms, recomputes, {s: 1 for s in range(pp)})
    slots = layout_slots(terms, num_layers)
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
    (least_kind_total_s); per stage, the cheapest kind's.
    Pooled clusters: the slowest stage is also at least the water level of the stages' own
    fixed + per-layer lines (_water_level_s), so (m - 1/vp) * max(that, sum/pp) + sum/vp."""
    pp = terms.plan.pp
    stages = range(pp) if terms.pool_terms else sorted({0, min(1, pp - 1), pp - 1})
    weight = {s: 1 for s in stages}
    if not terms.pool_terms and pp > 2:
        weight[1] = pp - 2
    lines = {s: [terms.stage_time(s, r) for r in recomputes] for s in stages}
    fixed_s = {s: min(line.fixed for line in lines[s]) for s in stages}
    if terms.heterogeneous:  # the least kind per layer; the exact kind sum for the total
        per_layer_s = {s: min(min(terms.kind_time_s(s, r)) for r in recomputes) for s in stages}
        total = least_kind_total_s(terms, recomputes, weight, fixed_s)
        dp_lb = 0.0  # relaxed terms do not bound exposed sync (StageTerms.relaxed)
    else:  # a stage line's per-layer part is its base block's time (StageTerms.stage_time)
        per_layer_s = {s: min(line.per_layer for line in lines[s]) for s in stages}
        total = sum(weight[s] * fixed_s[s] for s in stages) + num_layers * min(per_layer_s.values())
        dp_lb = _dp_lower_bound_s(terms, recomputes, num_layers)
    vp, m, w = terms.plan.vp, terms.num_micro_batches, float(terms.bubble_weight)
    if not terms.pool_terms:
        return pipeline_lower_bound_s(total, pp, vp, m, w) + dp_lb
    # pooled: the slowest stage is at least the water level of the stages' own lines
    slowest = max(
        total / pp, _water_level_s([fixed_s[s] for s in stages], [per_layer_s[s] for s in stages], num_layers)
    )
    return (m - w) * slowest + total * w + dp_lb


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


def stage_time_by_k(
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
    consecutive blocks the rank can reach (``least_in_reach``)."""
    vp = terms.plan.vp
    if terms.heterogeneous:
        return least_stage_s(terms, stage, k_hi, k_max, recomputes, slots)
    modes = sorted(recomputes, key=lambda r: terms.block_at(stage, r).time_s)
    lines = [(k_max[(stage, r)], terms.stage_time(stage, r)) for r in modes]
    out = []
    for k in range(k_hi + 1):
        line = next((line for cap, line in lines if cap >= k), None)
        out.append(INF if line is None else line.at(max(0, vp * k - slots[stage])))
    return out


def min_max_split(f: list[list[float]], k_total: int) -> list[int] | None:
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


def layout_lower_bound_s(
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
    ``tmax_floor`` a bound on the slowest stage from elsewhere (folded_min_max)."""
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
    w = float(terms.bubble_weight)  # 1/vp under 1F1B and interleaving (cost/pp_schedule.py)
    return (m - w) * tmax + total * w + opt_lb + _dp_lower_bound_s(terms, recomputes, num_layers)


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
    slots = layout_slots(terms, num_layers)
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


def upper_bound_plan(
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
