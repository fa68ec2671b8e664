"""The public API: load a scenario, evaluate a fixed plan, solve for the best one, export it."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from paraplan.cost import Plan, evaluate as cost_evaluate
from paraplan.errors import ConfigError
from paraplan.instance import Instance, build_instance, fixed_plan
from paraplan.result import Result, SolverOut, plan_out, predicted_out
from paraplan.schema import Scenario, load_scenario

__all__ = ["load_scenario", "evaluate", "evaluate_plan", "paraplan_version"]


def paraplan_version() -> str:
    try:
        return version("paraplan")
    except PackageNotFoundError:
        return "0+unknown"


def evaluate_plan(inst: Instance, plan: Plan, solver: SolverOut | None = None,
                  **extra: Any) -> Result:
    """Result of ``plan`` on the instance; ConfigError when the plan breaks a rule."""
    try:
        breakdown = cost_evaluate(inst.graph, inst.cluster, inst.job, plan)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return Result(
        plan=plan_out(plan, inst.job),
        predicted=predicted_out(breakdown, plan),
        solver=solver,
        scenario=inst.scenario.model_dump(mode="json", exclude_none=True),
        version=paraplan_version(),
        **extra,
    )


def evaluate(scenario: str | Path | dict[str, Any] | Scenario) -> Result:
    """Step time and memory of the scenario's fully fixed plan."""
    inst = build_instance(load_scenario(scenario))
    return evaluate_plan(inst, fixed_plan(inst))
