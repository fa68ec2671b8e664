"""Serving scenarios (issue 23): ``workload:`` in place of ``job:``. The schema
(paraplan/serving/schema.py), the instance (instance.py), the result (result.py), the
explanation (explain.py), the text report (report.py) and the front door (api.py); the cost model
is ``paraplan.cost.serving`` and the search ``paraplan.solver.serving``.

The schema loads eagerly (paraplan/api.py asks it whether a scenario is a serving one); the rest
on first use, so a training run never imports the serving cost model."""

from __future__ import annotations

from importlib import import_module
from typing import Any

from paraplan.serving.schema import ServingScenario, is_serving_document

__all__ = [
    "ServingInstance",
    "ServingResult",
    "ServingScenario",
    "build_serving_instance",
    "evaluate_serving_scenario",
    "is_serving_document",
    "load_serving_scenario",
    "solve_serving_scenario",
]

_LAZY = {
    "evaluate_serving_scenario": "paraplan.serving.api",
    "solve_serving_scenario": "paraplan.serving.api",
    "ServingInstance": "paraplan.serving.instance",
    "build_serving_instance": "paraplan.serving.instance",
    "load_serving_scenario": "paraplan.serving.instance",
    "ServingResult": "paraplan.serving.result",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'paraplan.serving' has no attribute {name!r}")
