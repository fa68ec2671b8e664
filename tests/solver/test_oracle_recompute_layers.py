"""Partial recompute (Plan.recompute_layers, solver/constraints/recompute_layers.py) is optimal:
on random instances whose memory is tight enough that storing some layers pays, the solver's
optimum equals exhaustive enumeration over every number of layers per chunk (per stage, or one
N for every rank under uniform recompute), and a fixed count is honoured exactly."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from paraplan.cost import Job, Recompute
from paraplan.cost.plan import PartialPlan
from paraplan.graph import Activation, ModelSpec, build_graph
from paraplan.hardware import build_cluster
from paraplan.solver import Options, SolverOptions, solve_instance

from tests.solver.test_oracle import check_against_enumeration


def tight_instance(rng: random.Random):
    """A model whose activations at long sequences crowd one or two 40 GB GPUs per stage: the
    degrees are fixed (tp 1, micro-batch 1, ZeRO 1) and the sequence chosen so that storing
    every layer does not fit and recomputing every layer does, with room between."""
    heads = rng.choice([8, 16])
    hidden = heads * 128
    spec = ModelSpec(
        name="tight",
        num_layers=rng.randint(4, 10),
        hidden=hidden,
        ffn_hidden=hidden * 4,
        num_heads=heads,
        num_kv_heads=heads,
        vocab=32000,
        activation=rng.choice(list(Activation)),
    )
    gpus = rng.choice([2, 4])
    tokens = (rng.uniform(0.5, 2.5) * 40e9 / (34 * hidden * 2 * spec.num_layers)) * gpus
    job = Job(seq_len=max(1024, int(tokens) // 1024 * 1024), global_batch=rng.choice([4, 8]))
    fixed = PartialPlan(tp=1, micro_batch=1, zero=1, pp=rng.choice([None, 2]))
    options = Options(
        allow_uneven_stages=rng.random() < 0.7,
        search_placement=False,
        max_micro_batch=1,
        max_vp=2,
        uniform_recompute=rng.random() < 0.3,
    )
    return build_graph(spec), build_cluster("dgx-a100-40gb", gpus=gpus), job, fixed, options


def _check(seed: int) -> str:
    plan = check_against_enumeration(seed, tight_instance(random.Random(seed)))
    if plan is None:
        return "infeasible"
    return "partial" if plan.recompute_layers else "optimal"


def test_partial_recompute_matches_enumeration_quick() -> None:
    outcomes = [_check(seed) for seed in range(40)]
    assert outcomes.count("partial") >= 10, outcomes  # the generator must make storing pay


@pytest.mark.slow
def test_partial_recompute_matches_enumeration_on_200_instances() -> None:
    outcomes = [_check(seed) for seed in range(1000, 1200)]
    assert outcomes.count("partial") >= 50, outcomes


@pytest.mark.parametrize("counts", [(2,), (1, 3)])
def test_fixed_counts_are_honoured(counts: tuple[int, ...]) -> None:
    """A fixed recompute_layers comes back as given and its plan is the enumeration's best."""
    graph, cluster, job, _, options = tight_instance(random.Random(7))
    fixed = PartialPlan(pp=2, recompute=(Recompute.FULL,), recompute_layers=counts)
    plan = check_against_enumeration(
        7, (graph, cluster, job, fixed, replace(options, uniform_recompute=False))
    )
    if plan is not None:
        assert plan.recompute_layers == (counts * 2 if len(counts) == 1 else counts)


def test_fixed_counts_refused_without_partial() -> None:
    """A fixed count the search cannot honour is refused, naming the field, never dropped."""
    graph, cluster, job, _, options = tight_instance(random.Random(7))
    fixed = PartialPlan(pp=2, recompute=(Recompute.FULL,), recompute_layers=(2,))
    with pytest.raises(ValueError, match="plan.recompute_layers"):
        solve_instance(
            graph,
            cluster,
            job,
            fixed,
            replace(options, partial_recompute=False),
            SolverOptions(time_limit_s=10),
        )
