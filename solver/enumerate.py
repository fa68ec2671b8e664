"""Exhaustive enumeration of the same space: the baseline the oracle tests and benchmarks use.

Every layout (dominated ones included; on a pooled cluster every selection and order of pools),
every layer split in units of vp (less the embedding / loss slots where vp does not divide the
layers, cost.split.pipeline_slots), every recompute mode per stage (one for all stages under
``uniform_recompute``; only ``recompute_modes``; only layouts passing ``layout_filter``), with
``partial_recompute`` every number of layers per chunk each FULL stage recomputes (one for
every rank under ``uniform_recompute``), each scored by cost/ (the terms of a layout are
built once, then each plan is scored by the same step-time and memory functions
``cost.evaluate`` uses; the winner is re-checked by ``cost.evaluate`` itself). Exponential: for
small instances only.

Shared per-layout work is scored once: a stage's lines (``StageTerms.stage_time_s`` and the
other per-stage ``*_s`` methods) read the layout and the stage's own blocks and recompute mode,
never the rest of the plan, so ``_LayoutTerms`` keeps each (stage, blocks, mode) value for every
plan of the layout, and a stage's memory check is kept per (stage, blocks, mode, recomputed
blocks, partial or not), the arguments ``partial_stage_memory`` reads. The 3^pp recompute
combinations of one split then cost pp stage evaluations, not pp 3^pp; tests/solver/
test_enumerate_memo.py checks the result against scoring every plan from scratch.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, fields, replace
from typing import Any

from paraplan.cost import Job, Layout, Plan, Recompute, evaluate, stage_terms
from paraplan.cost.evaluate import step_time_s
from paraplan.cost.plan import PartialPlan
from paraplan.cost.recompute_layers import partial_stage_memory, recomputed_counts
from paraplan.cost.split import chunk_layers, pipeline_slots
from paraplan.cost.stage import Counts, StageTerms
from paraplan.graph import LayerGraph
from paraplan.hardware import Cluster
from paraplan.solver.constraints.recompute_layers import searches_partial
from paraplan.solver.limits import layout_variants
from paraplan.solver.space import Options, exact_split, layouts

__all__ = ["Enumeration", "enumerate_plans", "EnumerationBudgetExceeded"]


class EnumerationBudgetExceeded(RuntimeError):
    """The enumeration ran past its time budget."""


@dataclass(frozen=True, slots=True)
class Enumeration:
    best: Plan | None
    best_s: float
    num_plans: int
    wall_s: float


@dataclass(frozen=True)
class _LayoutTerms(StageTerms):
    """A layout's StageTerms whose per-stage lines are computed once per (stage, blocks, mode)
    and kept in ``memo`` for every plan of the layout (``replace(terms, plan=...)`` passes the
    same dict on). Exact: the lines read the layout (degrees, ZeRO, micro-batches, pools) and
    their arguments only (cost/stage.py), which are the key."""

    memo: dict[tuple[Any, ...], float] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, terms: StageTerms) -> _LayoutTerms:
        return cls(**{f.name: getattr(terms, f.name) for f in fields(terms) if f.init})

    def _line(self, key: tuple[Any, ...], value: Any) -> float:
        """``memo[key]``, from ``value()`` the first time."""
        out = self.memo.get(key)
        if out is None:
            out = self.memo[key] = value()
        return out

    def stage_time_s(self, stage: int, layers: int | Counts, recompute: Recompute) -> float:
        key = ("time", stage, layers, recompute)
        return self._line(key, lambda: super(_LayoutTerms, self).stage_time_s(stage, layers, recompute))

    def stage_compute_s(self, stage: int, layers: int | Counts, recompute: Recompute) -> float:
        key = ("compute", stage, layers, recompute)
        return self._line(key, lambda: super(_LayoutTerms, self).stage_compute_s(stage, layers, recompute))

    def stage_backward_s(self, stage: int, layers: int | Counts, recompute: Recompute) -> float:
        key = ("backward", stage, layers, recompute)
        return self._line(key, lambda: super(_LayoutTerms, self).stage_backward_s(stage, layers, recompute))

    def dp_sync_s(self, stage: int, layers: int | Counts) -> float:
        return self._line(("sync", stage, layers), lambda: super(_LayoutTerms, self).dp_sync_s(stage, layers))

    def dp_exposed_s(self, stage: int, layers: int | Counts, recompute: Recompute) -> float:
        key = ("exposed", stage, layers, recompute)
        return self._line(key, lambda: super(_LayoutTerms, self).dp_exposed_s(stage, layers, recompute))

    def optimizer_s(self, stage: int, layers: int | Counts) -> float:
        key = ("optimizer", stage, layers)
        return self._line(key, lambda: super(_LayoutTerms, self).optimizer_s(stage, layers))


def _fits(
    t: StageTerms, counts: tuple[Counts, ...], rec: tuple[Counts, ...], memo: dict[Any, bool] | None
) -> bool:
    """Whether every stage of ``t.full_plan`` fits its devices (partial_stage_memory), each
    stage's answer kept in ``memo`` (if given) under the arguments that function reads."""
    plan = t.full_plan
    partial = bool(plan.recompute_layers)
    for s in range(plan.pp):
        key = (s, counts[s], plan.recompute[s], rec[s], partial)
        fits = None if memo is None else memo.get(key)
        if fits is None:
            fits = partial_stage_memory(t, s, counts[s], rec[s]).total_bytes <= t.stage_capacity_bytes(s)
            if memo is not None:
                memo[key] = fits
        if not fits:
            return False
    return True


def _splits(
    layout: Layout, num_layers: int, fixed: PartialPlan, options: Options
) -> Iterator[tuple[int, ...]]:
    pp, vp = layout.pp, layout.vp
    split = exact_split(layout, num_layers, fixed, options)
    if split is not None:
        if split:
            yield split
        return
    slots = pipeline_slots(num_layers, pp, vp)
    if slots is None:
        return
    k_total = (num_layers + sum(slots)) // vp
    if not options.allow_uneven_stages:  # equal stages and chunks (no slots: vp | layers)
        if num_layers % (pp * vp) == 0:
            yield (num_layers // pp,) * pp
        return
    for cuts in itertools.combinations(range(1, k_total), pp - 1):
        bounds = (0, *cuts, k_total)
        ks = [b - a for a, b in itertools.pairwise(bounds)]
        if all(k >= 1 + sl for k, sl in zip(ks, slots, strict=True)):
            yield tuple(vp * k - sl for k, sl in zip(ks, slots, strict=True))


def _modes(pp: int, fixed: PartialPlan, options: Options) -> Iterator[tuple[Recompute, ...]]:
    allowed = [r for r in Recompute if options.recompute_modes is None or r in options.recompute_modes]
    if fixed.recompute is not None:
        if len(fixed.recompute) == pp:
            modes = fixed.recompute
        elif len(set(fixed.recompute)) == 1:
            modes = (fixed.recompute[0],) * pp
        else:
            return
        candidates: Iterator[tuple[Recompute, ...]] = iter([modes])
    elif options.uniform_recompute:
        candidates = ((r,) * pp for r in Recompute)
    else:
        candidates = itertools.product(list(Recompute), repeat=pp)
    for modes in candidates:
        if all(r in allowed for r in modes) and not (options.uniform_recompute and len(set(modes)) > 1):
            yield modes


def _recompute_layers(
    plan: Plan, fixed: PartialPlan, options: Options, partial: bool
) -> Iterator[tuple[int, ...]]:
    """Plan.recompute_layers choices of ``plan`` (its split and modes set): () alone without
    partial recompute; the scenario's when fixed (one N: on every FULL stage); under uniform
    recompute one N for every rank, 1 .. the longest chunk - 1 (all FULL stages); else per
    FULL stage N_s from 1 to its longest chunk (= all), () when every FULL stage is all."""
    full = [r is Recompute.FULL for r in plan.recompute]
    if fixed.recompute_layers is not None:
        given = fixed.recompute_layers
        counts = tuple(given) if len(given) == plan.pp else tuple(given[0] if f else 0 for f in full)
        if all((n >= 1) == f for n, f in zip(counts, full, strict=True)):
            yield counts
        return
    yield ()
    if not partial or not any(full):
        return
    longest = [max(row) for row in chunk_layers(plan)]
    if options.uniform_recompute:
        if all(full):
            yield from ((n,) * plan.pp for n in range(1, max(longest)))
        return
    choices = [range(1, k + 1) if f else (0,) for f, k in zip(full, longest, strict=True)]
    for counts in itertools.product(*choices):
        if any(f and n < k for f, n, k in zip(full, counts, longest, strict=True)):
            yield counts


def _recomputes(fixed: PartialPlan, options: Options) -> list[Recompute]:
    """The recompute modes searched: the one the scenario fixes for every stage, else all; those
    of them ``options`` allows."""
    one = fixed.recompute[0] if fixed.recompute is not None and len(set(fixed.recompute)) == 1 else None
    return [
        r
        for r in ([one] if one is not None else list(Recompute))
        if options.recompute_modes is None or r in options.recompute_modes
    ]


def _plans(
    layout: Layout,
    graph: LayerGraph,
    fixed: PartialPlan,
    options: Options,
    recomputes: list[Recompute],
    partial: bool,
    memo: dict[Any, list[Options]],
) -> Iterator[Plan]:
    """Every plan of ``layout``: each split, recompute modes and stored-layer counts, under each
    of its per-stage variants (space.py ``layout_variants``), a plan two variants share once."""
    variants = layout_variants(layout, options, memo)
    seen: set[Plan] = set()
    for variant in variants:
        if variant is not options:
            recomputes = _recomputes(fixed, variant)
            try:
                partial = searches_partial(graph, fixed, variant, recomputes)
            except ValueError:  # a fixed recompute_layers this variant cannot run
                continue
        for split in _splits(layout, graph.spec.num_layers, fixed, variant):
            for modes in _modes(layout.pp, fixed, variant):
                base = layout.plan(split, modes)
                for stored in _recompute_layers(base, fixed, variant, partial):
                    plan = replace(base, recompute_layers=stored) if stored else base
                    if len(variants) > 1:
                        if plan in seen:
                            continue
                        seen.add(plan)
                    yield plan


def enumerate_plans(
    graph: LayerGraph,
    cluster: Cluster,
    job: Job,
    fixed: PartialPlan,
    options: Options,
    budget_s: float = float("inf"),
    *,
    share_layout_work: bool = True,
) -> Enumeration:
    """Minimum step time over every plan that fits (ties: first in enumeration order).
    ``share_layout_work=False`` scores every plan from scratch (module docstring): the same
    result, slower; tests/solver/test_enumerate_memo.py compares the two."""
    start = time.perf_counter()
    best, best_s, count = None, float("inf"), 0
    spec = graph.spec
    recomputes = _recomputes(fixed, options)
    partial = searches_partial(graph, fixed, options, recomputes)
    memo: dict[Any, list[Options]] = {}  # space.layout_variants
    for layout in layouts(
        spec, cluster, job.seq_len, job.global_batch, fixed, options, prune_dominated=False
    ):
        terms = stage_terms(graph, layout, job, cluster)
        if share_layout_work:
            terms = _LayoutTerms.of(terms)
        fitting: dict[Any, bool] | None = {} if share_layout_work else None
        for plan in _plans(layout, graph, fixed, options, recomputes, partial, memo):
            count += 1
            t = replace(terms, plan=plan)
            if _fits(t, t.stage_counts(), recomputed_counts(t), fitting):
                step = step_time_s(t).step_s
                if step < best_s:
                    best, best_s = plan, step
            if time.perf_counter() - start > budget_s:
                raise EnumerationBudgetExceeded(f"over {budget_s} s after {count} plans")
    if best is not None:  # the public evaluator agrees with the shortcut above
        b = evaluate(graph, cluster, job, best)
        if not b.fits or abs(b.step_time_s - best_s) > 1e-9 * best_s:
            raise AssertionError(f"enumeration shortcut disagrees with evaluate for {best}")
    return Enumeration(best, best_s, count, time.perf_counter() - start)
