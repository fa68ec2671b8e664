"""Bounds for a model with several block kinds: where each rank's blocks can land, and the least
they can cost there.

Rank s holds vp chunks of k_s consecutive virtual positions of [embedding slot] + blocks + [loss
slot] (cost.split.pipeline_slots); over every split, chunk c of rank s stays within a range of
those positions (``chunk_reach``), so the least time or memory a chunk can take is that of the
cheapest run of k positions in its range (``least_in_reach``). The least-stage curves
(``least_stage_s``) and the memory caps (caps.py) are built from it, the least sum over stages
from every block at its kind's cheapest (``least_kind_total_s``), and the least slowest stage over
every split from the folded sequence of chunk positions (``folded_min_max``). The functions of a
reach alone are cached: the rank orders of one family (same memory caps, often the same times)
compute them once.
"""

from __future__ import annotations

from functools import cache, lru_cache

from paraplan.cost import Recompute, StageTerms

__all__ = [
    "INF",
    "run_kind_counts",
    "chunk_reach",
    "one_kind",
    "least_in_reach",
    "least_stage_s",
    "least_kind_total_s",
    "folded_min_max",
]

INF = float("inf")


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
def one_kind(reach: tuple[tuple[int, ...], ...], slot_kind: int) -> int | None:
    """The one block kind every chunk's reach holds (slot positions aside), else None."""
    kinds = {k for chunk in reach for k in chunk if k != slot_kind}
    return next(iter(kinds)) if len(kinds) == 1 else None


def least_in_reach(reach: tuple[tuple[int, ...], ...], costs: tuple[float, ...], k: int) -> float:
    """Least cost of a rank's vp chunks of k virtual positions each, chunk c within reach[c]
    (chunk_reach), with ``costs`` per block kind (slots cost nothing)."""
    return sum(_least_run(kinds, (*costs, 0.0), k) for kinds in reach)


def least_stage_s(
    terms: StageTerms,
    stage: int,
    k_hi: int,
    k_max: dict[tuple[int, Recompute], int],
    recomputes: list[Recompute],
    slots: tuple[int, ...],
) -> list[float]:
    """For k = 0..k_hi, a bound on ``stage`` holding vp chunks of k blocks (its slot among them):
    its fixed part plus each chunk at its least run (least_in_reach), over the modes whose memory
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
    """least_stage_s of a stage's reach and its modes' (cap, fixed s, per-kind s): pure, so the
    rank orders of one family (same memory caps, often the same times) compute it once."""
    out = []
    for k in range(k_hi + 1):
        best = INF
        for cap, fixed, costs in modes:
            if cap >= k:
                best = min(best, fixed + least_in_reach(reach, costs, k))
        out.append(best)
    return tuple(out)


def least_kind_total_s(
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


def folded_min_max(
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
