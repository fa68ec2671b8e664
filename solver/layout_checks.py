"""A layout's tables and memory checks for the branch and bound of solver/candidates.py: the
recompute modes a search allows (``allowed_recomputes``) and the scenario's per-stage ones
(``stage_modes``), a layout's tables under each per-stage variant it is searched under
(``variant_tables``), whether some split of a family fits memory (``fits``) and, when none
fits, the least memory any plan needs (``least_memory``, for candidates.py's ``NoFitError``)."""

from __future__ import annotations

from typing import Any

from paraplan.cost import Job, Layout, Recompute, StageTerms, stage_memory
from paraplan.cost.plan import PartialPlan
from paraplan.cost.split import even_split, pipeline_slots
from paraplan.graph import LayerGraph
from paraplan.hardware import Cluster
from paraplan.solver.caps import CapsMemo, some_split_fits
from paraplan.solver.constraints.recompute_layers import searches_partial
from paraplan.solver.limits import layout_variants
from paraplan.solver.space import Options, exact_split
from paraplan.solver.space_size import k_choices
from paraplan.solver.tables import LayoutTables, build_tables, even_layers

__all__ = ["allowed_recomputes", "fits", "least_memory", "stage_modes", "variant_tables"]


def allowed_recomputes(fixed: PartialPlan, options: Options) -> list[Recompute]:
    if fixed.recompute is not None and len(set(fixed.recompute)) == 1:
        modes = [fixed.recompute[0]]
    else:
        modes = list(Recompute)
    allowed = options.recompute_modes
    return [r for r in modes if allowed is None or r in allowed]


def stage_modes(fixed: PartialPlan, pp: int) -> tuple[Recompute, ...] | None:
    """The scenario's recompute mode of each stage when it fixes one per stage, else None."""
    if fixed.recompute is not None and len(fixed.recompute) == pp and len(set(fixed.recompute)) > 1:
        return tuple(fixed.recompute)
    return None


def variant_tables(
    graph: LayerGraph,
    cluster: Cluster,
    job: Job,
    fixed: PartialPlan,
    options: Options,
    layout: Layout,
    terms: StageTerms,
    ks: list[int] | None,
    recomputes: list[Recompute],
    memos: tuple[dict[Any, list[Options]], CapsMemo],
    cutoff_s: float = float("inf"),
) -> list[LayoutTables]:
    """The layout's tables, one per per-stage variant it is searched under (space.py
    ``layout_variants``; one without ``options.layout_limits``, built with the search's own
    ``ks`` and ``recomputes``); ``cutoff_s``: the search's cutoff when the layout was popped
    (a table whose lower bound is above it scores no upper bound: tables.build_tables); ``memos``:
    the search's (space.layout_variants memo, caps.CapsMemo)."""
    memo, caps_memo = memos
    spec = graph.spec
    out: list[LayoutTables] = []
    for variant in layout_variants(layout, options, memo):
        if variant is not options:
            recomputes = allowed_recomputes(fixed, variant)
            ks = k_choices(layout, spec.num_layers, fixed, variant)
            if not recomputes or ks == []:
                continue
            try:
                partial = searches_partial(graph, fixed, variant, recomputes)
            except ValueError:  # a fixed recompute_layers this variant cannot run
                continue
        else:
            partial = searches_partial(graph, fixed, options, recomputes)
        out.append(
            build_tables(
                graph,
                cluster,
                job,
                layout,
                recomputes,
                ks,
                terms,
                variant.uniform_recompute,
                exact_split(layout, spec.num_layers, fixed, variant),
                stage_modes(fixed, layout.pp),
                partial=partial,
                partial_fixed=fixed.recompute_layers is not None,
                cutoff_s=cutoff_s,
                caps_memo=caps_memo,
            )
        )
    return out


def fits(
    terms: StageTerms,
    recomputes: list[Recompute],
    num_layers: int,
    ks: list[int] | None,
    uniform: bool = False,
    stage_modes: tuple[Recompute, ...] | None = None,
    caps_memo: CapsMemo | None = None,
) -> bool:
    """Some split of the layout's layers fits memory (the rank order does not change memory);
    with several block kinds, of the runs of blocks each rank can hold at their least memory
    (caps.layer_caps: a relaxation). caps.some_split_fits: the modes asked until one fits."""
    pp, vp = terms.plan.pp, terms.plan.vp
    slots = pipeline_slots(num_layers, pp, vp) or (0,) * pp
    k_total = (num_layers + sum(slots)) // vp
    k_hi = max(ks) if ks else k_total - (pp - 1)
    return some_split_fits(terms, recomputes, k_hi, stage_modes, num_layers, uniform, caps_memo)


def least_memory(num_layers: int, recomputes: list[Recompute], unfit: list[StageTerms]) -> float:
    """Least peak memory per device any layout needs, over its even split and modes."""
    best = float("inf")
    for terms in unfit:
        pp, vp = terms.plan.pp, terms.plan.vp
        split = even_layers(num_layers, pp, vp) or even_split(num_layers, pp)
        counts = terms.stage_counts(terms.plan.plan(split, (Recompute.NONE,) * pp))
        peak = max(
            min(stage_memory(terms, s, counts[s], r).total_bytes for r in recomputes) for s in range(pp)
        )
        best = min(best, peak)
    return best
