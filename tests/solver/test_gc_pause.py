"""solver/gc_pause.py: the cyclic collector is paused inside a search and restored after it."""

from __future__ import annotations

import gc
import threading

import pytest
from paraplan.solver.gc_pause import gc_paused


@pytest.fixture(autouse=True)
def _collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


def test_pause_disables_and_restores_the_collector():
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_nested_pauses_restart_the_collector_when_the_last_one_leaves():
    with gc_paused():
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_pause_restores_the_collector_when_the_search_raises():
    with pytest.raises(KeyboardInterrupt):
        with gc_paused():
            raise KeyboardInterrupt
    assert gc.isenabled()


def test_a_caller_that_disabled_the_collector_keeps_it_disabled():
    gc.disable()
    with gc_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_concurrent_pauses_share_one_pause():
    """Two threads inside at once (the second enters before the first leaves and leaves after
    it): the collector stays off until the second leaves, then is on again."""
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, bool] = {}

    def first() -> None:
        with gc_paused():
            first_in.set()
            second_in.wait(5)
        first_out.set()

    def second() -> None:
        first_in.wait(5)
        with gc_paused():
            second_in.set()
            first_out.wait(5)
            seen["after the first left"] = gc.isenabled()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == {"after the first left": False}
    assert gc.isenabled()


def test_a_search_runs_with_the_collector_paused_and_restores_it(monkeypatch):
    """solve_instance pauses the collector around the branch and bound and restarts it."""
    import random

    import paraplan.solver.solve as solve_module
    from paraplan.solver import SolverOptions, solve_instance

    from tests.solver.test_oracle_moe import state_free_moe_instance

    seen: list[bool] = []
    bounded = solve_module.bounded_tables

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return bounded(*args, **kwargs)

    monkeypatch.setattr(solve_module, "bounded_tables", spy)
    graph, cluster, job, fixed, options = state_free_moe_instance(random.Random(3))
    try:
        solve_instance(graph, cluster, job, fixed, options, SolverOptions(time_limit_s=60, num_workers=1))
    except ValueError:  # no layout or none fits: the search ran all the same
        pass
    assert seen == [False]
    assert gc.isenabled()
