"""The branch and bound's levels are exact: each level's bound is at most the next one's.

A family (degrees, micro-batch, vp, SP) is bounded by its comm-aware compute floor, a family with
a ZeRO stage by the terms with every group on consecutive ranks (packed), a layout by its own
terms; the tables' bound must be at most what any split of the layout achieves."""

from __future__ import annotations

from dataclasses import replace

import pytest
from paraplan.cost import Job, Recompute, stage_terms
from paraplan.cost.floor import compute_floor_s, inner_tiers_fastest
from paraplan.cost.plan import PartialPlan
from paraplan.cost.pp import pipeline_lower_bound_s
from paraplan.graph import build_graph, preset
from paraplan.hardware import build_cluster
from paraplan.solver import Options
from paraplan.solver.bounds import quick_lower_bound_s
from paraplan.solver.placement import orders
from paraplan.solver.space import families, zeros

CASES = [
    ("llama3-8b", "dgx-h100", 4, 4096, 64),
    ("llama2-13b", "dgx-a100-40gb", 4, 4096, 128),
    ("llama3-70b", "gb200-nvl72", 1, 8192, 72),
    ("gpt3-6.7b", "dgx-h100", 16, 2048, 256),
    ("mixtral-8x7b", "dgx-h100", 4, 4096, 64),
]


@pytest.mark.parametrize(("model", "node", "nodes", "seq", "batch"), CASES)
def test_each_level_bounds_the_next(model: str, node: str, nodes: int, seq: int, batch: int) -> None:
    graph = build_graph(preset(model))
    cluster = build_cluster(node, nodes=nodes)
    assert inner_tiers_fastest(cluster)
    job = Job(seq_len=seq, global_batch=batch)
    modes = list(Recompute)
    num_layers = graph.spec.num_layers
    checked = 0
    for family in families(graph.spec, cluster, seq, batch, PartialPlan(), Options())[::7]:
        m = job.global_batch // (family.micro_batch * family.dp)
        floor = pipeline_lower_bound_s(compute_floor_s(graph, family, job, cluster), family.pp, family.vp, m)
        for zero in zeros(family, PartialPlan()):
            p = replace(family, zero=zero)
            packed = quick_lower_bound_s(stage_terms(graph, p, job, cluster, packed=True), modes, num_layers)
            assert floor <= packed * (1 + 1e-12)
            for order in orders(p, cluster, PartialPlan(), Options(), prune_dominated=False):
                terms = stage_terms(graph, replace(p, order=order), job, cluster)
                assert packed <= quick_lower_bound_s(terms, modes, num_layers) * (1 + 1e-12)
                checked += 1
    assert checked > 20
