"""Fuzz cases with job.offload_modules (issue 22; benchmarks/fuzz_cases.py offload_case, a
generator of its own so the fuzz record's seeds are unchanged): no crash; a broken module list is a
ConfigError naming job.offload_modules; every other answer passes the fuzz checks (a Result that
reloads, re-evaluates and exports, or a ParaplanError naming a field)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from benchmarks.fuzz_cases import RandomDraw, offload_case
from benchmarks.fuzz_checks import run_case
from paraplan.errors import ConfigError, ParaplanError


def _outcome(out: object) -> str:
    return type(out).__name__ if isinstance(out, ParaplanError) else "Result"


def test_evaluated_plans_with_offloading_answer_or_refuse_by_name(tmp_path: Path) -> None:
    outcomes: Counter[str] = Counter()
    for seed in range(150):
        case = offload_case(RandomDraw(seed))
        out = run_case(case, tmp_path)
        if case.refuse:
            assert isinstance(out, ConfigError) and "job.offload_modules" in str(out), (seed, out)
        outcomes[_outcome(out)] += 1
    assert outcomes["Result"] >= 10 and outcomes["ConfigError"] >= 20, outcomes


def test_solved_scenarios_with_offloading_pass_the_fuzz_checks(tmp_path: Path) -> None:
    outcomes: Counter[str] = Counter()
    for seed in range(30):
        case = offload_case(RandomDraw(seed), solve=True, time_limit_s=2.0)
        outcomes[_outcome(run_case(case, tmp_path, deep=False))] += 1
    assert outcomes["Result"] >= 5, outcomes
