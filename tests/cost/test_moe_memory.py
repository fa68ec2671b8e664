"""The MoE software state's memory (cost/moe_memory.py; issue 22 item 1, issue 24 item 3)."""

from __future__ import annotations

from math import ceil

from paraplan.cost import CudaGraphs, MoEDispatcher, Precision
from paraplan.cost.comm import GroupSpan
from paraplan.cost.moe_memory import (
    EP_BUFFER_ALIGN_BYTES,
    EP_CHANNEL_SLACK_TOKENS,
    dispatcher_buffer_bytes,
    graph_buffer_bytes_per_layer,
)
from paraplan.hardware import Tier


def _span(g: int, n: int) -> GroupSpan:
    tier = Tier(name="t", domain_devices=8, per_gpu_bytes_per_s=1e11, alpha_s=1e-6, efficiency=1.0)
    return GroupSpan((tier, tier), (g, n))


def test_nccl_dispatchers_hold_no_buffer_of_their_own() -> None:
    for d in (MoEDispatcher.ALLTOALL, MoEDispatcher.ALLGATHER):
        assert dispatcher_buffer_bytes(d, 4096, 7168, 8, _span(8, 8), Precision.BF16) == 0.0


def test_intranode_deepep_buffer_is_every_rank_s_tokens_once() -> None:
    # direct mode: dispatch = g T b_d, b_d = align64(align32(2h) + align32(k*8 + (1+k)*4))
    h, k, t, g = 2048, 8, 4096, 8
    b_d = ceil((2 * h + ceil((k * 8 + (1 + k) * 4) / 32) * 32) / 64) * 64
    expected = ceil(g * t * b_d / EP_BUFFER_ALIGN_BYTES) * EP_BUFFER_ALIGN_BYTES
    got = dispatcher_buffer_bytes(MoEDispatcher.DEEPEP, t, h, k, _span(g, 1), Precision.BF16)
    assert got == expected


def test_internode_buffer_grows_with_nodes_and_tokens() -> None:
    # hybrid mode: dispatch g N T b_d + T b_d + N (T + C) b_d; combine min(g, k) N T b_c +
    # min(N, k) T b_c + N (T + C) b_c; the larger of the two
    h, k, t = 7168, 8, 4096
    b_d = ceil((2 * h + ceil((k * 8 + (1 + k) * 4) / 32) * 32) / 64) * 64
    b_c = ceil((2 * h + ceil(k * 8 / 32) * 32) / 64) * 64
    dispatch = 8 * 8 * t * b_d + t * b_d + 8 * (t + EP_CHANNEL_SLACK_TOKENS) * b_d
    combine = 8 * 8 * t * b_c + 8 * t * b_c + 8 * (t + EP_CHANNEL_SLACK_TOKENS) * b_c
    raw = max(dispatch, combine)
    got = dispatcher_buffer_bytes(MoEDispatcher.HYBRIDEP, t, h, k, _span(8, 8), Precision.BF16)
    assert got == ceil(raw / EP_BUFFER_ALIGN_BYTES) * EP_BUFFER_ALIGN_BYTES
    assert got > 3e9  # DeepSeek-V3's hidden at EP64: gigabytes, a real trade against speed
    half = dispatcher_buffer_bytes(MoEDispatcher.HYBRIDEP, t / 2, h, k, _span(8, 8), Precision.BF16)
    assert half < got
    one_node = dispatcher_buffer_bytes(MoEDispatcher.HYBRIDEP, t, h, k, _span(8, 1), Precision.BF16)
    assert one_node < got


def test_fp8_dispatch_shrinks_the_buffer() -> None:
    # one node, top-2: the dispatch side (g T b_d) outweighs the combine side (2 T b_c)
    bf16 = dispatcher_buffer_bytes(MoEDispatcher.DEEPEP, 4096, 7168, 2, _span(8, 1), Precision.BF16)
    fp8 = dispatcher_buffer_bytes(MoEDispatcher.DEEPEP, 4096, 7168, 2, _span(8, 1), Precision.FP8_BLOCKWISE)
    assert fp8 < 0.6 * bf16


def test_graph_buffers_grow_with_the_captured_scope() -> None:
    n, h = 4096, 2048
    none, partial, full = (graph_buffer_bytes_per_layer(g, n, h) for g in CudaGraphs)
    assert none == 0.0
    assert partial == 3 * n * h * 2  # attention in/out and the router's input, BF16
    assert none < partial < full
    # the Bridge guide's "a few gigabytes" at pp 1: Qwen3-30B-A3B, 48 layers
    assert 1e9 < 48 * partial < 5e9


def test_deepep_and_graphs_raise_a_moe_plan_s_peak_but_not_its_allocated_buffer() -> None:
    from paraplan.cost import Job, Plan, Recompute, evaluate
    from paraplan.graph import build_graph, preset
    from paraplan.hardware import build_cluster

    graph = build_graph(preset("qwen3-30b-a3b"))
    cluster = build_cluster("dgx-h100", gpus=16)
    job = Job(seq_len=4096, global_batch=64)
    base = Plan(
        dp=16,
        tp=1,
        pp=1,
        ep=16,
        micro_batch=1,
        recompute=(Recompute.SELECTIVE,),
        layers_per_stage=(48,),
        zero=1,
    )
    plain = evaluate(graph, cluster, job, base)
    from dataclasses import replace

    deepep = evaluate(graph, cluster, job, replace(base, moe_dispatcher=MoEDispatcher.DEEPEP))
    graphs = evaluate(graph, cluster, job, replace(base, cuda_graphs=CudaGraphs.PARTIAL))
    assert deepep.peak_memory_bytes > plain.peak_memory_bytes
    assert (
        deepep.stage_memory[0].allocated_bytes == plain.stage_memory[0].allocated_bytes
    )  # outside torch's allocator
    assert graphs.stage_memory[0].allocated_bytes > plain.stage_memory[0].allocated_bytes
