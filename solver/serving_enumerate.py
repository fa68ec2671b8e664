"""Exhaustive enumeration of the serving space: the oracle the solver is checked against
(tests/solver/test_oracle_serving.py). Every plan of solver/serving_space.py (aggregated: each
layout, max_batch and replica count; disaggregated: each prefill layout and worker count with
each decode layout, max_batch and worker count within the cluster) is scored by
``cost.serving.evaluate_serving`` on the whole plan (not the solver's per-pool tables) and the
best by the objective kept. Exponential in the pools' sizes: for small instances only."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from paraplan.cost.serving import Engine, ServingPlan, ServingPrediction, Workload
from paraplan.graph import ModelSpec
from paraplan.hardware import Cluster
from paraplan.solver.serving_objective import objective_units, qualify
from paraplan.solver.serving_space import (
    ServingFixed,
    ServingOptions,
    aggregated_plans,
    disaggregated_plans,
    searched_modes,
)

__all__ = ["ServingEnumeration", "enumerate_serving", "serving_plans"]


@dataclass(frozen=True, slots=True)
class ServingEnumeration:
    best: ServingPlan | None
    prediction: ServingPrediction | None
    value: float | None  # the objective in its unit
    num_plans: int
    wall_s: float


def serving_plans(
    spec: ModelSpec, cluster: Cluster, fixed: ServingFixed, options: ServingOptions
) -> Iterator[ServingPlan]:
    modes = searched_modes(fixed, options)
    if "aggregated" in modes:
        yield from (p for p, _ in aggregated_plans(spec, cluster, fixed, options))
    if "disaggregated" in modes:
        yield from disaggregated_plans(spec, cluster, fixed, options)


def enumerate_serving(
    spec: ModelSpec,
    cluster: Cluster,
    workload: Workload,
    engine: Engine,
    fixed: ServingFixed,
    options: ServingOptions,
) -> ServingEnumeration:
    """The best plan of the whole space by ``options.objective`` (ties: the first met)."""
    start = time.perf_counter()
    best: tuple[tuple[int, ...], ServingPlan, ServingPrediction, float] | None = None
    count = 0
    for plan in serving_plans(spec, cluster, fixed, options):
        count += 1
        row = qualify(spec, cluster, workload, engine, plan, options.objective)
        if row is None:
            continue
        _, pred, value = row
        key = objective_units(value, pred, options.objective)[:1]
        if best is None or key < best[0]:
            best = (key, plan, pred, value)
    wall = time.perf_counter() - start
    if best is None:
        return ServingEnumeration(None, None, None, count, wall)
    return ServingEnumeration(best[1], best[2], best[3], count, wall)
