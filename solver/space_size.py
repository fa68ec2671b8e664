"""The branch and bound's count of layouts, and the layer counts per stage a layout allows
(solver/candidates.py): the layouts in the space are reported (``space_size``), not proven, and
``k_choices`` (what k = (layers + slot) / vp a stage may take) is asked of every family and of
each per-stage variant's tables."""

from __future__ import annotations

import time
from typing import Any

from paraplan.cost import Layout
from paraplan.cost.plan import PartialPlan, plan_key
from paraplan.cost.software import SOFTWARE_FIELDS
from paraplan.cost.split import pipeline_slots
from paraplan.graph import ModelSpec
from paraplan.hardware import Cluster
from paraplan.solver.placement import COUNT_IGNORE, num_orders
from paraplan.solver.space import Options, exact_split, least_state, software_states, state_of, zeros

__all__ = ["KMemo", "k_choices", "k_choices_of", "space_size"]

_STATE_FIELDS = frozenset(SOFTWARE_FIELDS)
"""The Layout fields of the MoE software state (cost/software.py)."""
_SIZE_IGNORE = _STATE_FIELDS | (COUNT_IGNORE - {"vp"})
"""What a family's count of layouts (``space_size``) does not read: ``num_orders`` reads none of
COUNT_IGNORE, ``zeros`` only dp and cp, ``k_choices`` only pp and vp; nor the MoE software state."""


def k_choices(layout: Layout, num_layers: int, fixed: PartialPlan, options: Options) -> list[int] | None:
    """Allowed k = (layers + slot) / vp per stage (cost.split.pipeline_slots); None = any;
    [] = the layout is impossible. Reads the layout's pp and vp alone."""
    slots = pipeline_slots(num_layers, layout.pp, layout.vp)
    if slots is None or (num_layers + sum(slots)) // layout.vp < layout.pp + sum(slots):
        return []  # no split in units of vp, or too few for each stage's least k (1 + slot)
    split = exact_split(layout, num_layers, fixed, options)
    if split is not None:  # () : no valid split, so no k
        return sorted({(n + sl) // layout.vp for n, sl in zip(split, slots, strict=True)}) if split else []
    if not options.allow_uneven_stages:  # equal stages and chunks (no slots: vp | layers)
        if num_layers % (layout.pp * layout.vp):
            return []
        return [num_layers // (layout.pp * layout.vp)]
    return None


KMemo = dict[tuple[int, int], list[int] | None]
"""``k_choices`` by (pp, vp), the only fields of a layout it reads (one search's fixed and options)."""


def k_choices_of(
    memo: KMemo, layout: Layout, num_layers: int, fixed: PartialPlan, options: Options
) -> list[int] | None:
    """``k_choices`` of ``layout``, remembered in ``memo`` (a search asks it of every family)."""
    key = (layout.pp, layout.vp)
    if key not in memo:
        memo[key] = k_choices(layout, num_layers, fixed, options)
    return memo[key]


def space_size(
    space: list[Layout],
    spec: ModelSpec,
    cluster: Cluster,
    fixed: PartialPlan,
    options: Options,
    deadline: float,
    k_memo: KMemo,
    one_class: bool = False,
) -> int:
    """Layouts in the space: families x MoE software states x ZeRO stages x rank orders (before
    dominance pruning); 0 when the deadline has passed (the count is a report, not part of the
    proof). ``space``: ``families(states=False, one_class=one_class)``, each family standing for
    every state of its class (``one_class``: every state). ``k_memo``: the search's
    ``k_choices`` by (pp, vp)."""
    cache: dict[tuple[object, ...], Any] = {}
    counts: dict[tuple[object, ...], int] = {}  # by family less what no count reads (_SIZE_IGNORE)
    per_state: dict[tuple[object, ...], int] = {}  # the states a family stands for, by ep and state
    total = 0
    for i, f in enumerate(space):
        if i % 1024 == 0 and time.perf_counter() > deadline:
            return 0
        key = plan_key(f, _SIZE_IGNORE)
        count = counts.get(key)
        if count is None:
            count = counts[key] = (
                len(zeros(f, fixed, options=options)) * num_orders(f, fixed, options, cache)
                if k_choices_of(k_memo, f, spec.num_layers, fixed, options) != []
                else 0
            )
        if options.search_moe_state and spec.is_moe:
            state = (f.ep, state_of(f))
            if state not in per_state:
                found = software_states(spec, cluster, f.ep, fixed)
                per_state[state] = (
                    len(found) if one_class else sum(least_state(st, fixed) == state[1] for st in found)
                )
            count *= per_state[state]
        total += count
    return total
