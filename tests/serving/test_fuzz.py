"""The fuzz suite covers serving (issue 23): random serving scenarios (benchmarks/fuzz_cases.py
``serving_case``) never crash: each gives a ServingResult that fits, round-trips and reproduces
its objective, or a ParaplanError naming the field (a ConfigError for a malformed key;
benchmarks/fuzz_checks.py ``check_serving``). ``python -m benchmarks.fuzz`` draws them too."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.fuzz_cases import RandomDraw, serving_case
from benchmarks.fuzz_checks import run_case


def _run(seed: int, where: Path) -> None:
    case = serving_case(RandomDraw(seed), time_limit_s=5.0)
    run_case(case, where)  # raises PropertyFailure or the crash itself


@pytest.mark.parametrize("seed", range(20))
def test_random_serving_scenarios_never_crash(seed: int, tmp_path: Path) -> None:
    _run(seed, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(20, 120))
def test_random_serving_scenarios_never_crash_more(seed: int, tmp_path: Path) -> None:
    _run(seed, tmp_path)
