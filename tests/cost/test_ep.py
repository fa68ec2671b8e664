"""Expert parallelism: all-to-all cost, EP/expert-DP groups, expert memory and compute, rules."""

from __future__ import annotations

from dataclasses import replace

import pytest
from paraplan.cost import Job, Plan, Precision, Recompute, evaluate, stage_terms
from paraplan.cost.comm import alltoall_s, group_span
from paraplan.cost.ep import (
    ep_layer_comm,
    ep_span,
    expert_dp_span,
    expert_shard_degree,
    routed_copies_per_device,
)
from paraplan.cost.plan import Axis
from paraplan.graph import ModelSpec, build_graph, preset
from paraplan.hardware import build_cluster

QWEN = build_graph(preset("qwen3-30b-a3b"))
JOB = Job(seq_len=4096, global_batch=64, precision=Precision.BF16, expert_imbalance=1.0)


def _plan(dp: int, ep: int, pp: int = 1, tp: int = 1, **kw) -> Plan:
    return Plan(
        dp=dp,
        tp=tp,
        pp=pp,
        ep=ep,
        sequence_parallel=tp > 1,
        recompute=(Recompute.NONE,) * pp,
        layers_per_stage=(QWEN.spec.num_layers // pp,) * pp,
        **kw,
    )


def test_alltoall_one_tier_is_the_pairwise_formula() -> None:
    cluster = build_cluster("dgx-h100", gpus=8)
    span = group_span(cluster, _plan(8, 1), Axis.DP)
    nvlink = cluster.tiers[0]
    n = 64e6
    # (p-1) alpha + (p-1)/p n / B  (hardware.json pairwise_alltoall)
    expected = 7 * nvlink.alpha_s + 7 / 8 * n / nvlink.effective_bytes_per_s
    assert alltoall_s(span, n) == pytest.approx(expected)


def test_alltoall_across_nodes_runs_at_the_nic() -> None:
    cluster = build_cluster("dgx-h100", nodes=4)
    span = group_span(cluster, _plan(32, 1), Axis.DP)
    nvlink, net = cluster.tiers
    n = 64e6
    # 7 peers on NVLink, 24 across the network; the NIC share (24/32 of the bytes) is the bottleneck
    expected = (
        7 * nvlink.alpha_s
        + 24 * net.alpha_s
        + max(7 / 32 * n / nvlink.effective_bytes_per_s, 24 / 32 * n / net.effective_bytes_per_s)
    )
    assert alltoall_s(span, n) == pytest.approx(expected)


def test_ep_group_is_the_innermost_ranks_of_dp() -> None:
    cluster = build_cluster("dgx-h100", nodes=4)  # 32 GPUs
    plan = _plan(32, 8)
    assert ep_span(cluster, plan).fan_in == (8, 1)  # inside one node
    assert expert_dp_span(cluster, plan).fan_in == (1, 4)  # one rank per node
    assert expert_shard_degree(plan) == 4
    wide = _plan(32, 16)
    assert ep_span(cluster, wide).fan_in == (8, 2)


def test_dispatch_and_combine_bytes() -> None:
    cluster = build_cluster("dgx-h100", gpus=8)
    plan = _plan(8, 8, micro_batch=2)
    job = Job(seq_len=4096, global_batch=64, expert_imbalance=1.2)
    comm = ep_layer_comm(2048, 8, plan, job, cluster)
    # each rank sends n * top_k * imbalance copies of h bf16 values, twice (dispatch + combine)
    n_bytes = 2 * 4096 * 8 * 1.2 * 2048 * 2
    one = alltoall_s(ep_span(cluster, plan), n_bytes)
    assert comm.forward_s == pytest.approx(2 * one) and comm.backward_s == pytest.approx(2 * one)
    assert routed_copies_per_device(plan, job, 8) == pytest.approx(2 * 4096 * 8 * 1.2)
    # no expert parallelism: everything local, no all-to-all and no imbalance
    assert ep_layer_comm(2048, 8, _plan(8, 1), job, cluster).forward_s == 0.0
    assert routed_copies_per_device(_plan(8, 1), job, 8) == 4096 * 8


def test_expert_weights_and_state_shard_over_ep() -> None:
    cluster = build_cluster("dgx-h100", gpus=8)
    t1 = stage_terms(QWEN, _plan(8, 1), JOB, cluster)
    t8 = stage_terms(QWEN, _plan(8, 8), JOB, cluster)
    experts_per_layer = 128 * 3 * 2048 * 768
    assert t1.block_expert_params == pytest.approx(experts_per_layer)
    assert t8.block_expert_params == pytest.approx(experts_per_layer / 8)
    assert t1.block_params == t8.block_params  # attention, router, norms: not sharded by ep
    b1 = evaluate(QWEN, cluster, JOB, _plan(8, 1))
    b8 = evaluate(QWEN, cluster, JOB, _plan(8, 8))
    assert b8.stage_memory[0].weights_bytes < b1.stage_memory[0].weights_bytes / 4


def test_imbalance_slows_expert_parallel_plans_only() -> None:
    cluster = build_cluster("dgx-h100", gpus=8)
    balanced = Job(seq_len=4096, global_batch=64, expert_imbalance=1.0)
    skewed = Job(seq_len=4096, global_batch=64, expert_imbalance=1.5)
    for ep in (1, 8):
        a = evaluate(QWEN, cluster, balanced, _plan(8, ep)).step_time_s
        b = evaluate(QWEN, cluster, skewed, _plan(8, ep)).step_time_s
        assert (b > a) if ep > 1 else (b == pytest.approx(a))


def test_moe_rules_name_the_knob() -> None:
    cluster = build_cluster("dgx-h100", gpus=8)
    with pytest.raises(ValueError, match="plan.ep=3 must divide the model's 128 experts"):
        evaluate(QWEN, cluster, JOB, _plan(8, 3))
    with pytest.raises(ValueError, match="must divide dp\\*cp"):
        evaluate(QWEN, cluster, JOB, _plan(4, 8, pp=2))
    llama = build_graph(preset("llama3-8b"))
    with pytest.raises(ValueError, match="needs a mixture-of-experts model"):
        evaluate(
            llama,
            cluster,
            JOB,
            Plan(dp=8, tp=1, pp=1, ep=2, recompute=(Recompute.NONE,), layers_per_stage=(32,)),
        )
    no_sp = Plan(
        dp=4, tp=2, pp=1, ep=1, sequence_parallel=False, recompute=(Recompute.NONE,), layers_per_stage=(48,)
    )
    with pytest.raises(ValueError, match="sequence_parallel"):
        evaluate(QWEN, cluster, JOB, no_sp)


def test_dense_first_layers_cost_as_dense_where_they_are() -> None:
    spec = ModelSpec(
        name="m",
        num_layers=8,
        hidden=1024,
        ffn_hidden=4096,
        num_heads=8,
        num_kv_heads=8,
        vocab=1000,
        num_experts=16,
        top_k=2,
        moe_ffn_hidden=512,
        first_dense_layers=2,
    )
    all_moe = replace(spec, first_dense_layers=0)
    cluster = build_cluster("dgx-h100", gpus=8)
    job = Job(seq_len=2048, global_batch=16)
    plan = Plan(dp=8, tp=1, pp=1, ep=4, recompute=(Recompute.NONE,), layers_per_stage=(8,))
    g, g_moe = build_graph(spec), build_graph(all_moe)
    t, t_moe = stage_terms(g, plan, job, cluster), stage_terms(g_moe, plan, job, cluster)
    # pp = 1: the two dense layers cost as dense: expert params of 6 MoE layers, dense FFNs of 2
    experts = 16 * 3 * 1024 * 512 / 4
    counts = t.stage_counts()
    assert counts == ((2, 6),)  # kind 0 dense (blocks 0-1), kind 1 MoE
    params, expert_params = t.held_params(0, counts[0])
    assert expert_params == pytest.approx(6 * experts)
    assert params - t_moe.held_params(0, 8)[0] == pytest.approx(
        2 * (3 * 1024 * 4096 - 1024 * 16)
    )  # dense FFN in, router out
    assert evaluate(g, cluster, job, plan).step_time_s < evaluate(g_moe, cluster, job, plan).step_time_s
    # pp = 2: each stage holds exactly its layers: (1, 7) puts the second dense layer on stage 1
    plan2 = Plan(dp=4, tp=1, pp=2, ep=4, recompute=(Recompute.NONE,) * 2, layers_per_stage=(1, 7))
    t2 = stage_terms(g, plan2, job, cluster)
    assert t2.stage_counts() == ((1, 0), (1, 6))
    assert t2.held_params(0, (1, 0))[1] == pytest.approx(0.0)
    assert t2.held_params(1, (1, 6))[1] == pytest.approx(6 * experts)
    with pytest.raises(ValueError, match="per-kind counts"):
        t2.stage_time_s(1, 7, Recompute.NONE)


def test_expert_tp_one_keeps_whole_experts_and_replicates_them_over_tp() -> None:
    cluster = build_cluster("dgx-h100", nodes=2)  # 16 GPUs: tp 2 x dp 8
    sharded = _plan(8, 4, tp=2)  # etp unset = tp
    whole = _plan(8, 4, tp=2, etp=1)
    assert sharded.expert_tp == 2 and whole.expert_tp == 1
    a = stage_terms(QWEN, sharded, JOB, cluster)
    b = stage_terms(QWEN, whole, JOB, cluster)
    experts_per_layer = 128 * 3 * 2048 * 768
    assert a.block_expert_params == pytest.approx(experts_per_layer / (4 * 2))  # / (ep x etp)
    assert b.block_expert_params == pytest.approx(experts_per_layer / 4)
    assert a.block_params == b.block_params  # attention and router: TP-sharded either way
    # expert-data-parallel group: dp*cp/ep * tp/etp ranks hold the same experts
    assert expert_shard_degree(sharded) == 2 and expert_shard_degree(whole) == 4
    assert expert_dp_span(cluster, whole).size == 4


def test_expert_tp_one_drops_the_routed_tp_collectives() -> None:
    # moe_tp_collectives: top_k * imbalance pairs (+1 shared) with etp = tp, only the shared one
    # (none for Qwen3) with etp = 1
    from paraplan.cost.ep import moe_tp_collectives

    assert moe_tp_collectives(8, False, _plan(8, 4, tp=2), JOB) == pytest.approx(8.0)
    assert moe_tp_collectives(8, False, _plan(8, 4, tp=2, etp=1), JOB) == 0.0
    assert moe_tp_collectives(8, True, _plan(8, 4, tp=2, etp=1), JOB) == 1.0
    cluster = build_cluster("dgx-h100", nodes=2)
    a = stage_terms(QWEN, _plan(8, 4, tp=2), JOB, cluster).block[Recompute.NONE]
    b = stage_terms(QWEN, _plan(8, 4, tp=2, etp=1), JOB, cluster).block[Recompute.NONE]
    assert b.comm_s < a.comm_s
    assert b.compute_s == pytest.approx(a.compute_s)  # same expert FLOPs per device


def test_expert_tp_one_stores_the_same_routed_activations_per_device() -> None:
    # c' = c etp/tp copies of (gathered + tp_elems/etp + sp_elems/etp): etp = 1 keeps c/tp whole
    # copies, etp = tp keeps c copies with the fc1 input all-gathered, so etp = 1 stores less
    from paraplan.cost.ep import expert_stored_bytes

    layer = next(ly for ly in QWEN.block_layers(0) if ly.experts)
    e = layer.experts
    sharded = expert_stored_bytes(e, _plan(8, 4, tp=2), JOB)
    whole = expert_stored_bytes(e, _plan(8, 4, tp=2, etp=1), JOB)
    c = routed_copies_per_device(_plan(8, 4, tp=2), JOB, e.top_k)
    expected = c / 2 * (e.act_gathered_elems + e.act_tp_elems + e.act_sp_elems) * 2
    assert whole == pytest.approx(expected)
    assert whole < sharded


def test_expert_tp_must_be_one_or_tp() -> None:
    cluster = build_cluster("dgx-h100", gpus=8)
    with pytest.raises(ValueError, match="plan.etp=4 must be 1 or tp=2"):
        evaluate(QWEN, cluster, JOB, _plan(4, 4, tp=2, etp=4))
    llama = build_graph(preset("llama3-8b"))
    with pytest.raises(ValueError, match="plan.etp=1 needs a mixture-of-experts model"):
        evaluate(
            llama,
            cluster,
            JOB,
            Plan(dp=4, tp=2, pp=1, etp=1, recompute=(Recompute.NONE,), layers_per_stage=(32,)),
        )


def test_folded_ep_spans_tp_ranks_with_expert_tp_one() -> None:
    """Megatron's MoE parallel folding (docs/frameworks.md Sec. 2.3: expert grid etp*ep*expert_dp
    = tp*cp*dp): with etp = 1 an EP group wider than dp*cp takes the innermost ep ranks of
    tp x cp x dp, e.g. Megatron-Bridge's Qwen3-235B on 256 H100 (tp 2, dp 16, ep 32 per stage)."""
    cluster = build_cluster("dgx-h100", nodes=4)  # 32 GPUs: tp 2 x dp 16
    folded = _plan(16, 32, tp=2, etp=1)
    assert ep_span(cluster, folded).size == 32
    assert ep_span(cluster, folded).fan_in == (8, 4)  # every rank of the 4 nodes
    assert expert_shard_degree(folded) == 1  # no two ranks hold the same experts
    t = stage_terms(QWEN, folded, JOB, cluster)
    assert t.block_expert_params == pytest.approx(128 * 3 * 2048 * 768 / 32)
    # each rank dispatches its own n/tp sequence-parallel tokens (top_k copies of h, 2 B)
    c = ep_layer_comm(2048, 8, folded, JOB, cluster)
    expected = alltoall_s(ep_span(cluster, folded), 4096 / 2 * 8 * 2048 * 2)
    assert c.forward_s == pytest.approx(2 * expected)
    # ep = 16 still fits in dp: no folding, the tp ranks replicate the experts as before
    assert ep_span(cluster, _plan(16, 16, tp=2, etp=1)).size == 16
    assert expert_shard_degree(_plan(16, 16, tp=2, etp=1)) == 2
    assert evaluate(QWEN, cluster, JOB, folded).step_time_s > 0


def test_folding_needs_expert_tp_one_and_an_even_split() -> None:
    cluster = build_cluster("dgx-h100", nodes=4)
    with pytest.raises(ValueError, match="must divide dp\\*cp"):  # etp = tp: no folding
        evaluate(QWEN, cluster, JOB, _plan(16, 32, tp=2))
    # ep = 16 of tp 4 x dp 8: all four tp ranks and 4 of the dp ranks, innermost
    assert ep_span(cluster, _plan(8, 16, tp=4, etp=1)).fan_in == (8, 2)
    with pytest.raises(ValueError, match="MoE parallel folding"):  # 64 > the 32 ranks of a stage
        evaluate(QWEN, cluster, JOB, _plan(8, 64, tp=4, etp=1))


def test_fp8_recipes_pay_the_quantisation_padding_of_the_expert_rows() -> None:
    """Issue 22: under an FP8 / FP4 recipe megatron-core pads each local expert's rows before fc1
    and unpads fc2's output (Transformer Engine Fp8Padding / Fp8Unpadding); BF16 does not.
    Expected: the FP8 experts' element-wise time exceeds BF16's by c * etp / tp rows x d x
    (8 + 8) / 3 / 2 elements x 2 B over the HBM rate (c the busiest device's routed copies)."""
    from paraplan.cost.ep import QUANTIZATION_PADDING_ELEMS, expert_forward

    cluster = build_cluster("dgx-b200", gpus=8)
    accel, eff = cluster.accelerator, cluster.efficiency
    experts = QWEN.layer("mlp_0").experts
    assert experts is not None and QUANTIZATION_PADDING_ELEMS == pytest.approx(16 / 6)
    for tp, etp in ((1, 1), (2, 2), (2, 1)):
        plan = _plan(8 // tp, 4, tp=tp, etp=etp)
        bf16 = expert_forward(experts, plan, JOB, accel, eff)
        for precision in (Precision.FP8, Precision.MXFP8, Precision.NVFP4):
            job = replace(JOB, precision=precision)
            low = expert_forward(experts, plan, job, accel, eff)
            rows = routed_copies_per_device(plan, job, experts.top_k) * etp / tp
            extra_s = rows * QWEN.spec.hidden * 16 / 6 * 2 / (accel.hbm_bytes_per_s * eff.hbm)
            assert low.elementwise_s - bf16.elementwise_s == pytest.approx(extra_s)
