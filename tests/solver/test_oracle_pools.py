"""Optimal means optimal on mixed-GPU clusters too: on random small pooled instances (each stage on
one pool, pools used whole or idle, in either order) the CP-SAT objective equals the exhaustive
minimum over the same space, and the solver says infeasible exactly when enumeration finds nothing.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from paraplan.cost import Job, Precision
from paraplan.cost.plan import PartialPlan
from paraplan.graph import ModelSpec, build_graph
from paraplan.hardware import build_pooled_cluster
from paraplan.solver import Options

from tests.seeds import seeds
from tests.solver.test_oracle import check_against_enumeration, random_instance

POOLS = [
    [{"preset": "dgx-h100", "gpus": 2}, {"preset": "dgx-a100-80gb", "gpus": 2}],
    [{"preset": "dgx-h100", "gpus": 4}, {"preset": "dgx-a100-40gb", "gpus": 2}],
    [{"preset": "dgx-a100-40gb", "gpus": 4}, {"preset": "dgx-h100", "gpus": 4}],
    [{"preset": "dgx-h100", "gpus": 2}, {"preset": "dgx-a100-80gb", "gpus": 4}],
    [
        {"preset": "dgx-a100-80gb", "gpus": 2},
        {"preset": "dgx-h100", "gpus": 2},
        {"preset": "dgx-a100-40gb", "gpus": 2},
    ],
    [{"preset": "dgx-h100", "gpus": 1}, {"preset": "dgx-a100-40gb", "gpus": 1}],
    [{"preset": "dgx-h100", "nodes": 1}, {"preset": "dgx-a100-80gb", "nodes": 1}],
]


def random_pooled_instance(rng: random.Random):
    graph, _, job, fixed, options = random_instance(rng)
    pools = rng.choice(POOLS)
    if len(pools) == 3 or any("nodes" in p for p in pools):  # keep the enumeration small
        options = replace(options, max_micro_batch=1, max_vp=1)
    # A100s have no FP8
    return (graph, build_pooled_cluster(pools), replace(job, precision=Precision.BF16), fixed, options)


def check_pooled(seed: int) -> str:
    plan = check_against_enumeration(seed, random_pooled_instance(random.Random(seed)))
    if plan is not None:
        assert len(plan.stage_pools) == plan.pp
    return "infeasible" if plan is None else "optimal"


@pytest.mark.parametrize("seed", seeds(30, fast=(0, 2, 3, 4, 5, 6)))
def test_solver_matches_enumeration_on_pools(seed: int) -> None:
    check_pooled(seed)


def test_solver_and_enumeration_agree_a_pooled_instance_is_infeasible() -> None:
    spec = ModelSpec(
        name="big", num_layers=4, hidden=16384, ffn_hidden=65536, num_heads=16, num_kv_heads=16, vocab=128256
    )
    pools = [{"preset": "dgx-h100", "gpus": 1}, {"preset": "dgx-a100-40gb", "gpus": 1}]
    instance = (
        build_graph(spec),
        build_pooled_cluster(pools),
        Job(seq_len=65536, global_batch=4),
        PartialPlan(),
        Options(max_micro_batch=1, max_vp=1),
    )
    assert check_against_enumeration(0, instance) is None


@pytest.mark.slow
def test_solver_matches_enumeration_on_60_pooled_instances() -> None:
    outcomes = [check_pooled(seed) for seed in range(2000, 2060)]
    assert outcomes.count("optimal") > 30
