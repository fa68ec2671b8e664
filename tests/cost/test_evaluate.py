"""evaluate(): batch accounting, parts that add up, FLOPs per token, physical monotonicity."""

from __future__ import annotations

from dataclasses import replace

import pytest
from paraplan.cost import Job, Plan, Recompute, evaluate, model_flops_per_token
from paraplan.cost.flops import matmul_params
from paraplan.graph import build_graph, preset
from paraplan.hardware import Cluster, build_cluster


def test_global_batch_is_micro_batch_times_accumulation_times_dp() -> None:
    # 8 x 16 x 64 = 8192
    plan = Plan(dp=64, tp=1, pp=1, micro_batch=8, layers_per_stage=(32,))
    assert plan.num_micro_batches(Job(seq_len=2048, global_batch=8192)) == 16


def test_tp_and_pp_do_not_multiply_the_batch() -> None:
    plan = Plan(dp=2, tp=8, pp=4, micro_batch=1, layers_per_stage=(8,) * 4)
    assert plan.num_micro_batches(Job(seq_len=2048, global_batch=64)) == 32


def test_flops_per_token_is_six_n_plus_causal_attention() -> None:
    spec = preset("llama3-8b")
    s = 8192
    n = matmul_params(spec)
    assert n == pytest.approx(8.03e9 - 4096 * 128256, rel=0.01)  # 8.03B minus the embedding
    assert model_flops_per_token(spec, s) == pytest.approx(6 * n + 6 * 32 * 4096 * s)


def test_gpt3_flops_match_megatron_formula_with_causal_attention() -> None:
    # Narayanan et al. Eq.: 72 l h^2 (1 + s/6h + V/12lh) per token for full attention; causal
    # attention halves the s/6h term.
    spec = replace(preset("gpt3-175b"), vocab=51200)
    layers, h, s, v = 96, 12288, 2048, 51200
    expected = 72 * layers * h * h * (1 + s / (12 * h) + v / (12 * layers * h))
    assert model_flops_per_token(spec, s) == pytest.approx(expected, rel=2e-3)


def _llama70b() -> tuple:
    graph = build_graph(preset("llama3-70b"))
    job = Job(seq_len=8192, global_batch=128)
    plan = Plan(
        dp=2,
        tp=8,
        pp=4,
        micro_batch=1,
        vp=5,
        zero=1,
        sequence_parallel=True,
        recompute=(Recompute.NONE,) * 4,
        layers_per_stage=(20,) * 4,
    )
    return graph, job, plan


def test_parts_add_up_to_the_step() -> None:
    graph, job, plan = _llama70b()
    b = evaluate(graph, build_cluster("dgx-h100", nodes=8), job, plan)
    assert b.compute_s + b.exposed_comm_s + b.bubble_s + b.optimizer_s == pytest.approx(b.step_time_s)
    assert b.fits
    assert 0.2 < b.mfu < 0.7


def _scaled(cluster: Cluster, factor: float) -> Cluster:
    tiers = tuple(replace(t, per_gpu_bytes_per_s=t.per_gpu_bytes_per_s * factor) for t in cluster.tiers)
    return replace(cluster, tiers=tiers)


@pytest.mark.parametrize("factor", [1.5, 2.0, 10.0])
def test_more_bandwidth_never_slows_a_step(factor: float) -> None:
    graph, job, plan = _llama70b()
    cluster = build_cluster("dgx-h100", nodes=8)
    for p in (plan, replace(plan, zero=3), replace(plan, vp=1, recompute=(Recompute.FULL,) * 4)):
        slow = evaluate(graph, cluster, job, p).step_time_s
        fast = evaluate(graph, _scaled(cluster, factor), job, p).step_time_s
        assert fast <= slow + 1e-12


def test_recompute_trades_time_for_memory() -> None:
    graph, job, plan = _llama70b()
    cluster = build_cluster("dgx-h100", nodes=8)
    none = evaluate(graph, cluster, job, plan)
    full = evaluate(graph, cluster, job, replace(plan, recompute=(Recompute.FULL,) * 4))
    assert full.step_time_s > none.step_time_s
    assert full.peak_memory_bytes < none.peak_memory_bytes


def test_bad_plan_is_a_value_error_naming_the_rule() -> None:
    graph, job, plan = _llama70b()
    cluster = build_cluster("dgx-h100", nodes=8)
    with pytest.raises(ValueError, match="must equal the cluster's 64 devices"):
        evaluate(graph, cluster, job, replace(plan, dp=4))
    with pytest.raises(ValueError, match="must divide model heads=64"):
        evaluate(graph, build_cluster("dgx-h100", gpus=24), job, replace(plan, tp=3, dp=2, pp=4))
