"""Property suite (issue 16, item 2): see test_valid.py's docstring for budgets and how to run."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis.configuration import set_hypothesis_home_dir

# hypothesis writes failing-example patches under its home directory: keep them out of the tree
set_hypothesis_home_dir(Path(__file__).resolve().parents[2] / ".pytest_cache" / "hypothesis")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/property/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.property)
