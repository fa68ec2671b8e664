"""Optimal means optimal, with expert parallelism: on random small mixture-of-experts instances
(routed and shared experts, dense first layers, MLA or GQA) the CP-SAT objective equals the
exhaustive minimum over the same space, ep included."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from paraplan.cost import CPComm, CudaGraphs, Job, MoEDispatcher, MoERouting, Precision
from paraplan.cost.plan import PartialPlan
from paraplan.graph import ModelSpec, build_graph, preset
from paraplan.hardware import build_cluster
from paraplan.solver import Options
from paraplan.solver.space import layouts

from tests.solver.test_oracle import check_against_enumeration, random_fixed_knobs, random_options

CLUSTERS = [
    ("dgx-h100", 4),
    ("dgx-h100", 8),
    ("dgx-h100", 16),
    ("dgx-a100-80gb", 16),
    ("gb200-nvl72", 8),
    ("dgx-b200", 16),
]


def random_moe_instance(rng: random.Random, small: bool = False):
    heads = rng.choice([4, 8, 16])
    hidden = heads * rng.choice([64, 128, 256])
    layers = rng.randint(2, 4)
    experts = rng.choice([4, 8, 16, 32])
    mla = rng.random() < 0.25
    spec = ModelSpec(
        name="rand-moe",
        num_layers=layers,
        hidden=hidden,
        ffn_hidden=hidden * rng.choice([2, 4]),
        num_heads=heads,
        num_kv_heads=heads if mla else rng.choice([h for h in (1, 2, 4, heads) if heads % h == 0]),
        vocab=rng.choice([512, 32000]),
        num_experts=experts,
        top_k=rng.choice([k for k in (1, 2, 4) if k <= experts]),
        moe_ffn_hidden=hidden * rng.choice([1, 2]),
        num_shared_experts=rng.choice([0, 0, 1]),
        first_dense_layers=rng.choice([0, 0, 1]) if layers > 1 else 0,
        kv_lora_rank=64 if mla else 0,
        q_lora_rank=rng.choice([0, 96]) if mla else 0,
        qk_nope_head_dim=32 if mla else 0,
        qk_rope_head_dim=16 if mla else 0,
        v_head_dim=32 if mla else 0,
    )
    preset, gpus = rng.choice([c for c in CLUSTERS if not small or c[1] <= 8])
    cluster = build_cluster(preset, gpus=gpus)
    job = Job(
        seq_len=rng.choice([1024, 4096, 16384]),
        global_batch=rng.choice([4, 8, 16, 32]),
        precision=rng.choice([Precision.BF16, Precision.FP8])
        if not preset.startswith("dgx-a100")
        else Precision.BF16,
        expert_imbalance=rng.choice([1.0, 1.1, 1.3]),
    )
    fixed_kw = random_fixed_knobs(rng)
    if rng.random() < 0.15:
        fixed_kw["ep"] = rng.choice([1, 2, 4])
    return build_graph(spec), cluster, job, PartialPlan(**fixed_kw), random_options(rng)


def check_moe_instance(seed: int, small: bool = False) -> str:
    plan = check_against_enumeration(seed, random_moe_instance(random.Random(seed), small))
    if plan is None:
        return "infeasible"
    return "optimal" if plan.ep == 1 else "optimal-ep"


@pytest.mark.parametrize("seed", range(16))
def test_moe_solver_matches_enumeration_quick(seed: int) -> None:
    check_moe_instance(seed, small=True)


@pytest.mark.slow
def test_moe_solver_matches_enumeration_on_40_instances() -> None:
    outcomes = [check_moe_instance(seed) for seed in range(2000, 2040)]
    assert outcomes.count("optimal-ep") >= 10  # the generator must exercise expert parallelism
    assert outcomes.count("optimal") >= 5  # ... and plans where ep = 1 wins


def _expert_tp_instance(seed: int):
    """A small MoE instance with tp = 2 fixed, so expert TP (etp = tp or 1) is a live choice,
    and sometimes cp = 2 (the p2p / all_gather K/V exchange too) or a fixed etp / cp_comm."""
    rng = random.Random(seed)
    graph, cluster, job, fixed, options = random_moe_instance(rng, small=True)
    kw = {"tp": 2, "zero": fixed.zero, "recompute": fixed.recompute}
    if rng.random() < 0.5:
        kw["cp"] = 2
        job = replace(job, seq_len=max(job.seq_len, 4096))
    if rng.random() < 0.3:
        kw["etp"] = rng.choice([1, 2])
    if rng.random() < 0.3:
        kw["cp_comm"] = rng.choice(list(CPComm))
    return graph, cluster, job, PartialPlan(**kw), options


@pytest.mark.parametrize("seed", range(3000, 3010))
def test_moe_solver_matches_enumeration_with_expert_tp_and_cp_comm(seed: int) -> None:
    instance = _expert_tp_instance(seed)
    plan = check_against_enumeration(seed, instance)
    fixed = instance[3]
    if plan is not None:
        assert plan.tp == 2 and plan.expert_tp in (1, 2)
        if fixed.etp is not None:
            assert plan.expert_tp == fixed.etp
        if fixed.cp_comm is not None and plan.cp > 1:
            assert plan.cp_comm is fixed.cp_comm


def test_space_holds_both_expert_tp_and_both_cp_exchanges_on_every_tier() -> None:
    spec = preset("qwen3-30b-a3b")
    node = build_cluster("dgx-h100", gpus=8)
    pruned = layouts(spec, node, 4096, 64, PartialPlan(tp=2, cp=2), Options())
    assert {p.expert_tp for p in pruned} == {1, 2}
    # one tier: the all-gather exchange equals the ring's busy time, all exposed, but its
    # attention runs as one kernel over the gathered keys (issue 11): not dominated
    assert {p.cp_comm for p in pruned} == set(CPComm)
    full = layouts(spec, node, 4096, 64, PartialPlan(tp=2, cp=2), Options(), prune_dominated=False)
    assert {p.cp_comm for p in full} == set(CPComm)
    two_nodes = build_cluster("dgx-h100", nodes=2)
    across = layouts(spec, two_nodes, 4096, 64, PartialPlan(tp=1, cp=16), Options())
    assert {p.cp_comm for p in across} == set(CPComm)


def state_free_moe_instance(rng: random.Random, **options: object):
    """``random_moe_instance(rng, small=True)`` with the MoE software state left to the search
    (dispatcher, overlap and graphs unset, ``search_moe_state`` on; ``options`` further Options
    fields), on an H100 node where the draw is an Ampere part (DeepEP / HybridEP run from Hopper
    on)."""
    graph, cluster, job, fixed, opts = random_moe_instance(rng, small=True)
    if cluster.accelerator.generation == "ampere":
        cluster = build_cluster("dgx-h100", gpus=8)
    fixed = replace(fixed, moe_dispatcher=None, moe_overlap=None, cuda_graphs=None)
    return graph, cluster, job, fixed, replace(opts, search_moe_state=True, **options)


def _software_state_instance(seed: int):
    """A small MoE instance with a fixed MoE software state (issue 22): a deduplicating dispatcher,
    the 1F1B EP overlap (whose exposure depends on dp, pp and vp through the steady-state share)
    and CUDA graphs, on GPUs the dispatchers are fitted for."""
    rng = random.Random(seed)
    graph, cluster, job, fixed, options = random_moe_instance(rng, small=True)
    if cluster.accelerator.generation == "ampere":
        cluster = build_cluster("dgx-h100", gpus=8)
    kw = {
        "moe_dispatcher": rng.choice(list(MoEDispatcher)),
        "moe_overlap": rng.random() < 0.7,
        "cuda_graphs": rng.choice(list(CudaGraphs)),
        "zero": fixed.zero,
        "recompute": fixed.recompute,
    }
    if rng.random() < 0.5:
        job = replace(
            job, moe_routing=rng.choice(list(MoERouting)), moe_capacity_factor=1.25, expert_imbalance=None
        )
    return graph, cluster, job, PartialPlan(**kw), options


@pytest.mark.parametrize("seed", range(4000, 4012))
def test_moe_solver_matches_enumeration_with_software_state(seed: int) -> None:
    instance = _software_state_instance(seed)
    plan = check_against_enumeration(seed, instance)
    if plan is not None:
        fixed = instance[3]
        assert (plan.moe_dispatcher, plan.moe_overlap, plan.cuda_graphs) == (
            fixed.moe_dispatcher,
            fixed.moe_overlap,
            fixed.cuda_graphs,
        )
