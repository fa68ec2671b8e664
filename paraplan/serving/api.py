"""The serving front door: ``paraplan.solve`` / ``paraplan.evaluate`` (and ``paraplan plan`` /
``paraplan evaluate``) on a serving scenario land here (paraplan/api.py dispatches on
``workload:``). Every number comes from ``paraplan.cost.serving`` (evaluate_serving); the search
is solver/serving.py."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from os import PathLike
from typing import Any

from paraplan.cost.serving import ServingPlan, ServingPrediction, check_serving_plan, evaluate_serving
from paraplan.errors import ConfigError, InfeasibleError, SolveTimeout
from paraplan.hardware import Cluster
from paraplan.result import paraplan_version
from paraplan.serving.explain import explain_serving, serving_summary
from paraplan.serving.instance import (
    ServingInstance,
    build_serving_instance,
    fixed_serving_plan,
    load_serving_scenario,
    serving_fixed,
)
from paraplan.serving.result import ServingResult, ServingSolverOut, serving_plan_doc, serving_predicted_out
from paraplan.serving.schema import ServingScenario
from paraplan.solver.serving import ServingNoPlan, ServingOutcome, meets_slo, solve_serving
from paraplan.solver.serving_space import ServingOptions, plan_gpus

__all__ = ["evaluate_serving_scenario", "solve_serving_scenario", "serving_result"]

Source = str | PathLike[str] | dict[str, Any] | ServingScenario


def _instance(scenario: Source | ServingResult) -> ServingInstance:
    if isinstance(scenario, ServingResult):
        scenario = scenario.model_dump(mode="json")
    return build_serving_instance(load_serving_scenario(scenario))


def _check_num_devices(inst: ServingInstance, plan: ServingPlan) -> None:
    given, gpus, n = inst.scenario.plan.num_devices, plan_gpus(plan), inst.cluster.num_devices
    if given is not None and given != gpus:
        raise ConfigError(
            f"plan.num_devices={given} but the plan's layout uses {gpus} GPUs; "
            "fix it or drop plan.num_devices"
        )
    if gpus > n:
        where = (
            "plan.replicas x plan.tp x plan.pp"
            if plan.mode == "aggregated"
            else "the pools' workers x tp x pp"
        )
        raise ConfigError(f"the plan uses {gpus} GPUs ({where}) but the cluster has {n}")


def _unbounded(cluster: Cluster) -> Cluster:
    """The cluster with room for any plan: check_serving_plan's degree rules without its GPU
    count (which _check_num_devices words with the knobs that set it)."""
    return replace(cluster, num_nodes=max(cluster.num_nodes, 1 << 20))


def serving_result(
    inst: ServingInstance,
    plan: ServingPlan,
    pred: ServingPrediction,
    solver: ServingSolverOut | None = None,
    **extra: Any,
) -> ServingResult:
    return ServingResult(
        plan=serving_plan_doc(plan, pred.gpus),
        predicted=serving_predicted_out(pred, inst.cluster, meets_slo(pred, inst.workload), inst.spec.is_moe),
        solver=solver,
        scenario=inst.scenario.model_dump(mode="json", exclude_none=True),
        version=paraplan_version(),
        **extra,
    )


def _no_calibration(calibration: object) -> None:
    if calibration is not None:
        raise ConfigError("calibration: serving scenarios take no calibration profile yet")


def evaluate_serving_scenario(scenario: Source | ServingResult, calibration: object = None) -> ServingResult:
    """TTFT, TPOT, throughput, goodput and memory of the scenario's fixed serving plan."""
    _no_calibration(calibration)
    inst = _instance(scenario)
    plan = fixed_serving_plan(inst)
    try:
        check_serving_plan(inst.spec, _unbounded(inst.cluster), plan)  # the rules, then the size
    except ValueError as e:
        raise ConfigError(str(e)) from None
    _check_num_devices(inst, plan)
    try:
        pred = evaluate_serving(inst.spec, inst.cluster, plan, inst.workload, inst.engine)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return serving_result(inst, plan, pred, explanation=explain_serving(inst, plan, pred, None))


def solve_serving_scenario(
    scenario: Source | ServingResult,
    *,
    time_limit_s: float = 30.0,
    workers: int = 2,
    top: int = 1,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    calibration: object = None,
) -> ServingResult:
    """The best serving plan for the scenario's objective, proven optimal when
    ``result.solver.status`` is OPTIMAL; knobs fixed in ``plan:`` are kept. InfeasibleError when no
    plan fits memory (or meets the SLO / serves the request rate, as the objective needs)."""
    started = time.perf_counter()
    _no_calibration(calibration)
    inst = _instance(scenario)
    options = ServingOptions(objective=inst.scenario.objective)
    try:
        out: ServingOutcome = solve_serving(
            inst.spec,
            inst.cluster,
            inst.workload,
            inst.engine,
            serving_fixed(inst),
            options,
            time_limit_s=max(1e-3, time_limit_s - (time.perf_counter() - started)),
            workers=workers,
            seed=seed,
            top=max(top, 2),
        )
    except ServingNoPlan as e:
        raise InfeasibleError(str(e), e.families) from None
    except TimeoutError as e:
        raise SolveTimeout(str(e)) from None
    best = out.solutions[0]
    solver_out = ServingSolverOut(
        status=out.status,
        wall_s=out.wall_s,
        objective=options.objective,
        objective_value=best.value,
        bound=out.bound,
        num_candidates=out.num_candidates,
        time_limit_s=time_limit_s,
        workers=workers,
        seed=seed,
    )
    runner = out.solutions[1] if len(out.solutions) > 1 else None
    alternatives = [
        {
            "summary": serving_summary(s.plan),
            "objective_value": s.value,
            "plan": serving_plan_doc(s.plan, s.prediction.gpus).model_dump(),
        }
        for s in out.solutions[1:top]
    ]
    explanation = explain_serving(inst, best.plan, best.prediction, runner, options.objective)
    return serving_result(
        inst, best.plan, best.prediction, solver_out, alternatives=alternatives, explanation=explanation
    )
