"""What a serving plan is worth to the search (issue 23): the SLO and rate tests, each objective's
value in its unit and its integer key, and the scoring of one candidate plan by the one cost model
(``cost.serving.evaluate_serving``). The aggregated table and the search (solver/serving.py), the
disaggregated branch and bound (solver/serving_disagg.py) and the enumeration
(solver/serving_enumerate.py) all keep a candidate through ``qualify``."""

from __future__ import annotations

from dataclasses import replace

from paraplan.cost.serving import Engine, ServingPlan, ServingPrediction, Workload, evaluate_serving
from paraplan.graph import ModelSpec
from paraplan.hardware import Cluster
from paraplan.solver.scale import serving_units
from paraplan.solver.serving_space import ServingObjective

__all__ = [
    "Candidate",
    "meets_slo",
    "serves_rate",
    "objective_value",
    "objective_units",
    "score",
    "qualify",
]

Candidate = tuple[ServingPlan, ServingPrediction, float]
"""A plan that qualifies for the objective: the plan, its prediction and its objective value."""


def _at(pred: ServingPrediction, percentile: int, name: str) -> float:
    return float(getattr(pred, f"{name}_p90" if percentile >= 90 else f"{name}_p50"))


def meets_slo(pred: ServingPrediction, workload: Workload) -> bool:
    """TTFT and TPOT at the SLO percentile within ``workload``'s SLO (a missing limit holds)."""
    pct = workload.percentile
    ttft_ok = workload.ttft_ms is None or _at(pred, pct, "ttft_ms") <= workload.ttft_ms
    tpot_ok = workload.tpot_ms is None or _at(pred, pct, "tpot_ms") <= workload.tpot_ms
    return ttft_ok and tpot_ok


def serves_rate(pred: ServingPrediction, workload: Workload) -> bool:
    """Open loop: the plan's output tokens/s carry the offered rate (rate x osl); closed loop:
    always (the load is what the plan completes)."""
    if workload.request_rate is None:
        return True
    return pred.output_tokens_per_s >= workload.request_rate * workload.osl * (1 - 1e-9)


def objective_value(pred: ServingPrediction, workload: Workload, objective: ServingObjective) -> float | None:
    """The objective of a prediction in its unit, or None when the plan does not qualify (does
    not fit; goodput_per_gpu: no request meets the SLO; min_gpus: misses the SLO or the rate;
    min_ttft: misses the TPOT SLO or the rate, its TTFT not capped by its own SLO)."""
    if not pred.fits or pred.gpus <= 0:
        return None
    if objective == "goodput_per_gpu":  # a plan with no request within the SLO does not qualify
        return pred.goodput_requests_per_s / pred.gpus if pred.goodput_requests_per_s > 0 else None
    if objective == "min_gpus":
        return float(pred.gpus) if meets_slo(pred, workload) and serves_rate(pred, workload) else None
    tpot_only = replace(workload, ttft_ms=None)
    if not (meets_slo(pred, tpot_only) and serves_rate(pred, workload)):
        return None
    return _at(pred, workload.percentile, "ttft_ms")


def objective_units(value: float, pred: ServingPrediction, objective: ServingObjective) -> tuple[int, ...]:
    """The integer key minimised (solver/scale.py ``serving_units``): the primary objective,
    then the secondary (for min_gpus and min_ttft: the higher goodput per GPU; for goodput per
    GPU: fewer GPUs)."""
    per_gpu = pred.goodput_requests_per_s / pred.gpus
    if objective == "goodput_per_gpu":
        return (-serving_units(value, "req_s"), pred.gpus)
    if objective == "min_gpus":
        return (int(value), -serving_units(per_gpu, "req_s"))
    return (serving_units(value, "ms"), -serving_units(per_gpu, "req_s"))


def score(
    spec: ModelSpec, cluster: Cluster, workload: Workload, engine: Engine, plan: ServingPlan
) -> ServingPrediction | None:
    """evaluate_serving, None where the cost model refuses the plan (ValueError: a rule)."""
    try:
        return evaluate_serving(spec, cluster, plan, workload, engine)
    except ValueError:
        return None


def qualify(
    spec: ModelSpec,
    cluster: Cluster,
    workload: Workload,
    engine: Engine,
    plan: ServingPlan,
    objective: ServingObjective,
) -> Candidate | None:
    """``plan`` scored (``score``) with its objective value (``objective_value``); None where the
    cost model refuses the plan or it does not qualify for ``objective``. What every candidate
    loop (the aggregated table, the disaggregated branch and bound, the enumeration) keeps."""
    pred = score(spec, cluster, workload, engine, plan)
    if pred is None:
        return None
    value = objective_value(pred, workload, objective)
    return None if value is None else (plan, pred, value)
