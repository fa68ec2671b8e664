"""Each serving engine's KV-cache memory knob from the per-GPU memory the cost model predicts
(issue 23: "the KV-cache memory fraction means a different thing in each engine: convert it").

Sources: the vLLM 0.33.0 and SGLang 0.5.23 packages (files named below), TensorRT-LLM 1.2.1 docs.
KV-cache memory knobs (hardware/data/serving.yaml holds each engine's rule; the cost model sizes
the cache with it, cost/serving_memory.py ``memory_budget``; ``kv_fraction`` below is its inverse):
- vLLM ``--gpu-memory-utilization`` u: u x total memory = weights + peak activations + non-torch
  memory + CUDA graphs + KV (``vllm/v1/worker/gpu_worker.py`` ``determine_available_memory``;
  ``request_memory`` = ceil(total x u); CUDA graph memory counted by default since 0.21,
  ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``), so u = (weights + activations + buffers + KV) / total.
- SGLang ``--mem-fraction-static`` f: KV = free after weights - pre-load memory x (1 - f)
  (``srt/mem_cache/kv_cache_configurator.py`` ``_profile_available_bytes``): f = (weights + KV) / total.
- TensorRT-LLM ``kv_cache_config.free_gpu_memory_fraction`` g: g x the memory free after weights and
  the activation profiling run (``KvCacheConfig`` docs): g = KV / (total - weights - activations -
  buffers).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import floor

from paraplan.cost.kv import WorkerShape
from paraplan.cost.serving import Engine, ServingPlan, Workload
from paraplan.cost.serving_memory import MemoryBudget, memory_budget
from paraplan.graph import ModelSpec, build_graph
from paraplan.hardware import Cluster
from paraplan.hardware.serving import engine_memory

__all__ = ["FRACTION_DIGITS", "GpuMemory", "kv_fraction", "kv_fractions", "pool_memories"]

ENGINES = ("vllm", "sglang", "trtllm")


@dataclass(frozen=True)
class GpuMemory:
    """Predicted memory of one GPU of a worker (ServingPrediction's per-GPU figures) and the GPU's
    total memory. Units: bytes."""

    weights_bytes: float
    kv_cache_bytes: float
    activation_bytes: float
    buffer_bytes: float
    capacity_bytes: float

    @property
    def used_bytes(self) -> float:
        return self.weights_bytes + self.kv_cache_bytes + self.activation_bytes + self.buffer_bytes


FRACTION_DIGITS = 3
"""Fractions are written with 3 decimals, rounded down: the engine then leaves at most
0.001 x total memory (0.14 GiB on an H200) less KV cache than predicted, never more memory in use."""


def kv_fraction(engine: str, memory: GpuMemory) -> float:
    """``engine``'s KV memory knob that leaves ``memory.kv_cache_bytes`` of KV cache beside the
    predicted weights, activations and buffers (module docstring; the inverse of
    cost/serving_memory.py ``memory_budget`` under hardware/data/serving.yaml's rule):

    - ``total`` (vLLM ``--gpu-memory-utilization``): (weights + activations + buffers + KV) / total;
    - ``static`` (SGLang ``--mem-fraction-static``): (weights + KV) / total;
    - ``free`` (TensorRT-LLM ``free_gpu_memory_fraction``): KV / (total - weights - activations - buffers).

    Rounded down to FRACTION_DIGITS. ValueError naming the memory when the prediction leaves no KV
    cache or does not fit the GPU.
    """
    cap = memory.capacity_bytes
    gib = 2**30
    if memory.kv_cache_bytes <= 0:
        raise ValueError(
            f"predicted kv_cache={memory.kv_cache_bytes / gib:.2f} GiB per GPU: the plan leaves no KV "
            "cache, so no engine memory fraction can be written"
        )
    if memory.used_bytes > cap:
        raise ValueError(
            f"predicted memory per GPU {memory.used_bytes / gib:.2f} GiB (weights "
            f"{memory.weights_bytes / gib:.2f} + KV {memory.kv_cache_bytes / gib:.2f} + activations "
            f"{memory.activation_bytes / gib:.2f} + buffers {memory.buffer_bytes / gib:.2f}) exceeds the "
            f"GPU's {cap / gib:.2f} GiB"
        )
    rule = engine_memory(engine).kv_fraction_of
    if rule == "total":
        value = memory.used_bytes / cap
    elif rule == "static":
        value = (memory.weights_bytes + memory.kv_cache_bytes) / cap
    else:
        free = cap - memory.weights_bytes - memory.activation_bytes - memory.buffer_bytes
        value = memory.kv_cache_bytes / free
    scale = 10**FRACTION_DIGITS
    return floor(value * scale + 1e-9) / scale


def kv_fractions(memory: GpuMemory) -> dict[str, float]:
    """Every engine's knob for the same predicted memory (the KV bytes are what stays fixed)."""
    return {e: kv_fraction(e, memory) for e in ENGINES}


def _of(b: MemoryBudget) -> GpuMemory:
    return GpuMemory(b.weights_bytes, b.kv_cache_bytes, b.activation_bytes, b.buffer_bytes, b.capacity_bytes)


def pool_memories(
    spec: ModelSpec, cluster: Cluster, plan: ServingPlan, workload: Workload, engine: Engine
) -> dict[str, GpuMemory]:
    """Per-GPU memory of each kind of worker of ``plan``, sized as the cost model sizes it
    (cost/serving_memory.py ``memory_budget`` under the engine's rule): ``aggregated`` (steps of
    max_num_tokens, max_batch sequences), or ``prefill`` (prompt steps of max_num_tokens, one
    sampled token) and ``decode`` (decode-only steps of one token per attention-DP rank, max_batch
    sequences), the arguments cost/serving_disagg.py ``disaggregated`` uses. ServingPrediction
    carries only the decode pool's memory; the prefill pool's differs with its shape."""
    rule = engine_memory(engine.name)
    if engine.kv_fraction is not None:
        rule = replace(rule, kv_fraction=engine.kv_fraction)
    graph = build_graph(spec)

    def budget(tp: int, pp: int, ep: int, dp: bool, tokens: int | None, batch: int) -> GpuMemory:
        shape = WorkerShape(tp=tp, pp=pp, ep=ep, dp_attention=dp)
        step = shape.attn_dp if tokens is None else tokens
        return _of(memory_budget(graph, cluster, shape, workload, rule, step, batch))

    if plan.mode == "aggregated":
        return {
            "aggregated": budget(
                plan.tp, plan.pp, plan.ep, plan.dp_attention, plan.max_num_tokens, plan.max_batch
            )
        }
    if plan.prefill is None or plan.decode is None:
        raise ValueError("plan.mode='disaggregated' needs both plan.prefill and plan.decode")
    p, d = plan.prefill, plan.decode
    return {
        "prefill": budget(p.tp, p.pp, p.ep, p.dp_attention, plan.max_num_tokens, 1),
        "decode": budget(d.tp, d.pp, d.ep, d.dp_attention, None, plan.max_batch),
    }
