"""Memory of one serving GPU: weights, activations, buffers and the KV cache the engine's rule
leaves (hardware/data/serving.yaml: vLLM's fraction of total memory, SGLang's static fraction,
TensorRT-LLM's fraction of free memory), and how many sequences that cache holds.
Per-token and per-weight sizes are cost/kv.py's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from paraplan.cost.kv import (
    WorkerShape,
    kv_bytes_per_element,
    kv_bytes_per_sequence,
    weight_bytes_per_param,
    weights_bytes_per_gpu,
)
from paraplan.cost.serving_types import Workload
from paraplan.graph import LayerGraph
from paraplan.hardware import Cluster
from paraplan.hardware.serving import EngineMemory

__all__ = ["MemoryBudget", "memory_budget", "activation_bytes", "per_gpu_fields", "PerGpuFields"]


@dataclass(frozen=True, slots=True)
class MemoryBudget:
    """Memory of one GPU of a worker. Units: bytes (sequences: per worker)."""

    weights_bytes: float
    activation_bytes: float
    buffer_bytes: float
    kv_cache_bytes: float
    capacity_bytes: float
    max_sequences: float  # sequences the worker's KV cache holds at the workload's lengths
    kv_cache_tokens: int  # tokens the worker's KV cache holds (full-attention token size)

    @property
    def fits(self) -> bool:
        return self.kv_cache_bytes > 0 and self.max_sequences >= 1.0


class PerGpuFields(TypedDict):
    kv_cache_tokens: int
    weights_bytes: float
    kv_cache_bytes: float
    activation_bytes: float
    buffer_bytes: float


def per_gpu_fields(b: MemoryBudget) -> PerGpuFields:
    """The ServingPrediction fields a budget fills: KV tokens and the per-GPU bytes by part."""
    return PerGpuFields(
        kv_cache_tokens=b.kv_cache_tokens,
        weights_bytes=b.weights_bytes,
        kv_cache_bytes=b.kv_cache_bytes,
        activation_bytes=b.activation_bytes,
        buffer_bytes=b.buffer_bytes,
    )


def activation_bytes(graph: LayerGraph, shape: WorkerShape, tokens: float, sampled: float) -> float:
    """Peak activation memory of one step on one GPU: the step's tokens through the widest
    layer (hidden states, QKV, MLP intermediate; routed copies top_k x the expert width) and the
    fp32 logits of the sampled tokens. Units: bytes. Assumes: the engine's profiling run at
    max_num_tokens sets the peak (vLLM gpu_worker.determine_available_memory)."""
    spec = graph.spec
    rank_tokens = tokens / shape.attn_dp
    dense_tp = 1 if shape.dp_attention else shape.tp
    mlp = 2 * spec.ffn_hidden / dense_tp if spec.ffn_hidden else 0.0
    moe = 2 * spec.top_k * spec.moe_ffn_hidden / shape.moe_tp if spec.is_moe else 0.0
    width = 4 * spec.hidden + max(mlp, moe, (spec.q_dim + 2 * spec.kv_dim) / shape.attn_tp)
    logits = sampled / shape.attn_dp * spec.vocab / dense_tp * 4.0
    return rank_tokens * width * 2.0 + logits


def memory_budget(
    graph: LayerGraph,
    cluster: Cluster,
    shape: WorkerShape,
    workload: Workload,
    engine: EngineMemory,
    max_num_tokens: int,
    max_batch: int,
) -> MemoryBudget:
    """KV budget per GPU under the engine's rule (hardware/data/serving.yaml): ``total``
    frac x HBM - weights - activations - buffers; ``static`` frac x HBM - weights; ``free``
    frac x (HBM - weights - activations - buffers). Units: bytes."""
    hbm = cluster.memory_capacity_bytes
    w = weights_bytes_per_gpu(graph, shape, weight_bytes_per_param(workload.weights_precision))
    a = activation_bytes(graph, shape, float(max_num_tokens), float(max_batch))
    b = engine.buffer_bytes
    f = engine.kv_fraction
    if engine.kv_fraction_of == "total":
        kv = f * hbm - w - a - b
    elif engine.kv_fraction_of == "static":
        kv = min(f * hbm - w, hbm - w - a - b)
    else:
        kv = f * (hbm - w - a - b)
    kv = max(kv, 0.0)
    kv_b = kv_bytes_per_element(workload.kv_precision)
    held = workload.isl + engine.kv_reserved_output * workload.osl
    per_seq = kv_bytes_per_sequence(graph, shape, kv_b, held)
    seqs = kv / per_seq * shape.attn_dp if per_seq > 0 else float(max_batch)
    full = workload.isl + workload.osl
    per_token = kv_bytes_per_sequence(graph, shape, kv_b, full) / full
    tokens = int(kv / per_token * shape.attn_dp) if per_token > 0 else 0
    return MemoryBudget(w, a, b, kv, hbm, seqs, tokens)
