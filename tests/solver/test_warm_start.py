"""The warm start (solver/model.py ``add_hint``) is a complete, feasible assignment whose
objective is the upper-bound plan's step time: CP-SAT with every variable fixed to its hint
proves it, for a model with one block kind and one with several (stage_lines builds both the
constraints and the hint's maxima)."""

from __future__ import annotations

import paraplan.solver.solve as solve_module
import pytest
from ortools.sat.python import cp_model
from paraplan.solver.model import add_hint, build_model
from paraplan.solver.tables import LayoutTables

import paraplan


@pytest.mark.parametrize(
    "scenario",
    [
        {
            "model": {"preset": "llama3-8b"},
            "cluster": {"preset": "dgx-h100", "nodes": 8},
            "job": {"seq_len": 8192, "global_batch": 128},
        },
        {
            "model": {"preset": "nemotron-h-56b"},
            "cluster": {"preset": "dgx-h100", "nodes": 8},
            "job": {"seq_len": 8192, "global_batch": 64},
        },
    ],
    ids=["one-kind", "hybrid"],
)
def test_hint_is_the_upper_plan(monkeypatch: pytest.MonkeyPatch, scenario: dict) -> None:
    checked: list[tuple[float, float]] = []
    solve_layout = solve_module._solve_layout

    def check_hint(tab: LayoutTables, *args: object) -> object:
        if tab.upper_plan is not None:
            model, mv = build_model([tab])
            plan = tab.upper_plan
            add_hint(model, mv, 0, list(plan.layers_per_stage), list(plan.recompute))
            solver = cp_model.CpSolver()
            solver.parameters.fix_variables_to_their_hinted_value = True
            solver.parameters.num_workers = 1
            assert solver.status_name(solver.solve(model)) == "OPTIMAL"
            step_s = solver.objective_value / mv.scale * tab.resolution_s
            checked.append((step_s, tab.upper_bound_s))
        return solve_layout(tab, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(solve_module, "_solve_layout", check_hint)
    paraplan.solve(scenario, time_limit_s=60, workers=1)
    assert checked
    for step_s, upper_s in checked:
        assert step_s == pytest.approx(upper_s, rel=1e-5)
