"""Fuzz cases with job.moe_probs_applied (issue 22; benchmarks/fuzz_cases.py probs_case, a
generator of its own so the fuzz record's seeds are unchanged): no crash; a value outside auto,
activation and combine is a ConfigError naming job.moe_probs_applied; every other answer passes
the fuzz checks (a Result that reloads, re-evaluates and exports or refuses by name, or a
ParaplanError naming a field)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from benchmarks.fuzz_cases import RandomDraw, probs_case
from benchmarks.fuzz_checks import run_case
from paraplan.errors import ConfigError, ParaplanError


def _outcome(out: object) -> str:
    return type(out).__name__ if isinstance(out, ParaplanError) else "Result"


def test_evaluated_plans_answer_or_refuse_the_setting_by_name(tmp_path: Path) -> None:
    outcomes: Counter[str] = Counter()
    for seed in range(100):
        case = probs_case(RandomDraw(seed))
        out = run_case(case, tmp_path)
        if case.refuse:
            assert isinstance(out, ConfigError) and "job.moe_probs_applied" in str(out), (seed, out)
        outcomes[_outcome(out)] += 1
    assert outcomes["Result"] >= 10 and outcomes["ConfigError"] >= 5, outcomes


def test_solved_scenarios_with_the_setting_pass_the_fuzz_checks(tmp_path: Path) -> None:
    outcomes: Counter[str] = Counter()
    for seed in range(20):
        case = probs_case(RandomDraw(seed), solve=True, time_limit_s=2.0)
        outcomes[_outcome(run_case(case, tmp_path, deep=False))] += 1
    assert outcomes["Result"] >= 5, outcomes
