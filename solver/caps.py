"""Memory caps of a layout: the most layers each stage holds in each recompute mode, and whether
some split fits.

Stage s holds vp * k_s - slots[s] layers (``layout_slots``: cost.split.pipeline_slots, zero where
the layout has none). ``layer_caps`` gives, per (stage, mode), the most k within the stage's
device memory (cost.memory.max_layers_per_stage); with several block kinds, the most k whose
least memory over the runs of blocks the rank can reach fits (kinds.py), a relaxation.
``fits_some_split``: the caps add up to the model. The model's memory constraint
(constraints/memory.py) and every bound (bounds.py) read these caps.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

from paraplan.cost import Recompute, StageTerms
from paraplan.cost.memory import BaseMemo
from paraplan.cost.memory_layers import (
    PartsMemo,
    kind_bytes_per_stage,
    last_stage_kind_bytes,
    max_layers_per_stage,
)
from paraplan.cost.plan import plan_key
from paraplan.cost.split import pipeline_slots
from paraplan.solver.kinds import chunk_reach, least_in_reach, one_kind

__all__ = [
    "layout_slots",
    "layer_caps",
    "fits_some_split",
    "some_split_fits",
    "CapsMemo",
]

CapsMemo = dict[tuple[Any, ...], dict[tuple[int, Recompute], int]]
"""One search's caps by (layout less its rank order, mode, k_hi, stage_modes, num_layers): the
memory check of a family and the tables of its layouts read the same caps (``layer_caps``)."""
_ORDER = frozenset({"order"})

_LEAST_MEMORY_FIRST = (Recompute.FULL, Recompute.SELECTIVE, Recompute.NONE)
"""The order ``some_split_fits`` asks the modes in: the least activation memory per layer first."""


def layout_slots(terms: StageTerms, num_layers: int) -> tuple[int, ...]:
    """pipeline_slots of the layout (all zero when it has none: such layouts are refused
    before their tables are built)."""
    pp, vp = terms.plan.pp, terms.plan.vp
    return pipeline_slots(num_layers, pp, vp) or (0,) * pp


def layer_caps(
    terms: StageTerms,
    recomputes: list[Recompute],
    k_hi: int,
    stage_modes: tuple[Recompute, ...] | None = None,
    num_layers: int | None = None,
    memo: CapsMemo | None = None,
    bases: BaseMemo | None = None,
    parts: PartsMemo | None = None,
) -> dict[tuple[int, Recompute], int]:
    """Most k (units of vp layers less the stage's slot, at most ``k_hi``) each stage holds in
    each mode within memory: (most layers + slot) // vp; 0 for a mode other than the stage's own
    in ``stage_modes`` (the scenario fixes one mode per stage), so every bound and the model see
    only what that stage may run. Memory does not depend on the rank order, so any order's terms
    give the same caps. ``num_layers``: the model's (for the slots; None: no slots).
    Several block kinds: the most k whose least memory fits (``_kind_cap``), a relaxation.
    ``memo``: caps already found for this layout less its rank order (``CapsMemo``), by mode.
    ``bases``: the stages' mode-free memory parts of ``terms`` (cost.memory.BaseMemo), shared
    by the modes of one check; ``parts``: its stages' memory parts by (stage, mode)
    (cost.memory.PartsMemo), where the check asked the last stage first."""
    if memo is not None:
        base = plan_key(terms.plan, _ORDER)
        caps: dict[tuple[int, Recompute], int] = {}
        for r in recomputes:
            key = (base, r, k_hi, stage_modes, num_layers)
            found = memo.get(key)
            if found is None:
                found = memo[key] = layer_caps(terms, [r], k_hi, stage_modes, num_layers, None, bases, parts)
            caps |= found
        return caps
    vp = terms.plan.vp
    slots = layout_slots(terms, num_layers) if num_layers is not None else (0,) * terms.plan.pp
    if terms.heterogeneous:
        slots = layout_slots(terms, len(terms.block_kinds))
        caps = {}
        for r in recomputes:
            for s, (fixed, per_kind) in enumerate(kind_bytes_per_stage(terms, r, bases, parts)):
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
    its fixed bytes plus each chunk at the least memory of a run it can hold (least_in_reach of
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
    kind = one_kind(reach, num_kinds)
    if kind is not None and per_kind[kind] > 0:  # closed form: vp k c - (slots in reach) c <= room
        c = per_kind[kind]
        free = sum(1 for chunk in reach if num_kinds in chunk)
        k = min(k_hi, min(len(chunk) for chunk in reach), math.floor((room + free * c) / (vp * c)))
        return k if k >= least else 0

    def fits(k: int) -> bool:
        return least_in_reach(reach, per_kind, k) <= room

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


def some_split_fits(
    terms: StageTerms,
    recomputes: list[Recompute],
    k_hi: int,
    stage_modes: tuple[Recompute, ...] | None,
    num_layers: int,
    uniform: bool = False,
    memo: CapsMemo | None = None,
) -> bool:
    """``fits_some_split`` of ``layer_caps(terms, recomputes, k_hi, stage_modes, num_layers)``,
    each mode's caps computed only while the answer is open: a split that fits with some of the
    modes fits with all of them (a stage's cap is the most over its modes; ``uniform``: some one
    mode fits every stage), so the modes are asked least memory per layer first and the answer
    is yes at the first that fits; no needs every mode, as before. The modes share each stage's
    mode-free memory parts (cost.memory.BaseMemo). ``uniform`` with several block kinds and
    stages: a mode whose last stage cannot hold its least k is passed over before the other
    stages' caps are built (``_last_stage_short``: the same cap ``layer_caps`` gives it)."""
    pp, vp = terms.plan.pp, terms.plan.vp
    slots = pipeline_slots(num_layers, pp, vp) or (0,) * pp
    k_total = (num_layers + sum(slots)) // vp
    caps: dict[tuple[int, Recompute], int] = {}
    bases: BaseMemo = {}
    parts: PartsMemo = {}
    probe = uniform and pp > 1 and terms.heterogeneous
    for mode in sorted(recomputes, key=_LEAST_MEMORY_FIRST.index):
        if probe and _last_stage_short(terms, mode, k_hi, stage_modes, 1 + slots[-1], bases, parts):
            continue  # no split runs every stage in this mode (fits_some_split, uniform)
        caps |= layer_caps(terms, [mode], k_hi, stage_modes, num_layers, memo, bases, parts)
        if fits_some_split(caps, pp, k_total, uniform, slots):
            return True
    return False


def _last_stage_short(
    terms: StageTerms,
    mode: Recompute,
    k_hi: int,
    stage_modes: tuple[Recompute, ...] | None,
    least_k: int,
    bases: BaseMemo,
    parts: PartsMemo,
) -> bool:
    """The last stage's cap in ``mode`` (``layer_caps`` of a model with several block kinds:
    0 where ``stage_modes`` gives the stage another mode, else ``_kind_cap`` of its own memory
    model) is below ``least_k``, its least k (1 + its slot): then no split fits with every
    stage in ``mode``. Most of the search's unfit memory checks (the least-memory twins,
    family_bound.py) fail there: the last stage holds the loss and the MTP block."""
    stage = terms.plan.pp - 1
    if stage_modes is not None and stage_modes[stage] != mode:
        return True
    fixed, per_kind = last_stage_kind_bytes(terms, mode, bases, parts)
    slots = layout_slots(terms, len(terms.block_kinds))
    return _kind_cap(terms, stage, fixed, per_kind, k_hi, slots) < least_k
