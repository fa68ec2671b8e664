"""CI runs the README's test command (the fast suite) and then every test it leaves out (issue 26):
the two marker expressions of .ci/run's pytest lines are complements, so no test goes unrun."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKERS = ("slow", "oracle", "property", "torch")


def _pytest_lines(text: str) -> list[str]:
    return [
        line.strip() for line in text.splitlines() if "python -m pytest" in line and not line.startswith("#")
    ]


def _selected(expression: str, marks: set[str]) -> bool:
    """Whether pytest's ``-m expression`` selects a test carrying ``marks``."""
    return bool(eval(expression, {}, {m: m in marks for m in MARKERS}))  # noqa: S307


def test_ci_runs_the_readme_test_command() -> None:
    readme = [
        line for line in _pytest_lines((ROOT / "README.md").read_text()) if line.startswith("pip install")
    ]
    assert len(readme) == 1, "the README shows one test command"
    assert readme[0] in _pytest_lines((ROOT / ".ci/run").read_text())


def test_ci_runs_every_test_once() -> None:
    lines = _pytest_lines((ROOT / ".ci/run").read_text())
    expressions = [m.group(1) for line in lines if (m := re.search(r'-m "([^"]+)"', line))]
    assert len(expressions) == len(lines) == 2
    for bits in range(2 ** len(MARKERS)):
        marks = {m for i, m in enumerate(MARKERS) if bits >> i & 1}
        assert sum(_selected(e, marks) for e in expressions) == 1, f"a test marked {sorted(marks)}"
