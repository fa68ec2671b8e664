"""Collectives: the lessons' worked example, ring volumes, tiers and placement spans."""

from __future__ import annotations

import pytest
from paraplan.cost import (
    DEFAULT_ORDER,
    Axis,
    Plan,
    allgather_s,
    allreduce_s,
    alpha_beta_s,
    group_span,
    ring_allgather_s,
    ring_allreduce_s,
)
from paraplan.hardware import build_cluster


def test_lesson_worked_example_two_milliseconds() -> None:
    # T = n * alpha + Q / B = 4 x 5 us + 100 MB / 50 GB/s = 2.02 ms
    assert alpha_beta_s(4, 5e-6, 100e6, 50e9) == pytest.approx(2.02e-3)


@pytest.mark.parametrize("p", [2, 4, 8, 64])
def test_ring_allreduce_moves_two_p_minus_one_over_p(p: int) -> None:
    n, bw = 1e9, 100e9
    # bandwidth term 2 (p-1)/p n / B, latency 2 (p-1) alpha
    assert ring_allreduce_s(p, n, 0.0, bw) == pytest.approx(2 * (p - 1) / p * n / bw)
    assert ring_allreduce_s(p, 0.0, 1e-6, bw) == pytest.approx(2 * (p - 1) * 1e-6)
    assert ring_allgather_s(p, n, 0.0, bw) == pytest.approx((p - 1) / p * n / bw)


def test_single_device_group_costs_nothing() -> None:
    assert ring_allreduce_s(1, 1e9, 1e-5, 1e9) == 0.0


def _plan(**kw: int) -> Plan:
    base = dict(dp=1, tp=1, pp=1, cp=1)
    base.update(kw)
    pp = base["pp"]
    return Plan(**base, layers_per_stage=(1,) * pp, recompute=("none",) * pp)  # type: ignore[arg-type]


def test_tp_innermost_stays_inside_the_node() -> None:
    cluster = build_cluster("dgx-h100", nodes=4)
    plan = _plan(tp=8, dp=4)
    assert group_span(cluster, plan, Axis.TP).fan_in == (8, 1)
    assert group_span(cluster, plan, Axis.DP).fan_in == (1, 4)
    assert group_span(cluster, plan, Axis.TP).outermost.name == "nvlink"


def test_dp_innermost_pushes_tp_across_nodes() -> None:
    cluster = build_cluster("dgx-h100", nodes=4)
    plan = Plan(dp=4, tp=8, pp=1, layers_per_stage=(1,), order=(Axis.DP, Axis.TP, Axis.CP, Axis.PP))
    assert group_span(cluster, plan, Axis.TP).fan_in == (2, 4)
    assert group_span(cluster, plan, Axis.DP).fan_in == (4, 1)


def test_hierarchical_allreduce_equals_ring_on_one_tier() -> None:
    cluster = build_cluster("dgx-h100", nodes=1)
    span = group_span(cluster, _plan(tp=8), Axis.TP)
    tier = cluster.tiers[0]
    n = 256e6
    assert allreduce_s(span, n) == pytest.approx(
        ring_allreduce_s(8, n, tier.alpha_s, tier.effective_bytes_per_s)
    )


def test_crossing_the_network_is_slower_than_nvlink() -> None:
    cluster = build_cluster("dgx-h100", nodes=2)
    inside = group_span(cluster, _plan(tp=8, dp=2), Axis.TP)
    across = group_span(
        cluster,
        Plan(dp=2, tp=8, pp=1, layers_per_stage=(1,), order=(Axis.DP, Axis.TP, Axis.CP, Axis.PP)),
        Axis.TP,
    )
    assert allgather_s(across, 1e8) > allgather_s(inside, 1e8)


def test_default_order_is_megatron_tp_cp_dp_pp() -> None:
    assert [a.value for a in DEFAULT_ORDER] == ["tp", "cp", "dp", "pp"]
