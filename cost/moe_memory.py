"""Device memory of the MoE software state: the dispatcher's communication buffers and the CUDA
graphs' static buffers (issue 22 item 1, issue 24 item 3). The EP overlap's in-flight micro-batch
is cost/pp.py ``in_flight_micro_batches`` (one more chunk's micro-batch under pipelining).

cost/memory.py ``stage_memory_model`` asks this module once per stage (``software_memory``):
the dispatcher buffer is a fixed reserve outside torch's caching allocator, the graph buffers
are allocated bytes per layer and in-flight micro-batch.

**DeepEP / HybridEP buffers.** Megatron-core 0.19.2 builds one buffer per process
(megatron/core/transformer/moe/fused_a2a.py: ``get_buffer`` for the deepep backend from DeepEP's
size hints, ``init_hybrid_ep_buffer`` for hybridep with ``max_num_of_tokens_per_rank`` the
micro-batch's tokens per rank). DeepEP's buffer sizes are read from DeepEP V2's
``EPBuffer.calculate_buffer_size`` (csrc/buffers/ep.hpp, as shipped in the deepinfer-ep 2.5.0
sdist on PyPI: its defaults ``allow_hybrid_mode`` and ``allow_multiple_reduction`` on), whose
hybrid mode is HybridEP's design (receive over RDMA once per node, forward over NVLink), for
``T`` tokens per rank on ``g`` NVLink ranks x ``N`` nodes (N = 1: direct mode), token slots
of ``b_d`` (dispatch: the hidden bytes, FP8 scales, top-k indices and weights, source metadata)
and ``b_c`` (combine: BF16 hidden, top-k) bytes, aligned to 64 B:

    direct   dispatch = g T b_d                    combine = min(g, k) T b_c
    hybrid   dispatch = g N T b_d + T b_d + N (T + C) b_d
             combine  = min(g, k) N T b_c + min(N, k) T b_c + N (T + C) b_c
    buffer   = max(dispatch, combine), rounded up to 2 MiB (C = 1,280 channels' slack)

The buffer is registered NCCL window memory (ncclMemAlloc), outside torch's caching allocator:
it must fit but is not in torch.cuda.max_memory_allocated. The deepep backend of megatron-core
0.19.2 builds DeepEP's legacy ``Buffer`` whose chunked NVL / RDMA buffers do not grow with the
tokens (not installed here to read); the V2 formula above is used for both, an assumption.

**CUDA graphs.** A captured graph keeps its static inputs and outputs allocated in its private
memory pool (torch.cuda.graphs, ``make_graphed_callables``; Transformer Engine's per-layer graphs
keep one set per layer and in-flight micro-batch, transformer_engine/pytorch/graph.py), so each
captured scope adds activation-sized buffers that the eager run frees: GRAPH_STATIC_TENSORS
tensors of n x h BF16 elements per layer and in-flight micro-batch (partial: attention's
input and output and the router's input; full: the whole layer's input, attention output,
MoE input and output). The Megatron-Bridge performance guide quotes "a few gigabytes" and
"PP > 1 may consume over 10GB" (docs memory.md Sec. 2); Qwen3-30B-A3B at pp 1 (4,096 tokens,
h 2,048, 48 layers): 3 x 16.8 MB x 48 = 2.4 GB, and x 8 in-flight micro-batches past 10 GB.
The counts are an assumption sized to those quotes, not fitted.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil, prod

from paraplan.cost.comm import GroupSpan
from paraplan.cost.compute import ACTIVATION_BYTES, tokens_per_device
from paraplan.cost.dispatch import DEDUPLICATING, token_bytes
from paraplan.cost.plan import CudaGraphs, Job, Layout, MoEDispatcher, Precision
from paraplan.graph import ModelSpec
from paraplan.hardware import Cluster

__all__ = [
    "SoftwareMemory",
    "software_memory",
    "dispatcher_buffer_bytes",
    "graph_buffer_bytes_per_layer",
    "GRAPH_STATIC_TENSORS",
    "EP_SLOT_ALIGN_BYTES",
    "EP_BUFFER_ALIGN_BYTES",
    "EP_CHANNEL_SLACK_TOKENS",
]

EP_SLOT_ALIGN_BYTES = 64  # kNumRDMAAlignmentBytes: a token slot's alignment (DeepEP compiled.cuh)
EP_FIELD_ALIGN_BYTES = 32  # kNumTMAAlignmentBytes: each field of a slot (DeepEP compiled.cuh)
EP_BUFFER_ALIGN_BYTES = 2 * 1024 * 1024  # kNumAllocationAlignmentBytes (DeepEP compiled.cuh)
EP_CHANNEL_SLACK_TOKENS = 1280  # kNumMaxChannels: scale-out slack per rank (DeepEP workspace.cuh)
EP_INDEX_BYTES = 4  # top-k index (int32) and weight (float) per routed copy (DeepEP token.cuh)
GRAPH_STATIC_TENSORS = {CudaGraphs.NONE: 0, CudaGraphs.PARTIAL: 3, CudaGraphs.FULL: 4}
"""n x h BF16 static buffers per layer and in-flight micro-batch (module docstring)."""


@dataclass(frozen=True, slots=True)
class SoftwareMemory:
    """What the MoE software state adds to one device of a stage: ``reserve_bytes`` outside
    torch's allocator (the dispatcher's buffer), ``per_layer_bytes`` allocated per layer and
    in-flight micro-batch (the CUDA graphs' static buffers)."""

    reserve_bytes: float = 0.0
    per_layer_bytes: float = 0.0


def _align(n: float, to: int) -> float:
    return ceil(n / to) * to


def _slot_bytes(hidden_bytes: float, top_k: int, metadata: bool) -> float:
    """One token slot: hidden bytes, top-k indices and weights, and with ``metadata`` the source
    rank and token indices (DeepEP token.cuh TokenLayout), fields 32 B and the slot 64 B aligned."""
    meta = top_k * 2 * EP_INDEX_BYTES + ((1 + top_k) * EP_INDEX_BYTES if metadata else 0)
    fields = _align(hidden_bytes, EP_FIELD_ALIGN_BYTES) + _align(meta, EP_FIELD_ALIGN_BYTES)
    return _align(fields, EP_SLOT_ALIGN_BYTES)


def dispatcher_buffer_bytes(
    dispatcher: MoEDispatcher,
    tokens_per_rank: float,
    hidden: int,
    top_k: int,
    span: GroupSpan,
    precision: Precision,
) -> float:
    """DeepEP / HybridEP buffer of one rank (module docstring formula); 0 for NCCL's all-to-all
    and all-gather (their buffers are torch tensors the activations already count) and for an
    EP group of one rank.

    Source: DeepEP V2 EPBuffer.calculate_buffer_size (csrc/buffers/ep.hpp, deepinfer-ep 2.5.0).
    Units: bytes."""
    if dispatcher not in DEDUPLICATING or span.size <= 1 or top_k <= 0:
        return 0.0
    t = ceil(tokens_per_rank)
    g = span.fan_in[0]
    n = prod(span.fan_in[1:])
    d_hidden, c_hidden = token_bytes(dispatcher, hidden, precision)
    b_d = _slot_bytes(d_hidden, top_k, metadata=True)
    b_c = _slot_bytes(c_hidden, top_k, metadata=False)
    if n == 1:
        dispatch = g * t * b_d
        combine = min(g, top_k) * t * b_c
    else:
        slack = n * (t + EP_CHANNEL_SLACK_TOKENS)
        dispatch = g * n * t * b_d + t * b_d + slack * b_d
        combine = min(g, top_k) * n * t * b_c + min(n, top_k) * t * b_c + slack * b_c
    return _align(max(dispatch, combine), EP_BUFFER_ALIGN_BYTES)


def graph_buffer_bytes_per_layer(graphs: CudaGraphs, tokens_per_device: float, hidden: int) -> float:
    """CUDA graphs' static buffers of one layer and one in-flight micro-batch.

    Formula: GRAPH_STATIC_TENSORS[graphs] x n x h x 2 B, n the tokens a device holds (module
    docstring). Source: torch.cuda.graphs / Transformer Engine graph.py static buffers; sized to
    the Megatron-Bridge performance guide's quotes. Units: bytes."""
    return GRAPH_STATIC_TENSORS[graphs] * tokens_per_device * hidden * ACTIVATION_BYTES


def software_memory(
    spec: ModelSpec, plan: Layout, job: Job, cluster: Cluster, ep_span: GroupSpan | None
) -> SoftwareMemory:
    """What ``plan``'s software state adds to one device (SoftwareMemory): the dispatcher buffer
    for the micro-batch's tokens per rank of a mixture-of-experts model (n / tp, as the dispatcher
    sends them), the CUDA graphs' static buffers on the tokens a device holds (n / tp under
    sequence parallelism). Nothing on a TPU (XLA compiles its collectives and has no CUDA graphs).
    Units: bytes."""
    if cluster.accelerator.is_tpu:
        return SoftwareMemory()
    tokens = tokens_per_device(plan, job)
    reserve = 0.0
    if spec.is_moe and ep_span is not None:
        reserve = dispatcher_buffer_bytes(
            plan.moe_dispatcher, tokens / plan.tp, spec.hidden, spec.top_k, ep_span, job.precision
        )
    held = tokens / plan.tp if plan.sequence_parallel else tokens
    return SoftwareMemory(reserve, graph_buffer_bytes_per_layer(plan.cuda_graphs, held, spec.hidden))
