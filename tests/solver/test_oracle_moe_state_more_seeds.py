"""The state-free check of test_oracle_moe_state.py on its seeds 12-23 (all slow), in a file of its
own so that CI's file-by-file runs (pytest-xdist --dist loadfile) balance."""

from __future__ import annotations

import pytest

from tests.solver.test_oracle_moe_state import STATE_FREE_SEEDS, _check


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(STATE_FREE_SEEDS // 2, STATE_FREE_SEEDS))
def test_solver_matches_enumeration_with_the_moe_state_free_later_seeds(seed: int) -> None:
    _check(6000 + seed, filtered=False)
