"""Property-based tests over random valid scenarios (issue 16, item 2).

Scenarios come from benchmarks/fuzz_cases.py (small explicit, preset and Hugging Face models;
every node type, fabric preset and 2-3 pool clusters; random subsets of fixed knobs, some
inconsistent; random solver options). Each answer must be a Result or a ParaplanError that
names a field, within the time limit, and a Result must re-evaluate to its own step time,
respect the fixed knobs and options, be strict JSON that ``paraplan.export.load_result`` reloads,
export to ``solver.target``, and (OPTIMAL) not be beaten by any one-knob or one-layer neighbour
inside the search space, by its runner-ups, by ``top=1`` vs ``top=3`` or depend on 1 vs 2 workers.

Budget: CI runs with a fixed seed (hypothesis ``derandomize``), no example database and about
1-2 minutes on 2 cores for the whole tests/property/ directory. For a longer run:

    PARAPLAN_PROPERTY_EXAMPLES=1000 python -m pytest tests/property -q   # 10x the examples, random seed
    PARAPLAN_PROPERTY_STRICT_TIME=1 ...   # the issue's time margin (limit x 1.2 + 1 s), not CI's

and for thousands of cases in separate processes, ``python -m benchmarks.fuzz`` (benchmarks/fuzz.py).
The marker ``property`` selects the suite (``-m property``) or leaves it out (``-m "not property"``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import event, given

from benchmarks.fuzz_cases import Case
from benchmarks.fuzz_checks import run_case
from tests.property.strategies import evaluate_cases, settings_for, valid_cases

STRICT_TIME = os.environ.get("PARAPLAN_PROPERTY_STRICT_TIME") == "1"
TIME_FACTOR, TIME_MARGIN_S = (1.2, 1.0) if STRICT_TIME else (2.0, 5.0)  # a noisy 2-core CI box


def _run(case: Case, deep: bool) -> None:
    event(case.tag)
    with tempfile.TemporaryDirectory() as where:
        out = run_case(case, Path(where), factor=TIME_FACTOR, margin_s=TIME_MARGIN_S, deep=deep)
    status = getattr(getattr(out, "solver", None), "status", None)
    event(f"outcome: {status or type(out).__name__}")


@settings_for(150)
@given(valid_cases(time_limit_s=5.0))
def test_valid_scenario_gives_a_checked_plan_or_a_clear_error(case: Case) -> None:
    _run(case, deep=False)


@settings_for(25)
@given(valid_cases(time_limit_s=5.0))
def test_optimal_plan_beats_neighbours_runner_ups_and_is_worker_independent(case: Case) -> None:
    _run(case, deep=True)


@settings_for(150)
@given(evaluate_cases())
def test_evaluate_gives_a_result_or_a_clear_error(case: Case) -> None:
    _run(case, deep=False)
