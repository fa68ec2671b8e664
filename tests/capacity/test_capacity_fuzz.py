"""Fuzz cases for cluster.choose and sweep grids (benchmarks/fuzz_capacity.py, issue 25): a few
hundred drawn inputs, valid and broken; no crash, a ConfigError naming each broken field, grids
of the product's size, and a few chosen clusters that meet their deadline, budget and range."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from benchmarks.fuzz_capacity import check_choose, check_choose_input, check_sweep
from benchmarks.fuzz_cases import RandomDraw, choose_case, sweep_case
from paraplan.errors import ConfigError


def test_choose_inputs_are_read_or_refused_by_name() -> None:
    outcomes = Counter()
    for seed in range(300):
        case = choose_case(RandomDraw(seed))
        out = check_choose_input(case)
        outcomes["refused" if isinstance(out, ConfigError) else "read"] += 1
        if case.refuse:  # a broken field is never read
            assert isinstance(out, ConfigError), (seed, case.scenario)
    assert outcomes["refused"] > 100 and outcomes["read"] > 100, outcomes


def test_sweep_grids_load_to_the_product_or_are_refused_by_name(tmp_path: Path) -> None:
    outcomes = Counter()
    for seed in range(200):
        case = sweep_case(RandomDraw(seed))
        where = tmp_path / str(seed)
        where.mkdir()
        out = check_sweep(case, where, run_rows=1 if seed % 5 == 0 else 0)
        outcomes["refused" if isinstance(out, ConfigError) else "loaded"] += 1
    assert outcomes["refused"] > 40 and outcomes["loaded"] > 80, outcomes


@pytest.mark.parametrize("seed", [0, 4, 6, 10])  # three chosen clusters, one deadline no cluster meets
def test_chosen_clusters_meet_their_limits(seed: int) -> None:
    case = choose_case(RandomDraw(seed), time_limit_s=20.0)
    check_choose(case)


@pytest.mark.slow
def test_forty_choose_cases_solve_or_refuse() -> None:
    outcomes = Counter(
        type(check_choose(choose_case(RandomDraw(s), time_limit_s=20.0))).__name__ for s in range(40)
    )
    assert outcomes["Result"] >= 5, outcomes
