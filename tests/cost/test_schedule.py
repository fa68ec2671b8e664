"""Pipeline schedule: 1F1B and interleaved bubbles, uneven stages, the bound the solver prunes with."""

from __future__ import annotations

import random

import pytest
from paraplan.cost import Plan, in_flight_micro_batches, pipeline_s
from paraplan.cost.pp import pipeline_lower_bound_s


def test_equal_stages_take_m_plus_p_minus_one() -> None:
    # (m + p - 1) t  (Narayanan et al. 2021 Sec 2.2)
    assert pipeline_s([2.0] * 4, num_micro_batches=8, vp=1) == pytest.approx((8 + 4 - 1) * 2.0)


def test_interleaving_divides_the_bubble_by_v() -> None:
    t, p, m, v = 1.0, 8, 16, 4
    assert pipeline_s([t] * p, m, v) - m * t == pytest.approx((p - 1) * t / v)


def test_uneven_stages() -> None:
    # sum_s t_s + (m - 1) max_s t_s
    ts = [1.0, 3.0, 2.0]
    assert pipeline_s(ts, 5, 1) == pytest.approx(sum(ts) + 4 * 3.0)


def test_balanced_split_lower_bound_holds() -> None:
    rng = random.Random(0)
    for _ in range(200):
        p, m, v = rng.randint(1, 8), rng.randint(1, 32), rng.randint(1, 4)
        ts = [rng.uniform(0.1, 5.0) for _ in range(p)]
        assert pipeline_lower_bound_s(sum(ts), p, v, m) <= pipeline_s(ts, m, v) + 1e-12


def test_first_stage_holds_p_micro_batches() -> None:
    plan = Plan(dp=1, tp=1, pp=4, layers_per_stage=(1, 1, 1, 1))
    assert [in_flight_micro_batches(s, plan, 16) for s in range(4)] == [4, 3, 2, 1]
    assert in_flight_micro_batches(0, plan, 2) == 2
