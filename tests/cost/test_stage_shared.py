"""cost/stage_build.py keeps block and end costs in one ``shared`` cache per solve: under the EP
overlap a MoE block's key holds dp, pp, vp and the schedule, and the blocks without an
all-to-all and the ends are kept under the key without them (``_plain_costs``). On random small
mixture-of-experts instances with every software state, the terms built through one cache over
many layouts (packed spans and the layouts' own) equal the terms each layout builds alone."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest
from paraplan.cost import CudaGraphs, MoEDispatcher, stage_terms
from paraplan.solver.space import layouts

from tests.solver.test_oracle_moe import state_free_moe_instance


def _compared_through(shared: dict, graph: Any, plan: Any, job: Any, cluster: Any) -> int:
    """With packed spans and with the layout's own: the terms built through ``shared`` equal the
    plan's built alone (a plan the spans cannot express, ValueError, is skipped); how many were
    compared."""
    compared = 0
    for packed in (False, True):
        try:
            alone = stage_terms(graph, plan, job, cluster, packed=packed)
        except ValueError:
            continue
        assert stage_terms(graph, plan, job, cluster, shared, packed=packed) == alone
        compared += 1
    return compared


@pytest.mark.parametrize("seed", range(4))
def test_terms_through_one_cache_equal_each_layouts_own(seed: int) -> None:
    rng = random.Random(9400 + seed)
    graph, cluster, job, fixed, options = state_free_moe_instance(rng, max_micro_batch=2, max_vp=2)
    space = layouts(graph.spec, cluster, job.seq_len, job.global_batch, fixed, options)
    sample = rng.sample(space, min(30, len(space)))
    shared: dict = {}
    checked = 0
    for layout in sample:
        for d, o, g in [
            (MoEDispatcher.ALLTOALL, True, CudaGraphs.NONE),
            (MoEDispatcher.DEEPEP, False, CudaGraphs.FULL),
        ]:
            plan = replace(layout, moe_dispatcher=d, moe_overlap=o, cuda_graphs=g)
            checked += _compared_through(shared, graph, plan, job, cluster)
    assert checked


@pytest.mark.parametrize("seed", range(4))
def test_each_dispatcher_and_rank_order_keeps_its_own_traffic(seed: int) -> None:
    """The MoE blocks' TP / CP / EP traffic is kept by the work, the dispatcher and the spans
    (stage_build ``_ep_kind_cost``): layouts of every dispatcher and both overlaps, each rank order
    the space has, through one cache, equal each one's own terms."""
    rng = random.Random(9500 + seed)
    graph, cluster, job, fixed, options = state_free_moe_instance(rng, max_micro_batch=2, max_vp=2)
    space = [
        f for f in layouts(graph.spec, cluster, job.seq_len, job.global_batch, fixed, options) if f.ep > 1
    ]
    shared: dict = {}
    checked = 0
    for layout in rng.sample(space, min(40, len(space))):
        for d in MoEDispatcher:
            for o in (False, True):
                plan = replace(layout, moe_dispatcher=d, moe_overlap=o, cuda_graphs=CudaGraphs.NONE)
                checked += _compared_through(shared, graph, plan, job, cluster)
    assert checked or not space


def test_rank_orders_whose_ep_groups_cross_nodes_keep_their_own_traffic() -> None:
    """As above on two nodes, where rank orders put the EP group inside a node or across both."""
    from paraplan.cost import Job
    from paraplan.cost.plan import PartialPlan
    from paraplan.graph import build_graph, preset
    from paraplan.hardware import build_cluster
    from paraplan.solver import Options

    graph = build_graph(preset("mixtral-8x7b"))
    cluster = build_cluster("dgx-h100", nodes=2)
    job = Job(seq_len=4096, global_batch=64)
    space = layouts(graph.spec, cluster, 4096, 64, PartialPlan(tp=1, ep=8, micro_batch=1), Options(max_vp=1))
    shared: dict = {}
    spans = set()
    for layout in space:
        for d in (MoEDispatcher.ALLTOALL, MoEDispatcher.DEEPEP):
            plan = replace(layout, moe_dispatcher=d, moe_overlap=layout.pp > 1)
            alone = stage_terms(graph, plan, job, cluster)
            assert stage_terms(graph, plan, job, cluster, shared) == alone
            spans.add(alone.plan.order)
    assert len(spans) > 1
