"""Pooled (mixed-GPU) clusters in the cost model: each stage is costed on its own pool, a stage
next to another pool pays the inter-pool link, and the stage-to-pool rules are enforced."""

from __future__ import annotations

from dataclasses import replace

import pytest
from paraplan.cost import Job, Plan, Recompute, evaluate, stage_terms
from paraplan.cost.comm import p2p_s
from paraplan.cost.compute import ACTIVATION_BYTES, tokens_per_device
from paraplan.cost.floor import compute_floor_s
from paraplan.cost.pools import check_stage_pools, pool_floors, pooled_pipeline_floor_s
from paraplan.cost.pp import pipeline_lower_bound_s
from paraplan.graph import build_graph, preset
from paraplan.hardware import build_cluster, build_pooled_cluster

H100 = {"preset": "dgx-h100", "nodes": 2}
A100 = {"preset": "dgx-a100-80gb", "nodes": 2}
GRAPH = build_graph(preset("llama3-8b"))
JOB = Job(seq_len=4096, global_batch=64)


def _plan(pp: int, pools: tuple[int, ...], layers: tuple[int, ...], tp: int = 8) -> Plan:
    return Plan(
        dp=16 * len(set(pools)) // (tp * pp),
        tp=tp,
        pp=pp,
        micro_batch=1,
        zero=1,
        recompute=(Recompute.NONE,) * pp,
        layers_per_stage=layers,
        stage_pools=pools,
    )


def test_inter_pool_link_is_the_slower_scale_out() -> None:
    c = build_pooled_cluster([H100, A100])
    h, a = c.pools
    assert c.num_devices == 32 and c.pool_link is not None
    slower = min((h.tiers[-1], a.tiers[-1]), key=lambda t: t.effective_bytes_per_s)
    assert c.pool_link.effective_bytes_per_s == slower.effective_bytes_per_s
    assert c.pool_link.alpha_s == max(h.tiers[-1].alpha_s, a.tiers[-1].alpha_s)
    assert c.memory_capacity_bytes == min(h.memory_capacity_bytes, a.memory_capacity_bytes)


@pytest.mark.parametrize("pool", [0, 1])
def test_plan_on_one_pool_costs_as_on_that_pool_alone(pool: int) -> None:
    pooled = build_pooled_cluster([H100, A100])
    alone = build_cluster(**(H100, A100)[pool])
    plan = _plan(2, (pool, pool), (14, 18))
    a = evaluate(GRAPH, pooled, JOB, plan)
    b = evaluate(GRAPH, alone, JOB, replace(plan, stage_pools=()))
    assert a.step_time_s == pytest.approx(b.step_time_s, rel=1e-12)
    assert a.stage_memory == b.stage_memory and a.mfu == pytest.approx(b.mfu)


def test_each_stage_is_costed_on_its_pool() -> None:
    pooled = build_pooled_cluster([H100, A100])
    plan = _plan(4, (0, 0, 1, 1), (8, 8, 8, 8))
    terms = stage_terms(GRAPH, plan, JOB, pooled)
    h = stage_terms(GRAPH, replace(plan, stage_pools=()), JOB, build_cluster(**H100))
    a = stage_terms(GRAPH, replace(plan, stage_pools=()), JOB, build_cluster(**A100))
    for s, ref in ((1, h), (2, a)):
        assert terms.stage_time(s, Recompute.NONE).per_layer == ref.stage_time(s, Recompute.NONE).per_layer
        assert terms.stage_capacity_bytes(s) == ref.capacity_bytes
        assert terms.optimizer(s) == ref.optimizer(s)
    # the A100 block is slower, so the same split is slower on the A100 stages
    assert terms.stage_time_s(2, 8, Recompute.NONE) > terms.stage_time_s(1, 8, Recompute.NONE)


def test_stages_at_a_pool_boundary_pay_the_inter_pool_link() -> None:
    pooled = build_pooled_cluster([H100, A100])
    plan = _plan(4, (0, 0, 1, 1), (8, 8, 8, 8))
    terms = stage_terms(GRAPH, plan, JOB, pooled)
    # p2p = 2 (alpha + n h 2 B / (tp B_link)) on the slower neighbour link (SP: scattered send)
    n_bytes = tokens_per_device(plan, JOB) * GRAPH.spec.hidden * ACTIVATION_BYTES / plan.tp
    assert pooled.pool_link is not None
    boundary = 2 * p2p_s(pooled.pool_link, n_bytes)
    assert terms.p2p_at(1) == pytest.approx(boundary) == terms.p2p_at(2)
    assert terms.p2p_at(0) == pytest.approx(2 * p2p_s(pooled.pools[0].tiers[-1], n_bytes))
    assert terms.p2p_at(3) == pytest.approx(2 * p2p_s(pooled.pools[1].tiers[-1], n_bytes))


@pytest.mark.parametrize(
    ("pools", "pattern"),
    [
        ((0, 1, 0, 1), "consecutive"),
        ((0, 0, 0, 1), "hosts all its devices"),
        ((0, 0, 2, 2), "one pool index"),
        ((0, 0, 1), "one pool index"),
    ],
)
def test_stage_pool_rules(pools: tuple[int, ...], pattern: str) -> None:
    plan = replace(_plan(4, (0, 0, 1, 1), (8, 8, 8, 8)), stage_pools=pools)
    with pytest.raises(ValueError, match=pattern):
        check_stage_pools(plan, build_pooled_cluster([H100, A100]))


def test_pp_must_be_outermost_on_pools() -> None:
    from paraplan.cost import Axis

    plan = replace(_plan(4, (0, 0, 1, 1), (8, 8, 8, 8)), order=(Axis.TP, Axis.CP, Axis.PP, Axis.DP))
    with pytest.raises(ValueError, match="outermost"):
        evaluate(GRAPH, build_pooled_cluster([H100, A100]), JOB, plan)


def test_memory_is_checked_against_each_stage_pool() -> None:
    small = {"preset": "dgx-a100-40gb", "nodes": 2}
    pooled = build_pooled_cluster([H100, small])
    plan = _plan(2, (0, 1), (16, 16))
    b = evaluate(GRAPH, pooled, JOB, plan)
    assert b.stage_capacity_bytes == (
        pooled.pools[0].memory_capacity_bytes,
        pooled.pools[1].memory_capacity_bytes,
    )
    assert b.fits == all(
        m.total_bytes <= c for m, c in zip(b.stage_memory, b.stage_capacity_bytes, strict=True)
    )


@pytest.mark.parametrize("layers", [(2, 5, 11, 14), (8, 8, 8, 8), (5, 5, 11, 11), (1, 1, 1, 29)])
@pytest.mark.parametrize("pools", [(1, 1, 0, 0), (0, 0, 1, 1)])
def test_pooled_pipeline_floor_is_below_every_split(layers: tuple[int, ...], pools: tuple[int, ...]) -> None:
    pooled = build_pooled_cluster([H100, A100])
    plan = _plan(4, pools, layers)
    m = plan.num_micro_batches(JOB)
    floor = pooled_pipeline_floor_s(pool_floors(GRAPH, plan, JOB, pooled), plan, m, True)
    assert 0 < floor <= evaluate(GRAPH, pooled, JOB, plan).step_time_s
    # tighter than treating every stage as the fastest pool (the homogeneous floor)
    local = replace(plan, stage_pools=())
    fastest = min(compute_floor_s(GRAPH, local, JOB, c) for c in pooled.pools)
    assert floor > pipeline_lower_bound_s(fastest, plan.pp, plan.vp, m)
