"""Context parallel: the p2p ring and the all-gather K/V exchange (plan.cp_comm)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from paraplan.cost import CPComm, Job, Plan, Recompute, evaluate
from paraplan.cost.comm import allgather_s, group_span, p2p_s, reduce_scatter_s
from paraplan.cost.compute import AttentionShape, LayerTime, attention_shape, layer_forward
from paraplan.cost.cp import cp_layer_comm, kv_chunk_bytes
from paraplan.cost.memory_reserve import ALLOCATOR_FRAGMENTATION
from paraplan.cost.plan import Axis
from paraplan.cost.validity import check_plan
from paraplan.graph import build_graph, preset
from paraplan.hardware import build_cluster

LLAMA = build_graph(preset("llama3-8b"))
KV_DIM = LLAMA.spec.kv_dim
JOB = Job(seq_len=131072, global_batch=8)


def _plan(cp: int, cp_comm: CPComm = CPComm.P2P, tp: int = 1, dp: int = 1) -> Plan:
    return Plan(
        dp=dp,
        tp=tp,
        pp=1,
        cp=cp,
        cp_comm=cp_comm,
        sequence_parallel=tp > 1,
        recompute=(Recompute.FULL,),
        layers_per_stage=(LLAMA.spec.num_layers,),
    )


def test_kv_chunk_is_the_local_tokens_k_and_v() -> None:
    plan = _plan(8, tp=2)
    # n = micro_batch * seq / cp tokens, K and V of kv_dim / tp elements each, 2 B
    assert kv_chunk_bytes(KV_DIM, plan, JOB) == pytest.approx(131072 / 8 * 2 * KV_DIM / 2 * 2)


def test_p2p_ring_is_cp_minus_one_steps_hidden_behind_attention() -> None:
    cluster = build_cluster("dgx-h100", nodes=2)
    plan = _plan(16)
    span = group_span(cluster, plan, Axis.CP)
    chunk = kv_chunk_bytes(KV_DIM, plan, JOB)
    fwd = 15 * p2p_s(span.outermost, chunk)  # (cp - 1) (alpha + c / B)
    long_attention = LayerTime(0.0, 10 * 16 * fwd, 0.0)  # each of the 16 ring steps > all hops
    c = cp_layer_comm(KV_DIM, long_attention, plan, JOB, cluster)
    assert c.forward_s == pytest.approx(fwd) and c.backward_s == pytest.approx(2 * fwd)
    assert c.exposed_forward_s == 0.0 and c.exposed_backward_s == 0.0 and c.working_bytes == 0.0


def test_each_ring_hop_hides_only_behind_its_own_step() -> None:
    """exposed = (cp-1) max(0, hop - attn/cp) forward, (cp-1) max(0, 2 hop - 2.5 attn/cp)
    backward: a total attention longer than the total ring time still leaves hops exposed when
    each step is shorter than its hop (short chunks)."""
    cluster = build_cluster("dgx-h100", nodes=2)
    plan = _plan(16)
    hop = p2p_s(group_span(cluster, plan, Axis.CP).outermost, kv_chunk_bytes(KV_DIM, plan, JOB))
    attention = LayerTime(0.0, 16 * 0.5 * hop, 0.0)  # step = hop / 2; total 8 hops < 15 hops
    c = cp_layer_comm(KV_DIM, attention, plan, JOB, cluster)
    assert c.exposed_forward_s == pytest.approx(15 * (hop - 0.5 * hop))
    assert c.exposed_backward_s == pytest.approx(15 * (2 * hop - 2.5 * 0.5 * hop))


def test_all_gather_is_exposed_gather_forward_and_gather_plus_reduce_scatter_backward() -> None:
    cluster = build_cluster("dgx-h100", nodes=2)
    plan = _plan(16, CPComm.ALL_GATHER)
    span = group_span(cluster, plan, Axis.CP)
    full = 16 * kv_chunk_bytes(KV_DIM, plan, JOB)
    c = cp_layer_comm(KV_DIM, LayerTime(0.0, 1.0, 0.0), plan, JOB, cluster)
    assert c.forward_s == pytest.approx(allgather_s(span, full))
    assert c.backward_s == pytest.approx(allgather_s(span, full) + reduce_scatter_s(span, full))
    # not overlapped: all of it is exposed however long attention runs
    assert (c.exposed_forward_s, c.exposed_backward_s) == (c.forward_s, c.backward_s)
    assert c.working_bytes == pytest.approx(full)


def test_cp_comm_is_moot_without_context_parallelism() -> None:
    cluster = build_cluster("dgx-h100", gpus=8)
    for mode in CPComm:
        c = cp_layer_comm(KV_DIM, LayerTime(0.0, 1.0, 0.0), _plan(1, mode, dp=8), JOB, cluster)
        assert c.forward_s == c.backward_s == c.working_bytes == 0.0


def test_all_gather_holds_the_gathered_kv_on_top_of_the_ring_plans_memory() -> None:
    cluster = build_cluster("dgx-h100", gpus=8)
    ring, gather = _plan(8), _plan(8, CPComm.ALL_GATHER)
    a = evaluate(LLAMA, cluster, JOB, ring)
    b = evaluate(LLAMA, cluster, JOB, gather)
    extra = b.peak_memory_bytes - a.peak_memory_bytes
    # the gathered K/V buffer (plus the allocator's fragmentation share of it) joins a block's
    # backward working set; the peak takes the larger of that and the loss's (cost/memory.py), so
    # the all-gather costs at most the buffer, and nothing where the loss's peak is the larger
    buffer = 8 * kv_chunk_bytes(KV_DIM, gather, JOB) * (1 + ALLOCATOR_FRAGMENTATION)
    assert -1e-6 * buffer <= extra <= buffer * (1 + 1e-6)


def test_ring_runs_cp_attention_kernels_over_short_chunks_all_gather_one_over_the_sequence() -> None:
    """compute.attention_shape: p2p runs one kernel per ring step over seq/cp keys, all-gather one
    kernel over the gathered seq keys, so the ring's attention is slower (shorter key chunks,
    more kernel overheads) while the GEMMs and element-wise work are the same."""
    cluster = build_cluster("dgx-h100", nodes=2)
    ring, gather = _plan(16), _plan(16, CPComm.ALL_GATHER)
    assert attention_shape(ring, JOB) == AttentionShape(16, 131072 / 16)
    assert attention_shape(gather, JOB) == AttentionShape(1, 131072)
    accel, eff = cluster.accelerator, cluster.efficiency
    attn = next(ly for ly in LLAMA.block_layers(0) if ly.attn_core_flops_per_token_per_seq)
    t_ring = layer_forward(attn, ring, JOB, accel, eff)
    t_gather = layer_forward(attn, gather, JOB, accel, eff)
    assert t_ring.gemm_s == t_gather.gemm_s and t_ring.elementwise_s == t_gather.elementwise_s
    assert t_ring.attention_s > t_gather.attention_s


def test_plan_defaults_to_the_p2p_ring() -> None:
    assert Plan(dp=1, tp=1, pp=1).cp_comm is CPComm.P2P
    check_plan(
        replace(_plan(8, CPComm.ALL_GATHER)), JOB, num_devices=8, num_layers=32, num_heads=32, num_kv_heads=8
    )
