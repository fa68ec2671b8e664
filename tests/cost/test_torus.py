"""Torus collectives (cost/torus.py) against the scaling book's formulas (S6)."""

from __future__ import annotations

import pytest
from paraplan.cost import Axis, Plan, Recompute, allgather_s, allreduce_s, group_span
from paraplan.cost.comm import SubAxis, alltoall_s, span_of
from paraplan.hardware import build_cluster

V = 256e6  # bytes


def _plan(**kw) -> Plan:
    pp = kw.get("pp", 1)
    return Plan(recompute=(Recompute.NONE,) * pp, layers_per_stage=(1,) * pp, **kw)


def test_one_ring_allgather_is_v_over_bidirectional_bandwidth_plus_half_ring_hops() -> None:
    c = build_cluster("v5p-1024", nodes=1)  # 8x8x8, every axis a ring
    link = 100e9 * 0.82  # one way per link x ICI efficiency (data/tpu.yaml)
    span = span_of(c, [SubAxis(1, 8)])  # the x ring
    # T = (p/2) t_hop + V (p-1)/p / (2 W)
    assert allgather_s(span, V) == pytest.approx(4 * 1e-6 + V * 7 / 8 / (2 * link))
    assert allreduce_s(span, V) == pytest.approx(2 * allgather_s(span, V))


def test_two_axes_at_once_double_the_bandwidth() -> None:
    c = build_cluster("v5p-1024", nodes=1)
    link = 100e9 * 0.82
    span = span_of(c, [SubAxis(1, 64)])  # x and y rings
    assert allgather_s(span, V) == pytest.approx(8 * 1e-6 + V * 63 / 64 / (4 * link))


def test_no_wraparound_is_one_way_and_p_minus_one_hops() -> None:
    c = build_cluster("v5e-128", nodes=1)  # 8x16: x (8) has no wraparound
    link = 50e9 * 0.82
    span = span_of(c, [SubAxis(1, 8)])
    assert allgather_s(span, V) == pytest.approx(7 * 1e-6 + V * 7 / 8 / link)


def test_alltoall_is_a_quarter_of_an_allgather_on_a_ring() -> None:
    c = build_cluster("v5p-1024", nodes=1)
    span = span_of(c, [SubAxis(1, 8)])
    n = V / 8  # each rank sends its shard
    ag_bw = allgather_s(span, V) - allgather_s(span, 0.0)
    a2a_bw = alltoall_s(span, n) - alltoall_s(span, 0.0)
    assert a2a_bw == pytest.approx(ag_bw / 4 * 8 / 7)  # n p / (8 W) vs V (p-1)/p / (2 W)


def test_strided_members_share_links() -> None:
    """Members 2 chips apart on an 8-ring: 4 members, each link shared by 2 groups."""
    c = build_cluster("v5p-1024", nodes=1)
    link = 100e9 * 0.82
    span = span_of(c, [SubAxis(2, 4)])
    assert allgather_s(span, V) == pytest.approx(2 * 2 * 1e-6 + V * 3 / 4 / (2 * link / 2))


def test_dcn_is_the_outer_tier_of_a_multislice_group() -> None:
    c = build_cluster("v5p-1024", nodes=2)
    plan = _plan(dp=1024, tp=1, pp=1)
    span = group_span(c, plan, Axis.DP)
    ici = span_of(build_cluster("v5p-1024", nodes=1), [SubAxis(1, 512)])
    dcn = 50e9 / 8 * 0.9
    expected = allgather_s(ici, V) + 14e-6 + V / 2 / 512 / dcn
    assert allgather_s(span, V) == pytest.approx(expected)


def test_the_slice_shape_changes_the_rings_a_group_gets() -> None:
    c = build_cluster("v5p-1024", nodes=1)
    plan = _plan(dp=32, tp=16, pp=1)
    link = 100e9 * 0.82
    on_cube = group_span(c, plan, Axis.TP)  # 16 on 8x8x8: the x ring and a 2-chip line on y
    on_long = group_span(c, _plan(dp=32, tp=16, pp=1, torus_shape=(16, 8, 4)), Axis.TP)  # x ring
    assert allgather_s(on_cube, V) == pytest.approx((4 + 1) * 1e-6 + V * 15 / 16 / (3 * link))
    assert allgather_s(on_long, V) == pytest.approx(8 * 1e-6 + V * 15 / 16 / (2 * link))
    with pytest.raises(ValueError, match="not a shape"):
        group_span(c, _plan(dp=32, tp=16, pp=1, torus_shape=(2, 16, 16)), Axis.TP)
