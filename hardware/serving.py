"""Serving constants: each engine's KV-memory rule and the fitted step-time parameters
(``data/serving.yaml``; sources and fits in its comments). Units are converted here (GiB -> bytes,
ms/us -> s); the formulas that use them are cost/serving*.py's."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

__all__ = [
    "EngineMemory",
    "ServingFit",
    "engine_memory",
    "serving_fit",
    "engine_names",
    "is_cpp_runtime",
    "is_serial_pp_host",
    "is_prefill_first",
    "gemm_priors",
    "gemm_kernel_rates",
    "serving_priors",
    "is_grace_hosted",
    "FIT_NAMES",
]

GIB_BYTES = 2**30
FIT_NAMES = (
    "step_overhead_ms",
    "per_sequence_us",
    "per_sequence_cpp_us",
    "gemm_fraction",
    "graph_kernel_overhead_us",
    "moe_decode_imbalance",
    "moe_gemm_efficiency",
    "closed_loop_burst",
    "ttft_overhead_ms",
    "grace_host_factor",
)
"""The fitted parameters of ``data/serving.yaml`` (file units)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineMemory:
    """How an engine sizes its KV cache. ``kv_fraction_of``: ``total`` (vLLM: the fraction of
    device memory holds weights, activations and KV), ``static`` (SGLang: weights and KV),
    ``free`` (TensorRT-LLM: the fraction of what weights and activations leave free)."""

    name: str
    kv_fraction: float
    kv_fraction_of: str
    kv_reserved_output: float  # share of the output tokens a running sequence holds
    buffer_bytes: float  # CUDA graphs, NCCL and context outside the fraction


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingFit:
    """The fitted serving parameters, in seconds (imbalance, efficiency and burst share:
    dimensionless). data/serving.yaml says what each stands for."""

    step_overhead_s: float
    per_sequence_s: float
    graph_kernel_overhead_s: float
    moe_decode_imbalance: float
    moe_gemm_efficiency: float = 1.0
    closed_loop_burst: float = 1.0
    ttft_overhead_s: float = 0.0
    per_sequence_cpp_s: float = 0.0
    gemm_fraction: float = 1.0
    grace_host_factor: float = 1.0

    @classmethod
    def from_values(cls, values: dict[str, float]) -> ServingFit:
        """From parameters named as in the data file (FIT_NAMES, file units)."""
        return cls(
            step_overhead_s=float(values["step_overhead_ms"]) * 1e-3,
            per_sequence_s=float(values["per_sequence_us"]) * 1e-6,
            graph_kernel_overhead_s=float(values["graph_kernel_overhead_us"]) * 1e-6,
            moe_decode_imbalance=float(values["moe_decode_imbalance"]),
            moe_gemm_efficiency=float(values["moe_gemm_efficiency"]),
            closed_loop_burst=float(values["closed_loop_burst"]),
            ttft_overhead_s=float(values["ttft_overhead_ms"]) * 1e-3,
            per_sequence_cpp_s=float(values["per_sequence_cpp_us"]) * 1e-6,
            gemm_fraction=float(values["gemm_fraction"]),
            grace_host_factor=float(values.get("grace_host_factor", 1.0)),
        )

    def values(self) -> dict[str, float]:
        """The parameters in file units (inverse of from_values)."""
        return {
            "step_overhead_ms": self.step_overhead_s * 1e3,
            "per_sequence_us": self.per_sequence_s * 1e6,
            "graph_kernel_overhead_us": self.graph_kernel_overhead_s * 1e6,
            "moe_decode_imbalance": self.moe_decode_imbalance,
            "moe_gemm_efficiency": self.moe_gemm_efficiency,
            "closed_loop_burst": self.closed_loop_burst,
            "ttft_overhead_ms": self.ttft_overhead_s * 1e3,
            "per_sequence_cpp_us": self.per_sequence_cpp_s * 1e6,
            "gemm_fraction": self.gemm_fraction,
            "grace_host_factor": self.grace_host_factor,
        }


@cache
def _raw() -> dict[str, Any]:
    text = resources.files("paraplan.hardware").joinpath("data/serving.yaml").read_text()
    return yaml.safe_load(text)


def engine_names() -> list[str]:
    return sorted(_raw()["engines"])


def engine_memory(name: str) -> EngineMemory:
    """The KV-memory rule of engine ``name``; ValueError naming engine.name if unknown."""
    raw = _raw()["engines"]
    if name not in raw:
        raise ValueError(
            f"engine.name={name!r} is not a known engine; choose one of {', '.join(sorted(raw))}"
        )
    e = raw[name]
    return EngineMemory(
        name=name,
        kv_fraction=float(e["kv_fraction"]),
        kv_fraction_of=str(e["kv_fraction_of"]),
        kv_reserved_output=float(e["kv_reserved_output"]),
        buffer_bytes=float(e["buffer_GiB"]) * GIB_BYTES,
    )


def serving_fit() -> ServingFit:
    """The fitted step-time parameters of the data file."""
    return ServingFit.from_values({k: float(v) for k, v in _raw()["fitted"].items() if k in FIT_NAMES})


def is_cpp_runtime(name: str, version: str | None) -> bool:
    """Whether the engine schedules in C++: TensorRT-LLM before 1.0 (the TensorRT-engine
    runtime's batch manager, gptManagerBenchmark / Triton tensorrtllm_backend); 1.0 made the
    Python PyTorch backend the default (TensorRT-LLM 1.0 release notes). vLLM and SGLang
    schedule in Python. A version that does not parse counts as current (Python)."""
    if name != "trtllm" or not version:
        return False
    head = version.strip().split()[0]
    try:
        major = int(head.split(".")[0])
    except ValueError:
        return False
    return major < 1


def is_serial_pp_host(name: str, version: str | None) -> bool:
    """Whether the engine's host work shows in full in a pipeline-parallel step: TensorRT-LLM's
    PyTorch executor (1.0 and later) runs ``_executor_loop_pp`` when pp > 1 and its overlap
    scheduler (``_executor_loop_overlap``, which prepares step i + 1 while step i runs) only
    without pipeline parallelism (tensorrt_llm/_torch/pyexecutor/py_executor.py, PyExecutor's
    event-loop choice). The C++ runtime before 1.0 and the other engines keep their overlap.
    UNCONFIRMED: cited from memory of that file, not read here; PyPI's tensorrt-llm 1.2.1 is a
    10 kB sdist stub without the source, the wheel is on NVIDIA's index, out of reach (checked
    2026-12-02). The calibration rows support the effect (docs/serving_model.md Sec. 1)."""
    return name == "trtllm" and not is_cpp_runtime(name, version)


def is_prefill_first(name: str) -> bool:
    """Whether the engine runs a waiting prompt batch before its running decode batch instead of
    mixing the two in one step: SGLang's scheduler (``Scheduler.get_next_batch_to_run``, "Run
    prefill first if possible": a new prefill batch is returned before the running batch
    decodes) with ``--enable-mixed-chunk`` off by default (server_args.py
    ``enable_mixed_chunk: bool = False``; both read in the sglang 0.5.9 wheel from PyPI,
    2026-12-02). vLLM's chunked prefill and TensorRT-LLM's in-flight batching put the prompts into
    the decode steps. So a closed loop's synchronised wave on SGLang decodes only after its last
    prompt, finishes together and comes back together: every round is a wave
    (cost/serving_common.py ``first_wave_share``)."""
    return name == "sglang"


GEMM_PRIOR_NAMES = ("gemm_bf16", "gemm_fp8", "gemm_fp8_blockwise", "gemm_mxfp8", "gemm_nvfp4")


@cache
def gemm_priors(generation: str) -> dict[str, float] | None:
    """The physical GEMM priors of ``generation`` (data/efficiency.yaml ``priors:``: the largest
    achievable matmul rate over peak, MAMF / cuBLASLt sweeps), by Efficiency field; None for a
    generation without priors (TPU families are in efficiency_tpu.yaml and not served here).
    Serving costs its GEMMs at these times ``gemm_fraction``: the training-fitted values of the
    same file carry training-only work (FP8 amax and casts, NVFP4 random Hadamard transforms and
    stochastic rounding) that an inference GEMM does not do."""
    text = resources.files("paraplan.hardware").joinpath("data/efficiency.yaml").read_text()
    raw = yaml.safe_load(text).get("priors", {})
    if generation not in raw:
        return None
    return {name: float(raw[generation][name]) for name in GEMM_PRIOR_NAMES if name in raw[generation]}


def gemm_kernel_rates(accelerator_key: str) -> dict[str, float]:
    """The measured large-GEMM compute rates of a part's serving kernels, by Efficiency field
    (data/serving.yaml ``gemm_kernel_rates``: TensorRT-LLM's linear layers in AIConfigurator
    0.12.0's GEMM database, as a fraction of the catalog's dense peak); a part on the same die
    as a measured one (``same_die``) takes its rates; empty where nothing was measured."""
    raw = _raw()
    key = raw.get("same_die", {}).get(accelerator_key, accelerator_key)
    return {name: float(v) for name, v in raw.get("gemm_kernel_rates", {}).get(key, {}).items()}


def serving_priors() -> ServingFit:
    """The starting point of every fit (data/serving.yaml ``priors:``)."""
    return ServingFit.from_values({k: float(v) for k, v in _raw()["priors"].items() if k in FIT_NAMES})


def is_grace_hosted(accelerator_key: str) -> bool:
    """Whether the GPU ``accelerator_key`` (catalog key) sits in a Grace superchip, its host an
    Arm Neoverse V2 Grace CPU rather than a DGX/HGX board's x86 host (data/serving.yaml
    ``grace_hosted``)."""
    return accelerator_key in _raw()["grace_hosted"]
