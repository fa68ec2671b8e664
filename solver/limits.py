"""Per-layout search limits: the runnable default searches each layout under the per-stage limits
of every framework that accepts it (``Options.layout_limits``), so one branch and bound covers
the union of the frameworks' own searches exactly.

``narrowed`` applies one framework's limits to the search options (as ``solver.target`` does for
the whole search); ``layout_variants`` gives a layout's narrowed options, less those another
holds; ``spans_search`` tells whether a layout's limits allow everything the search does (then a
rank order it dominates is dropped unasked, placement.py); ``dominated_by_twin`` drops a ZeRO-0
or SP-off layout whose ZeRO-1 / SP-on twin holds it (candidates.py). The oracle test
tests/solver/test_oracle_target.py checks the union against enumeration of each framework's own
space.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from paraplan.cost import Layout, Recompute
from paraplan.cost.derive import derive
from paraplan.cost.plan import PartialPlan
from paraplan.solver.space import Options

__all__ = [
    "StageLimits",
    "narrowed",
    "layout_variants",
    "spans_search",
    "twins",
    "dominated_by_twin",
]


class StageLimits(Protocol):
    """How one framework's per-stage choices may vary (rules/base.py ``SearchLimits`` is one):
    one recompute mode for every stage, even stages, the recompute modes it has (None: all),
    the one split it builds (None: any), whether it recomputes a number of layers per stage."""

    @property
    def uniform_recompute(self) -> bool: ...
    @property
    def even_stages(self) -> bool: ...
    @property
    def recompute_modes(self) -> tuple[Recompute, ...] | None: ...
    @property
    def stage_split(self) -> Callable[[int, int, int], tuple[int, ...] | None] | None: ...
    @property
    def partial_recompute(self) -> bool: ...


def narrowed(options: Options, limits: StageLimits) -> Options:
    """``options`` with its per-stage fields narrowed to ``limits`` (and no layout_limits)."""
    modes = limits.recompute_modes
    if modes is not None and options.recompute_modes is not None:
        modes = tuple(r for r in modes if r in options.recompute_modes)
    return replace(
        options,
        uniform_recompute=options.uniform_recompute or limits.uniform_recompute,
        allow_uneven_stages=options.allow_uneven_stages and not limits.even_stages,
        recompute_modes=modes if modes is not None else options.recompute_modes,
        stage_split=limits.stage_split,
        partial_recompute=options.partial_recompute and limits.partial_recompute,
        layout_limits=None,
        order_limits=None,
    )


def _holds(wide: Options, narrow: Options) -> bool:
    """Every per-stage choice ``narrow`` allows, ``wide`` allows too (for any layout)."""
    free_split = wide.stage_split is None and wide.allow_uneven_stages
    same_split = (wide.stage_split, wide.allow_uneven_stages) == (
        narrow.stage_split,
        narrow.allow_uneven_stages,
    )
    wide_modes, narrow_modes = wide.recompute_modes, narrow.recompute_modes
    return (
        (free_split or same_split)
        and (narrow.uniform_recompute or not wide.uniform_recompute)
        and (wide_modes is None or (narrow_modes is not None and set(narrow_modes) <= set(wide_modes)))
        and (wide.partial_recompute or not narrow.partial_recompute)
    )


def spans_search(options: Options, limits: tuple[StageLimits, ...]) -> bool:
    """Some of ``limits`` allows every per-stage choice ``options`` itself allows (its variant
    holds any layout's: placement.py drops what such a layout dominates)."""
    whole = replace(options, layout_limits=None)
    return any(_holds(narrowed(options, lim), whole) for lim in limits)


def layout_variants(
    layout: Layout, options: Options, memo: dict[tuple[StageLimits, ...], list[Options]] | None = None
) -> list[Options]:
    """The options ``layout`` is searched under: ``options`` itself without ``layout_limits``;
    else ``options`` narrowed to each of the layout's limits, less those another one holds
    (the union of their spaces is the same). ``memo``: one search's variants by limits."""
    if options.layout_limits is None:
        return [options]
    limits = options.layout_limits(layout)
    found = memo.get(limits) if memo is not None else None
    if found is None:
        variants = list(dict.fromkeys(narrowed(options, lim) for lim in limits))
        found = [
            v
            for i, v in enumerate(variants)
            if not any(_holds(w, v) and (not _holds(v, w) or j < i) for j, w in enumerate(variants) if j != i)
        ]
        if memo is not None:
            memo[limits] = found
    return found


def twins(layout: Layout, fixed: PartialPlan) -> list[Layout]:
    """``layout``'s ZeRO-1 twin when it runs ZeRO-0, its SP-on twin when it runs SP off with
    tp > 1, each only where the space holds it (the scenario fixes neither)."""
    out = []
    if layout.zero == 0 and fixed.zero is None and layout.dp * layout.cp > 1:
        out.append(derive(layout, zero=1))
    if layout.tp > 1 and not layout.sequence_parallel and fixed.sequence_parallel is None:
        out.append(derive(layout, sequence_parallel=True))
    return out


def dominated_by_twin(
    layout: Layout, fixed: PartialPlan, options: Options, memo: dict[tuple[StageLimits, ...], list[Options]]
) -> bool:
    """Under ``layout_limits``: ``layout`` runs ZeRO-0 (or SP off with tp > 1) and its ZeRO-1 (SP
    on) twin, in the space too, passes the filter under limits that hold each of ``layout``'s.
    The twin is never slower and never larger (module docstring: why the unfiltered search drops
    ZeRO-0 and SP off), so ``layout`` adds no plan the twin does not beat or tie."""
    if options.layout_limits is None or options.layout_filter is None:
        return False
    found = twins(layout, fixed)
    if not found:
        return False
    own = layout_variants(layout, options, memo)
    for twin in found:
        if options.layout_filter(twin):
            theirs = layout_variants(twin, options, memo)
            if all(any(_holds(w, v) for w in theirs) for v in own):
                return True
    return False
