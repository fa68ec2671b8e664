"""Fuzz cases of the job fields drawn on generators of their own (issue 22; benchmarks/fuzz_cases.py
``offload_case`` for job.offload_modules, ``probs_case`` for job.moe_probs_applied, ``fusion_case``
for job.moe_router_fusion / moe_permute_fusion, so the fuzz
record's seeds are unchanged): no crash; a broken value (an unknown module or one Megatron's
pairing rules refuse; a value outside auto, activation and combine) is a ConfigError naming the
field; every other answer passes the fuzz checks (a Result that reloads, re-evaluates and exports
or refuses by name, or a ParaplanError naming a field)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from benchmarks.fuzz_cases import Case, RandomDraw, fusion_case, offload_case, probs_case
from benchmarks.fuzz_checks import run_case
from paraplan.errors import ConfigError, ParaplanError

# (generator, the field its broken cases name, evaluated seeds, least ConfigErrors, solved seeds)
FIELDS: list[tuple[Callable[..., Case], str, int, int, int]] = [
    (offload_case, "job.offload_modules", 150, 20, 30),
    (probs_case, "job.moe_probs_applied", 100, 5, 20),
    (fusion_case, "job.moe_", 60, 3, 10),
]
IDS = [field for _, field, *_ in FIELDS]


def _outcome(out: object) -> str:
    return type(out).__name__ if isinstance(out, ParaplanError) else "Result"


@pytest.mark.parametrize(("draw", "field", "seeds", "config_errors", "_solved"), FIELDS, ids=IDS)
def test_evaluated_plans_answer_or_refuse_the_field_by_name(
    draw: Callable[..., Case], field: str, seeds: int, config_errors: int, _solved: int, tmp_path: Path
) -> None:
    outcomes: Counter[str] = Counter()
    for seed in range(seeds):
        case = draw(RandomDraw(seed))
        out = run_case(case, tmp_path)
        if case.refuse:
            assert isinstance(out, ConfigError) and field in str(out), (seed, out)
        outcomes[_outcome(out)] += 1
    assert outcomes["Result"] >= 10 and outcomes["ConfigError"] >= config_errors, outcomes


@pytest.mark.parametrize(("draw", "_field", "_seeds", "_errors", "solved"), FIELDS, ids=IDS)
def test_solved_scenarios_with_the_field_pass_the_fuzz_checks(
    draw: Callable[..., Case], _field: str, _seeds: int, _errors: int, solved: int, tmp_path: Path
) -> None:
    outcomes: Counter[str] = Counter()
    for seed in range(solved):
        case = draw(RandomDraw(seed), solve=True, time_limit_s=2.0)
        outcomes[_outcome(run_case(case, tmp_path, deep=False))] += 1
    assert outcomes["Result"] >= 5, outcomes
