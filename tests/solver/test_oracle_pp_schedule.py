"""Solver = enumeration with plan.pp_schedule in the space (issue 22 item 2): the zero-bubble and
DualPipeV schedules searched beside the ones vp implies, on random small instances."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from paraplan.cost import PPSchedule
from paraplan.cost.plan import PartialPlan

from tests.seeds import seeds
from tests.solver.test_oracle import check_against_enumeration, random_instance

SCHEDULES = (PPSchedule.ZB1P, PPSchedule.DUALPIPEV)


def schedule_instance(seed: int):
    """A random instance (tests/solver/test_oracle.py) with a pipeline of 2 stages, a batch that
    gives DualPipeV its 2 pp micro-batches, and the two schedules searched."""
    rng = random.Random(5000 + seed)
    graph, cluster, job, fixed, options = random_instance(rng)
    if graph.spec.num_layers < 4:
        graph = random_instance(random.Random(9000 + seed))[0]
    job = replace(job, global_batch=rng.choice([8, 16, 32]))
    fixed = replace(fixed, pp=2, tp=fixed.tp or 1)
    if rng.random() < 0.3:
        fixed = replace(fixed, pp_schedule=rng.choice([*SCHEDULES, PPSchedule.INTERLEAVED]))
    return graph, cluster, job, fixed, replace(options, pp_schedules=SCHEDULES, max_vp=2)


def check(seed: int) -> str:
    plan = check_against_enumeration(seed, schedule_instance(seed))
    if plan is None:
        return "infeasible"
    return str(plan.pp_schedule or "implied")


@pytest.mark.parametrize("seed", seeds(16, fast=(0, 1, 2, 3)))
def test_solver_matches_enumeration_with_schedules(seed: int) -> None:
    check(seed)


@pytest.mark.slow
def test_schedule_instances_choose_every_schedule() -> None:
    outcomes = [check(seed) for seed in range(100, 140)]
    assert {"zb1p", "dualpipev"} <= set(outcomes), outcomes


def test_dualpipe_is_never_searched() -> None:
    from paraplan.solver.space import Options, pp_schedules

    opts = Options(pp_schedules=(*SCHEDULES, PPSchedule.DUALPIPE))
    assert pp_schedules(4, 1, 16, PartialPlan(), opts) == [None, PPSchedule.ZB1P]
    assert pp_schedules(4, 2, 16, PartialPlan(), opts) == [None, PPSchedule.ZB1P, PPSchedule.DUALPIPEV]
    assert pp_schedules(4, 2, 4, PartialPlan(), opts) == [None, PPSchedule.ZB1P]  # m < 2 pp
    assert pp_schedules(4, 1, 16, PartialPlan(pp_schedule=PPSchedule.DUALPIPE), opts) == []
    assert pp_schedules(1, 1, 16, PartialPlan(), opts) == [None]
