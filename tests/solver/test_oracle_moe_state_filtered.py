"""Optimal over the MoE software state with a layout or family filter that reads the state (issue
22 item 2): the solver's optimum equals enumeration's, no state is dropped as dominated under a
state filter (solver/states.py), and a filtered plan passes the filter. Split from
test_oracle_moe_state.py (its helpers) so that CI's file-by-file runs balance."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.seeds import seeds
from tests.solver.test_oracle import check_against_enumeration
from tests.solver.test_oracle_moe_state import _check, _state_free_instance


@pytest.mark.parametrize("seed", seeds(16, fast=(0, 1)))
def test_filtered_search_over_the_moe_state_matches_enumeration(seed: int) -> None:
    _check(7000 + seed, filtered=True)


@pytest.mark.parametrize("seed", seeds(8, fast=(0,)))
def test_a_family_filter_on_the_state_keeps_the_search_exact(seed: int) -> None:
    """The state filters asked of whole families too (Options.family_filter, as the runnable
    default asks the frameworks' family rules; STATE_FILTERS read family fields only): a class
    of states none of which passes is dropped before its peers are judged (solver/candidates.py
    ``_class_states``), and the optimum is still enumeration's."""
    graph, cluster, job, fixed, options = _state_free_instance(7000 + seed, filtered=True)
    options = replace(options, family_filter=options.layout_filter)
    plan = check_against_enumeration(seed, (graph, cluster, job, fixed, options))
    if plan is not None:
        assert options.layout_filter(plan)
