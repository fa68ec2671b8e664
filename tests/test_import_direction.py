"""Imports point one way (docs/DESIGN.md §3): graph/ and hardware/ import nothing of the project,
cost/ only those two, rules/ and solver/ only those three; none of them imports the front door."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ALLOWED = {
    "graph": {"graph"},
    "hardware": {"hardware"},
    "cost": {"cost", "graph", "hardware"},
    "rules": {"rules", "cost", "graph", "hardware"},
    "solver": {"solver", "cost", "graph", "hardware"},
}


def _project_imports(path: Path) -> set[str]:
    """The top-level paraplan subpackages a module imports (``paraplan.cost.x`` -> ``cost``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom) and node.level == 0
            else []
        )
        for name in names:
            parts = name.split(".")
            if parts[0] == "paraplan":
                found.add(parts[1] if len(parts) > 1 else "paraplan")
    return found


@pytest.mark.parametrize("folder", sorted(ALLOWED))
def test_a_lower_layer_imports_only_layers_below_it(folder: str) -> None:
    bad = {
        str(p.relative_to(ROOT)): sorted(_project_imports(p) - ALLOWED[folder])
        for p in sorted((ROOT / folder).rglob("*.py"))
    }
    assert not {k: v for k, v in bad.items() if v}, f"imports across the layering: {bad}"


def test_the_checker_sees_a_front_door_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from paraplan.api import solve\nimport paraplan.export.megatron\nfrom paraplan.cost import Plan\n"
    )
    assert _project_imports(module) == {"api", "export", "cost"}


SCENARIO_WING = {"scenario", "errors", "capacity", "rules", "cost", "graph", "hardware"}
"""What paraplan/scenario/ may import: itself, the errors, the capacity sections it attaches
(paraplan/capacity/sections.py), and the layers below the front door."""


def test_the_scenario_wing_reads_a_scenario_and_nothing_plans_there() -> None:
    """Issue 26: paraplan/scenario/ (schema, sections, the plan document and its reading, the
    file reader) imports neither the planning room (planning, api, instance) nor what reports
    or exports a result, so a scenario reads the same wherever it is read from."""
    wing = ROOT / "paraplan" / "scenario"
    bad = {
        str(p.relative_to(ROOT)): sorted(_project_imports(p) - SCENARIO_WING)
        for p in sorted(wing.rglob("*.py"))
    }
    assert len(bad) >= 6
    assert not {k: v for k, v in bad.items() if v}, f"the scenario wing imports: {bad}"
