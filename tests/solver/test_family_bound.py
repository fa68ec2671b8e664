"""The MoE family bounds of the branch and bound (solver/family_bound.py, cost/floor.py
``moe_ep_excess_s``) on random small mixture-of-experts instances with the software state free:
each is at most the step time of real plans of the family (every recompute mode, the even split),
and the least-memory twin (all-to-all, no graphs, the overlap kept) needs no more memory on any
stage than the layout it stands for.
The search's exactness with them is tests/solver/test_oracle_moe_state.py's."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from paraplan.cost import Recompute, evaluate
from paraplan.cost.floor import compute_floor_s, inner_tiers_fastest, moe_ep_excess_s
from paraplan.cost.plan import Layout
from paraplan.cost.pp import pipeline_lower_bound_s
from paraplan.cost.split import even_layers
from paraplan.solver.family_bound import family_bound_s, least_memory_twin
from paraplan.solver.space import layouts

from tests.solver.test_oracle_moe import state_free_moe_instance


def _instance(seed: int):
    rng = random.Random(seed)
    graph, cluster, job, fixed, options = state_free_moe_instance(rng, max_micro_batch=2, max_vp=2)
    space = layouts(graph.spec, cluster, job.seq_len, job.global_batch, fixed, options)
    return graph, cluster, job, rng.sample(space, min(40, len(space)))


def _plans(graph, layout: Layout):
    split = even_layers(graph.spec.num_layers, layout.pp, layout.vp)
    if split is None:
        return []
    return [layout.plan(split, (r,) * layout.pp) for r in Recompute]


@pytest.mark.parametrize("seed", range(6))
def test_the_family_bounds_are_below_the_plans_of_the_family(seed: int) -> None:
    graph, cluster, job, sample = _instance(9000 + seed)
    checked = 0
    for layout in sample:
        family = replace(layout, zero=0, order=layout.order)
        m = job.global_batch // (layout.micro_batch * layout.dp)
        own_ep_floor = compute_floor_s(graph, family, job, cluster)
        if inner_tiers_fastest(cluster):
            own_ep_floor += moe_ep_excess_s(graph, family, job, cluster)[layout.ep]
        floor = pipeline_lower_bound_s(own_ep_floor, layout.pp, layout.vp, m)
        blocks = family_bound_s(graph, family, job, cluster, list(Recompute), {})
        for plan in _plans(graph, layout):
            try:
                step = evaluate(graph, cluster, job, plan).step_time_s
            except ValueError:
                continue  # a plan the cost model refuses (check_plan)
            assert floor <= step * (1 + 1e-9), (plan, floor, step)
            if inner_tiers_fastest(cluster):
                assert blocks <= step * (1 + 1e-9), (plan, blocks, step)
            checked += 1
    assert checked, "no plan of the sample was scored"


@pytest.mark.parametrize("seed", range(6))
def test_the_least_memory_twin_needs_no_more_memory(seed: int) -> None:
    graph, cluster, job, sample = _instance(9100 + seed)
    for layout in sample:
        for plan in _plans(graph, layout):
            twin = replace(plan, **{f: getattr(least_memory_twin(layout), f) for f in _STATE})
            try:
                own, least = (evaluate(graph, cluster, job, p) for p in (plan, twin))
            except ValueError:
                continue
            for a, b in zip(least.stage_memory, own.stage_memory, strict=True):
                assert a.total_bytes <= b.total_bytes * (1 + 1e-12), (plan, a.total_bytes, b.total_bytes)


_STATE = ("moe_dispatcher", "moe_overlap", "cuda_graphs")


@pytest.mark.parametrize("seed", range(4))
def test_the_floor_memo_shared_by_every_state_changes_no_floor(seed: int) -> None:
    """compute_floor_s and moe_ep_excess_s with one memo over every layout and MoE software state
    of the sample (as solver/candidates.py keeps it) give the values each computes alone: a memo
    key missing a field the value reads (the dispatcher of the all-to-all, say) fails here."""
    graph, cluster, job, sample = _instance(9200 + seed)
    memo: dict = {}
    states = {(p.moe_dispatcher, p.moe_overlap, p.cuda_graphs) for p in sample}
    for layout in sample:
        for d, o, g in states:
            family = replace(layout, moe_dispatcher=d, moe_overlap=o, cuda_graphs=g)
            assert compute_floor_s(graph, family, job, cluster, memo) == compute_floor_s(
                graph, family, job, cluster
            )
            assert moe_ep_excess_s(graph, family, job, cluster, memo) == moe_ep_excess_s(
                graph, family, job, cluster
            )
    assert memo or not inner_tiers_fastest(cluster)


def test_without_pipelining_the_overlap_moves_no_memory() -> None:
    """The least-memory twin of a pp = 1 layout drops the EP overlap (one check for the states
    with and without it): on every stage, with and without the overlap, the same bytes."""
    checked = 0
    for seed in range(6):
        graph, cluster, job, sample = _instance(9100 + seed)
        for layout in sample:
            if layout.pp > 1 or layout.ep == 1:
                continue
            assert not least_memory_twin(replace(layout, moe_overlap=True)).moe_overlap
            for plan in _plans(graph, layout):
                try:
                    off, on = (
                        evaluate(graph, cluster, job, replace(plan, moe_overlap=o)) for o in (False, True)
                    )
                except ValueError:
                    continue
                assert [m.total_bytes for m in on.stage_memory] == [m.total_bytes for m in off.stage_memory]
                checked += 1
    assert checked, "no pp = 1 plan with expert parallelism was scored"


@pytest.mark.parametrize("seed", range(4))
def test_a_zero_0_or_sp_off_layout_needs_no_less_memory_than_its_twin(seed: int) -> None:
    """solver/family_bound.py ``LeastMemory.unfit``: a ZeRO-0 (SP-off) layout whose ZeRO-1 (SP-on)
    twin's least-memory check failed is not checked again (issue 22 item 7), which is exact only
    when the twin needs no more memory on any stage, in every MoE software state and mode."""
    graph, cluster, job, sample = _instance(9300 + seed)
    checked = 0
    for layout in sample:
        variants = []
        if layout.dp * layout.cp > 1:
            variants.append((replace(layout, zero=0), replace(layout, zero=1)))
        if layout.tp > 1:
            off, on = (replace(layout, sequence_parallel=sp) for sp in (False, True))
            variants.append((off, on))
        for own, twin in variants:
            for own_plan, twin_plan in zip(_plans(graph, own), _plans(graph, twin), strict=True):
                try:
                    larger, smaller = (evaluate(graph, cluster, job, p) for p in (own_plan, twin_plan))
                except ValueError:
                    continue
                for a, b in zip(smaller.stage_memory, larger.stage_memory, strict=True):
                    assert a.total_bytes <= b.total_bytes * (1 + 1e-12), (own_plan, a, b)
                checked += 1
    assert checked
