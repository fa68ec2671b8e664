"""Hypothesis strategies over the shared case generators (benchmarks/fuzz_cases.py).

The generators draw through a ``Draw``; ``HypothesisDraw`` makes each choice a hypothesis draw,
so failures shrink to the first option of every choice and to no optional knob (``chance`` is
False at its minimum). ``settings_for`` is the suite's budget: a fixed seed (derandomize), no
example database and no deadline in CI; ``PARAPLAN_PROPERTY_EXAMPLES=N`` multiplies the
examples of every test by N / 100 (N = 100: the CI budget).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from benchmarks.fuzz_cases import Case, api_args, evaluate_case, malformed_case, valid_case

T = TypeVar("T")

__all__ = [
    "HypothesisDraw",
    "valid_cases",
    "evaluate_cases",
    "malformed_cases",
    "api_arg_cases",
    "settings_for",
    "EXAMPLES_SCALE",
]

EXAMPLES_SCALE = int(os.environ.get("PARAPLAN_PROPERTY_EXAMPLES", "100")) / 100


class HypothesisDraw:
    """``Draw`` on top of hypothesis's ``draw``: every choice shrinks towards its first option."""

    def __init__(self, draw: Any) -> None:
        self._draw = draw

    def choice(self, options: Sequence[T]) -> T:
        return options[self._draw(st.integers(0, len(options) - 1))]

    def integer(self, lo: int, hi: int) -> int:
        return self._draw(st.integers(lo, hi))

    def chance(self, p: float) -> bool:
        if p <= 0:
            return False
        return self._draw(st.integers(0, 999)) >= round(1000 * (1 - p))


@st.composite
def valid_cases(draw: Any, time_limit_s: float = 5.0) -> Case:
    return valid_case(HypothesisDraw(draw), time_limit_s=time_limit_s)


@st.composite
def evaluate_cases(draw: Any) -> Case:
    return evaluate_case(HypothesisDraw(draw))


@st.composite
def malformed_cases(draw: Any, known_bad: bool = True, extreme: bool = False) -> Case:
    return malformed_case(HypothesisDraw(draw), known_bad=known_bad, extreme=extreme)


@st.composite
def api_arg_cases(draw: Any, known_bad: bool = True) -> Case:
    return api_args(HypothesisDraw(draw), known_bad=known_bad)


def settings_for(max_examples: int) -> settings:
    """The CI budget (fixed seed, no database, no deadline), scaled by PARAPLAN_PROPERTY_EXAMPLES."""
    return settings(
        max_examples=max(1, round(max_examples * EXAMPLES_SCALE)),
        derandomize=EXAMPLES_SCALE <= 1,
        database=None,
        deadline=None,
        print_blob=True,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
            HealthCheck.function_scoped_fixture,
        ],
    )
