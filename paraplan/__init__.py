"""paraplan: provably optimal parallel plans for transformer training, from one CP-SAT model.

import paraplan
result = paraplan.solve("examples/llama3-70b-h100.yaml", time_limit_s=10)
print(result.plan, result.predicted.step_time_s, result.solver.status)
"""

from paraplan import export
from paraplan.api import evaluate, load_scenario, paraplan_version, solve
from paraplan.errors import (
    ConfigError,
    ExportError,
    InfeasibleError,
    ParaplanError,
    SolveTimeout,
)
from paraplan.reports.html import report_html, write_report
from paraplan.result import Result
from paraplan.scenario.schema import Scenario

__version__ = paraplan_version()

__all__ = [
    "ConfigError",
    "ExportError",
    "InfeasibleError",
    "ParaplanError",
    "Result",
    "Scenario",
    "SolveTimeout",
    "evaluate",
    "export",
    "load_scenario",
    "report_html",
    "solve",
    "write_report",
]
