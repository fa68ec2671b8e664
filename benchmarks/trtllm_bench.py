"""The batch limits ``trtllm-bench`` picks for a throughput run (a mapping rule of the serving rows).

TensorRT-LLM's performance overview tables (v0.17 and v1.0; benchmarks/data/README.md, "Serving
runs") are measured with ``trtllm-bench throughput``, which sets ``max_batch_size`` and
``max_num_tokens`` itself from the dataset's mean ISL / OSL when the command line gives neither
(the v0.17 rows' notes: "engine built by trtllm-bench heuristics from dataset stats"). The heuristic
is ``calc_engine_setting`` and ``finetune_setting`` of tensorrt_llm/bench/build/tuning.py, which
``trtllm-bench throughput`` also calls for the PyTorch backend (bench/benchmark/utils/general.py
``get_settings``). **Cited from memory of those files** (TensorRT-LLM 0.17-1.0): PyPI's
tensorrt-llm is a stub sdist without the source and NVIDIA's index is out of reach here (checked
2026-12-02), so the constants below (the 0.95 KV share, the 4,096-request and 32,768-token caps,
the rounding steps, the 2,048-token floor) are what that memory says, not a reading of the file:

    gb_per_token = 2 x layers x max(tp, kv_heads) x head_dim x kv_bytes / 2^30
    kv_requests  = (tp pp x GPU GiB - params x weight_bytes / 2^30) x 0.95 / gb_per_token / (isl + osl)
    raw_bs       = min(kv_requests, 4096) / pp
    raw_tokens   = min(raw_bs (1 + isl / osl), 32768)
    max_batch_size = 32 ceil(raw_bs / 32) (>= 1) below 256, 128 ceil(raw_bs / 128) below 1,024,
                     else 256 ceil(raw_bs / 256)
    max_num_tokens = max(2048, 256 ceil(raw_tokens / 256)) below 4,096, 512 ceil(.. / 512) below
                     8,192, else 1024 ceil(raw_tokens / 1024)

So a decode-heavy run (ISL 128, OSL 2,048) gets 2,048-token steps, a small activation reserve and
thus more KV cache than the library defaults (8,192 tokens) leave; a prefill-heavy one (2,048 /
128) gets steps of up to 32,768 tokens. ``max_batch_size`` is per pipeline micro-batch (the
division by pp), so a worker holds pp x max_batch_size sequences in flight.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["BenchLimits", "trtllm_bench_limits", "WEIGHT_BYTES", "KV_SHARE"]

WEIGHT_BYTES = {"fp8": 1.0, "nvfp4": 0.5, "mxfp4": 0.5, "int4": 0.5}
"""Bytes per parameter in the heuristic's engine size (its BYTES_PER_ELEM: FP8 1, FP4 0.5, else 2)."""

KV_SHARE = 0.95
"""The heuristic's share of the memory left after the weights that the KV cache may take."""


@dataclass(frozen=True)
class BenchLimits:
    """What trtllm-bench sets: ``max_batch_size`` (per micro-batch) and ``max_num_tokens`` (per step)."""

    max_batch_size: int
    max_num_tokens: int


def _round_batch(raw_bs: float) -> int:
    if raw_bs < 256:
        return max(1, 32 * math.ceil(raw_bs / 32))
    if raw_bs < 1024:
        return 128 * math.ceil(raw_bs / 128)
    return 256 * math.ceil(raw_bs / 256)


def _round_tokens(raw_tokens: float) -> int:
    if raw_tokens < 4096:
        return max(2048, 256 * math.ceil(raw_tokens / 256))
    if raw_tokens < 8192:
        return 512 * math.ceil(raw_tokens / 512)
    return 1024 * math.ceil(raw_tokens / 1024)


def trtllm_bench_limits(
    *,
    params: float,
    layers: int,
    kv_heads: int,
    head_dim: int,
    tp: int,
    pp: int,
    gpu_GiB: float,
    weights_precision: str,
    kv_precision: str,
    isl: float,
    osl: float,
) -> BenchLimits:
    """The limits trtllm-bench derives from the dataset (module docstring; cited from memory).
    ``params``: the model's parameter count; ``gpu_GiB``: one GPU's memory."""
    if isl <= 0 or osl <= 0 or tp < 1 or pp < 1:
        raise ValueError(f"isl={isl}, osl={osl} must be positive and tp={tp}, pp={pp} at least 1")
    kv_bytes = 1.0 if kv_precision == "fp8" else 2.0
    gb_per_token = 2.0 * layers * max(tp, kv_heads) * head_dim * kv_bytes / 2**30
    engine_GiB = params * WEIGHT_BYTES.get(weights_precision, 2.0) / 2**30
    available_GiB = max(0.0, tp * pp * gpu_GiB - engine_GiB)
    requests = available_GiB * KV_SHARE / gb_per_token / (isl + osl)
    raw_bs = min(requests, 4096.0) / pp
    raw_tokens = min(raw_bs * (1.0 + isl / osl), 32768.0)
    return BenchLimits(_round_batch(raw_bs), _round_tokens(raw_tokens))
