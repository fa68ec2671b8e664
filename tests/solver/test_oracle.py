"""Optimal means optimal: on random small instances the CP-SAT objective equals the exhaustive
minimum over the same space, and the solver says infeasible exactly when enumeration finds nothing.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from paraplan.cost import Axis, Job, Plan, Precision, Recompute, evaluate
from paraplan.cost.plan import PartialPlan
from paraplan.graph import Activation, ModelSpec, build_graph
from paraplan.hardware import Cluster, Tier, build_cluster
from paraplan.solver import NoFitError, NoLayoutError, Options, SolverOptions, solve_instance
from paraplan.solver.enumerate import enumerate_plans
from paraplan.solver.scale import tolerance_s

from tests.seeds import seeds

CLUSTERS = [
    ("dgx-a100-40gb", 1),
    ("dgx-a100-80gb", 2),
    ("dgx-h100", 4),
    ("dgx-h100", 8),
    ("dgx-a100-40gb", 8),
    ("dgx-h100", 16),
    ("gb200-nvl72", 4),
    ("three-tier", 16),
]


def three_tier(gpus: int) -> Cluster:
    """A small rail-optimised fabric in the shape of the Llama 3 cluster (NVLink in pairs, a
    leaf of 4 GPUs, an oversubscribed spine above): placement must choose which axis crosses
    which of three tiers."""
    base = build_cluster("dgx-h100", gpus=2)
    tiers = (
        replace(base.tiers[0], domain_devices=2),
        Tier(name="leaf", domain_devices=4, per_gpu_bytes_per_s=50e9, alpha_s=10e-6, efficiency=0.9),
        Tier(name="spine", domain_devices=gpus, per_gpu_bytes_per_s=50e9 / 7, alpha_s=20e-6, efficiency=0.9),
    )
    return replace(base, name="three-tier", devices_per_node=2, num_nodes=gpus // 2, tiers=tiers)


def random_instance(rng: random.Random):
    heads = rng.choice([4, 8, 16])
    hidden = heads * rng.choice([64, 128, 256, 512])
    spec = ModelSpec(
        name="rand",
        num_layers=rng.randint(2, 6),
        hidden=hidden,
        ffn_hidden=hidden * rng.choice([2, 4]),
        num_heads=heads,
        num_kv_heads=rng.choice([h for h in (1, 2, 4, heads) if heads % h == 0]),
        vocab=rng.choice([512, 32000, 128256]),
        activation=rng.choice(list(Activation)),
        tied_embeddings=rng.random() < 0.3,
    )
    preset, gpus = rng.choice(CLUSTERS)
    cluster = three_tier(gpus) if preset == "three-tier" else build_cluster(preset, gpus=gpus)
    job = Job(
        seq_len=rng.choice([1024, 4096, 16384, 65536]),
        global_batch=rng.choice([1, 2, 4, 8, 16]),
        precision=rng.choice([Precision.BF16, Precision.BF16, Precision.FP8])
        if preset != "dgx-a100-40gb" and preset != "dgx-a100-80gb"
        else Precision.BF16,
    )
    fixed_kw = random_fixed_knobs(rng)
    if rng.random() < 0.15:
        fixed_kw["order"] = (Axis.DP, Axis.TP, Axis.CP, Axis.PP)
    return build_graph(spec), cluster, job, PartialPlan(**fixed_kw), random_options(rng)


def random_fixed_knobs(rng: random.Random) -> dict:
    """Knobs a random instance fixes: sometimes ZeRO, a recompute mode, tp."""
    fixed_kw: dict = {}
    if rng.random() < 0.3:
        fixed_kw["zero"] = rng.choice([0, 1, 2, 3])
    if rng.random() < 0.2:
        fixed_kw["recompute"] = (rng.choice(list(Recompute)),)
    if rng.random() < 0.2:
        fixed_kw["tp"] = rng.choice([1, 2])
    return fixed_kw


def random_options(rng: random.Random) -> Options:
    """Search options of a random instance (small micro-batch and vp ranges: enumerable)."""
    return Options(
        allow_uneven_stages=rng.random() < 0.8,
        search_placement=rng.random() < 0.7,
        max_micro_batch=2,
        max_vp=2,
    )


def check_against_enumeration(seed: int, instance) -> Plan | None:
    """Solve and enumerate ``instance`` = (graph, cluster, job, fixed, options); return the
    solver's plan (None when both say infeasible) after checking they agree."""
    graph, cluster, job, fixed, options = instance
    truth = enumerate_plans(graph, cluster, job, fixed, options)
    opts = SolverOptions(time_limit_s=60, num_workers=1, random_seed=0)
    if truth.best is None:
        with pytest.raises((NoFitError, NoLayoutError)):
            solve_instance(graph, cluster, job, fixed, options, opts)
        return None
    out = solve_instance(graph, cluster, job, fixed, options, opts)
    assert out.status == "OPTIMAL"
    sol = out.solutions[0]
    b = evaluate(graph, cluster, job, sol.plan)
    tol = tolerance_s(b.num_micro_batches, sol.plan.pp, graph.spec.num_layers // sol.plan.vp)
    assert b.fits
    assert abs(b.step_time_s - sol.objective_s) <= tol
    assert b.step_time_s == pytest.approx(truth.best_s, rel=1e-6, abs=2 * tol), (
        f"seed {seed}: solver {sol.plan} {b.step_time_s} vs enumeration {truth.best} {truth.best_s}"
    )
    assert out.bound_s <= truth.best_s + 2 * tol
    return sol.plan


def check_instance(seed: int) -> str:
    plan = check_against_enumeration(seed, random_instance(random.Random(seed)))
    return "infeasible" if plan is None else "optimal"


@pytest.mark.parametrize("seed", seeds(25, fast=(0, 1, 2, 3, 4, 5, 7, 8)))
def test_solver_matches_enumeration_quick(seed: int) -> None:
    check_instance(seed)


@pytest.mark.slow
def test_solver_matches_enumeration_on_200_instances() -> None:
    outcomes = [check_instance(seed) for seed in range(1000, 1200)]
    assert outcomes.count("optimal") > 100  # the generator must exercise both outcomes
    assert outcomes.count("infeasible") >= 1


@pytest.mark.parametrize("seed", seeds(12, fast=(1, 2, 3, 4)))
def test_three_tier_placement_matches_enumeration(seed: int) -> None:
    """Placement over three tiers (pairs, leaves, an oversubscribed spine) stays exact."""
    graph, _, job, fixed, options = random_instance(random.Random(1000 + seed))
    check_against_enumeration(
        seed,
        (graph, three_tier(16), job, replace(fixed, order=None), replace(options, search_placement=True)),
    )
