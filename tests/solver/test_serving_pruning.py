"""The serving search's pruning is exact (issue 23, speed): a disaggregated pool layout left out
of the tables before its rows are built (``_tables`` with the aggregated incumbent) is one whose
rows ``_can_win`` would all drop, so CP-SAT sees the same rows; the aggregated best-first order
scores the plan enumeration finds best."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
from paraplan.solver.serving import _aggregated_rows, layout_of
from paraplan.solver.serving_disagg import _can_win, _tables
from paraplan.solver.serving_objective import qualify
from paraplan.solver.serving_space import aggregated_plans

from tests.solver.test_oracle_serving import random_instance


def _rows(prefills, decodes):
    return [(p.worker, p.rate_rps, p.min_workers, p.max_workers) for p in prefills], [
        (d.worker, d.max_batch, d.rate_rps, d.workers) for d in decodes
    ]


@pytest.mark.parametrize("seed", range(24))
def test_layouts_skipped_early_are_those_the_incumbent_drops(seed: int) -> None:
    rng = random.Random(seed)
    spec, cluster, workload, engine, fixed, options = random_instance(rng)
    prefills, decodes, _ = _tables(spec, cluster, workload, engine, fixed, options)
    if not prefills or not decodes:
        return
    rates = sorted({p.rate_rps / p.gpus for p in prefills} | {d.rate_rps / d.gpus for d in decodes})
    for incumbent in (rates[0] * 0.5, rates[len(rates) // 2], rates[-1] * 0.999):
        kept = _can_win(prefills, decodes, incumbent)
        early = _tables(spec, cluster, workload, engine, fixed, options, incumbent=incumbent)
        assert _rows(*_can_win(early[0], early[1], incumbent)) == _rows(*kept), (seed, incumbent)


def _top_layouts(rows, k: int) -> list[float]:
    best: dict[tuple[object, ...], float] = {}
    for plan, _, value in rows:
        best[layout_of(plan)] = max(best.get(layout_of(plan), -1.0), value)
    return sorted(best.values(), reverse=True)[:k]


@pytest.mark.parametrize("seed", range(32))
def test_best_first_scores_the_best_two_layouts_every_plan_gives(seed: int) -> None:
    """Goodput per GPU: the aggregated rows scored best-first hold the optimum and the runner-up
    of another layout that scoring every aggregated plan finds (values compared: plans tie)."""
    rng = random.Random(seed)
    spec, cluster, workload, engine, fixed, options = random_instance(rng)
    options = replace(options, objective="goodput_per_gpu")
    fixed = replace(fixed, mode="aggregated")
    every = [
        qualify(spec, cluster, workload, engine, p, options.objective)
        for p, _ in aggregated_plans(spec, cluster, fixed, options)
    ]
    rows, count = _aggregated_rows(spec, cluster, workload, engine, fixed, options, math.inf, top=2)
    want = _top_layouts([r for r in every if r is not None], 2)
    assert _top_layouts(rows, 2) == pytest.approx(want, rel=1e-12), seed
    assert count <= len(every)
