"""Optimal means optimal for serving too (issue 23): on random small serving instances the
solver's objective (the aggregated table's CP-SAT choice and the disaggregated branch and bound
over pool bounds) equals the best of every whole plan of the same space scored by
``cost.serving.evaluate_serving`` (solver/serving_enumerate.py), and it finds no plan exactly
when enumeration finds none. Objectives are compared, not plans: plans can tie."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
from paraplan.cost.serving import Engine, Workload
from paraplan.graph import ModelSpec, preset
from paraplan.hardware import build_cluster
from paraplan.solver.serving import ServingNoPlan, solve_serving
from paraplan.solver.serving_enumerate import enumerate_serving
from paraplan.solver.serving_space import ServingFixed, ServingOptions

CLUSTERS = [("dgx-h100", 2), ("dgx-h100", 4), ("dgx-a100-40gb", 4), ("dgx-h200", 4), ("dgx-b200", 3)]
BATCHES = (4, 32, 256)


def _model(rng: random.Random) -> ModelSpec:
    if rng.random() < 0.3:  # a small real MoE: ep and attention DP choices
        return preset("qwen3-30b-a3b")
    heads = rng.choice([8, 16, 32])
    hidden = heads * rng.choice([64, 128])
    return ModelSpec(
        name="rand",
        num_layers=rng.randint(2, 12),
        hidden=hidden,
        ffn_hidden=hidden * rng.choice([2, 4]),
        num_heads=heads,
        num_kv_heads=rng.choice([h for h in (1, 2, 4, 8) if heads % h == 0]),
        vocab=rng.choice([32000, 128256]),
    )


def random_instance(rng: random.Random):
    spec = _model(rng)
    node, gpus = rng.choice(CLUSTERS)
    cluster = build_cluster(node, gpus=gpus)
    closed = rng.random() < 0.5
    workload = Workload(
        isl=float(rng.choice([128, 1024, 4096])),
        osl=float(rng.choice([64, 512, 2048])),
        concurrency=rng.choice([1, 16, 256, 4096]) if closed else None,
        request_rate=None if closed else rng.choice([0.5, 5.0, 50.0, 500.0]),
        ttft_ms=rng.choice([None, 200.0, 2000.0]),
        tpot_ms=rng.choice([None, 10.0, 30.0, 100.0]),
        weights_precision=rng.choice(["bf16", "fp8"]) if node != "dgx-a100-40gb" else "bf16",
        kv_precision=rng.choice(["bf16", "fp8"]),
    )
    objectives = ["goodput_per_gpu", "min_ttft"] + ([] if closed else ["min_gpus"])
    options = ServingOptions(objective=rng.choice(objectives), max_batches=BATCHES)
    fixed = ServingFixed(mode=rng.choice([None, "aggregated", "disaggregated", "disaggregated"]))
    if rng.random() < 0.2:
        fixed = replace(fixed, max_batch=rng.choice(BATCHES))
    return spec, cluster, workload, Engine(name=rng.choice(["vllm", "sglang", "trtllm"])), fixed, options


def _check(seed: int) -> None:
    rng = random.Random(seed)
    spec, cluster, workload, engine, fixed, options = random_instance(rng)
    oracle = enumerate_serving(spec, cluster, workload, engine, fixed, options)
    try:
        out = solve_serving(spec, cluster, workload, engine, fixed, options, time_limit_s=120.0)
    except ServingNoPlan:
        assert oracle.value is None, f"seed {seed}: solver found nothing, enumeration {oracle.best}"
        return
    assert oracle.value is not None, f"seed {seed}: solver found {out.solutions[0].plan}, enumeration none"
    assert out.status == "OPTIMAL", f"seed {seed}"
    got = out.solutions[0].value
    # the disaggregated bounds are integers of 2^-20 of the largest pool rate (serving_disagg.RATE_LEVELS)
    assert math.isclose(got, oracle.value, rel_tol=1e-5, abs_tol=1e-9), (
        f"seed {seed}: solver {got} ({out.solutions[0].plan}) != enumeration {oracle.value} ({oracle.best})"
    )


@pytest.mark.parametrize("seed", range(12))
def test_serving_solver_equals_enumeration(seed: int) -> None:
    _check(seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(12, 60))
def test_serving_solver_equals_enumeration_more(seed: int) -> None:
    _check(seed)
