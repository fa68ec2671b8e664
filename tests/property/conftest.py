"""Property suite (issue 16, item 2): see test_valid.py's docstring for budgets and how to run."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/property/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.property)
