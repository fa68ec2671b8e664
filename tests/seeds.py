"""Seeds of the random-instance tests (solver = enumeration): a few run in the fast suite (the
README's test command), the rest are marked slow and run in CI's second pass (.ci/run), so every
seed still runs on every submission. The fast ones are chosen by measured time (a few seconds
each on two cores); the slow ones include each test's most expensive instances."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest


def seeds(count: int, fast: Iterable[int]) -> list[Any]:
    """``range(count)`` as pytest parameters, those not in ``fast`` marked slow."""
    quick = set(fast)
    return [s if s in quick else pytest.param(s, marks=pytest.mark.slow) for s in range(count)]
