"""The code is ruff clean (the README's test command checks it with the tests)."""

from __future__ import annotations

import ast
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_clean() -> None:
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff not installed (it is in the [test] extra)")
    r = subprocess.run([ruff, "check", str(ROOT)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout


def test_ruff_formatted() -> None:
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff not installed (it is in the [test] extra)")
    r = subprocess.run([ruff, "format", "--check", str(ROOT)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout


MAX_MODULE_LINES = 400  # issue 12: no module over ~400 lines without a reason at its top
PACKAGE_DIRS = ("graph", "hardware", "cost", "solver", "rules", "paraplan")


def test_long_modules_say_why_they_are_one_module() -> None:
    """A package module longer than MAX_MODULE_LINES states why it is one module: a paragraph
    starting ``Size:`` in its docstring. Otherwise it is split by concern."""
    unexplained = []
    for folder in PACKAGE_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            text = path.read_text()
            if text.count("\n") <= MAX_MODULE_LINES:
                continue
            doc = ast.get_docstring(ast.parse(text)) or ""
            if not any(line.startswith("Size: ") for line in doc.splitlines()):
                unexplained.append(f"{path.relative_to(ROOT)} ({text.count(chr(10))} lines)")
    assert not unexplained, "split these or say why in a 'Size: ' paragraph: " + ", ".join(unexplained)
