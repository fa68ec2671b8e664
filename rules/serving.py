"""Serving engines' rules (issue 23): which engine runs which serving setting, and each engine's
KV-cache memory knob computed from the per-GPU memory the cost model predicts.

Pure functions of (plan, workload, cluster, model); imports cost/, graph/ and hardware/ only. The
exporters (paraplan/export/serving/) call ``check_engine`` first and render only what passes.

Engines and versions: vLLM 0.33.0, SGLang 0.5.23, TensorRT-LLM 1.2.1 (PyTorch backend,
``trtllm-serve``); NVIDIA Dynamo wraps them for disaggregated serving. Facts, each with its source:

- Quantized weights by GPU generation (compute capability, ``get_min_capability`` of each
  quantization config in the installed packages):
  vLLM 0.33.0 ``model_executor/layers/quantization``: ``Fp8Config`` 75, ``ModelOptFp8Config`` 80,
  ``ModelOptNvFp4Config`` 75 (Marlin weight-only fallback below Blackwell), ``Mxfp4Config`` 80,
  compressed-tensors W8A8 INT8 75 and WNA16 (int4) 75; SGLang 0.5.23 ``srt/layers/quantization``:
  ``Fp8Config`` 80, ``ModelOptFp8Config`` 89, ``ModelOptFp4Config`` 80, ``Mxfp4Config`` 80,
  ``W8A8Int8Config`` 75, GPTQ-Marlin (int4) 80. TensorRT-LLM runs FP8 GEMMs on Ada/Hopper and
  later (SM89+) and NVFP4 on Blackwell (SM100+) only (TensorRT-LLM docs, "Numerical precision",
  support matrix); it builds for NVIDIA GPUs only.
- Expert parallelism: vLLM's ``--enable-expert-parallel`` is a switch; the EP group is every rank of
  the engine (TP x DP, vLLM docs "Expert Parallel Deployment"; ``vllm/config/parallel.py``), so vLLM
  cannot split each expert over ``tp / ep > 1`` ranks while spreading experts over ``ep > 1``.
  SGLang (``--ep-size`` with moe TP = tp / ep, ``srt/arg_groups/parallel_hook.py``) and TensorRT-LLM
  (``moe_expert_parallel_size`` x ``moe_tensor_parallel_size`` = tp, ``TorchLlmArgs``) can.
- SGLang 0.5.23 spells attention DP ``--attn-dp-size N``; ``--dp-size N --enable-dp-attention``
  is the deprecated spelling it rewrites (``_handle_deprecated_dp_attention`` in
  ``srt/arg_groups/parallel_hook.py``).
- vLLM's scheduler (``SchedulerConfig.verify_max_model_len``, ``vllm/config/scheduler.py``): with
  chunked prefill off ``--max-num-batched-tokens`` >= ``--max-model-len`` (a whole prompt per step),
  and always ``--max-num-batched-tokens`` >= ``--max-num-seqs``.
- KV-cache dtypes: vLLM ``CacheDType`` (``vllm/config/cache.py``: auto, fp8, fp8_e4m3, ...);
  SGLang ``--kv-cache-dtype`` choices (auto, fp8_e4m3, fp8_e5m2, nvfp4, ...); TensorRT-LLM
  ``kv_cache_config.dtype`` (auto, fp8, nvfp4).

KV-cache memory knobs: rules/serving_memory.py (re-exported here).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from paraplan.cost.serving import ServingPlan, WorkerPlan, Workload
from paraplan.graph import ModelSpec
from paraplan.hardware import Cluster
from paraplan.rules.serving_memory import FRACTION_DIGITS, GpuMemory, kv_fraction, kv_fractions

__all__ = [
    "ENGINES",
    "ENGINE_VERSIONS",
    "EngineRefusal",
    "EngineWorker",
    "FRACTION_DIGITS",
    "GpuMemory",
    "check_engine",
    "engine_refusals",
    "engines_running",
    "kv_dtype",
    "kv_fraction",
    "kv_fractions",
    "compute_capability",
    "plan_workers",
    "rank_limit",
]

ENGINES = ("vllm", "sglang", "trtllm")
ENGINE_VERSIONS = {"vllm": "0.33.0", "sglang": "0.5.23", "trtllm": "1.2.1"}
"""The engine releases whose flags the exporters write and whose parsers check them."""

_CAPABILITY = {"ampere": 80, "ada": 89, "hopper": 90, "blackwell": 100, "blackwell_ultra": 103}
_CAPABILITY_OF_PART = {"rtx-pro-6000": 120}
"""CUDA compute capability of each NVIDIA generation of the hardware catalog (A100 sm_80, L40S
sm_89, H100/H200/GH200 sm_90, B200/GB200 sm_100, B300/GB300 sm_103) and of the parts whose chip
differs from their generation's (RTX PRO 6000 Blackwell sm_120); NVIDIA's CUDA GPUs
compute-capability table."""

_MIN_CAPABILITY: dict[str, dict[str, int]] = {
    "vllm": {"fp8": 75, "fp8_blockwise": 80, "nvfp4": 75, "fp4": 75, "mxfp4": 80, "int8": 75, "int4": 75},
    "sglang": {"fp8": 80, "fp8_blockwise": 80, "nvfp4": 80, "fp4": 80, "mxfp4": 80, "int8": 75, "int4": 80},
    "trtllm": {"fp8": 89, "fp8_blockwise": 89, "nvfp4": 100, "fp4": 100, "mxfp4": 90, "int8": 80, "int4": 80},
}
"""Least compute capability for each weights precision (module docstring; vLLM/SGLang: the
quantization configs' ``get_min_capability``; TensorRT-LLM: its precision support matrix)."""

_ROCM_WEIGHTS = {
    "vllm": ("fp8", "fp8_blockwise", "mxfp4", "int4"),
    "sglang": ("fp8", "fp8_blockwise", "int4"),
}
"""Weights precisions each engine runs on AMD Instinct (ROCm builds; vLLM ROCm docs "Quantization",
SGLang AMD docs); TensorRT-LLM has no ROCm build."""

_KV_DTYPES = {
    "vllm": {"bf16": "auto", "fp16": "auto", "fp8": "fp8"},
    "sglang": {"bf16": "auto", "fp16": "auto", "fp8": "fp8_e4m3", "nvfp4": "nvfp4", "fp4": "nvfp4"},
    "trtllm": {"bf16": "auto", "fp16": "auto", "fp8": "fp8", "nvfp4": "nvfp4", "fp4": "nvfp4"},
}
"""workload.kv_precision -> each engine's KV-cache dtype value (module docstring)."""


@dataclass(frozen=True)
class EngineRefusal:
    """A setting ``engine`` cannot run: the field, its value, the rule, and the engines that run it."""

    engine: str
    field: str
    value: object
    rule: str
    runners: tuple[str, ...]

    @property
    def message(self) -> str:
        head = f"{self.field}={_show(self.value)}: {self.engine} {ENGINE_VERSIONS[self.engine]} {self.rule}"
        if self.runners:
            names = ", ".join(f"{e} {ENGINE_VERSIONS[e]}" for e in self.runners)
            return f"{head}; {names} {'runs' if len(self.runners) == 1 else 'run'} it"
        return f"{head}; no engine here runs it"


def _show(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


@dataclass(frozen=True)
class EngineWorker:
    """One engine instance to launch: a replica (aggregated) or a prefill / decode worker. ``field``
    is the plan field it comes from (``plan``, ``plan.prefill``, ``plan.decode``) for messages."""

    field: str
    tp: int
    pp: int
    ep: int
    dp_attention: bool
    count: int
    max_batch: int
    max_num_tokens: int
    chunked_prefill: bool
    role: str | None = None  # None (aggregated), "prefill" or "decode"

    @property
    def gpus(self) -> int:
        return self.tp * self.pp


def plan_workers(plan: ServingPlan) -> tuple[EngineWorker, ...]:
    """The engine instances of ``plan``: one kind of replica (aggregated), or the prefill and the
    decode workers. The contract's WorkerPlan has no batch fields: prefill workers take the plan's
    max_batch and max_num_tokens (prompt steps of max_num_tokens, whole or chunked as
    plan.chunked_prefill says); decode workers run decode-only steps, one token per running
    sequence, so their step budget is max_batch tokens (cost/serving_disagg.py sizes their
    activations by decode steps too, not by max_num_tokens)."""
    if plan.mode == "aggregated":
        return (
            EngineWorker(
                "plan",
                plan.tp,
                plan.pp,
                plan.ep,
                plan.dp_attention,
                plan.replicas,
                plan.max_batch,
                plan.max_num_tokens,
                plan.chunked_prefill,
            ),
        )
    if plan.prefill is None or plan.decode is None:
        raise ValueError("plan.mode='disaggregated' needs both plan.prefill and plan.decode")

    def one(name: str, w: WorkerPlan) -> EngineWorker:
        tokens = plan.max_num_tokens if name == "prefill" else plan.max_batch
        return EngineWorker(
            f"plan.{name}",
            w.tp,
            w.pp,
            w.ep,
            w.dp_attention,
            w.workers,
            plan.max_batch,
            tokens,
            plan.chunked_prefill,
            name,
        )

    return one("prefill", plan.prefill), one("decode", plan.decode)


def compute_capability(cluster: Cluster) -> int | None:
    """The CUDA compute capability of the cluster's GPU; None for AMD parts and TPUs."""
    acc = cluster.accelerator
    return _CAPABILITY_OF_PART.get(acc.key, _CAPABILITY.get(acc.generation))


def _device_reason(engine: str, cluster: Cluster) -> str | None:
    acc = cluster.accelerator
    if acc.is_tpu:
        return "runs on GPUs, not TPUs (serving exports write CUDA / ROCm launches)"
    if engine == "trtllm" and compute_capability(cluster) is None:
        return f"runs on NVIDIA GPUs only ({acc.name} is {acc.generation})"
    return None


def _weights_reason(engine: str, precision: str, cluster: Cluster) -> str | None:
    if precision in ("bf16", "fp16"):
        return None
    cc = compute_capability(cluster)
    acc = cluster.accelerator
    if cc is None:
        if precision in _ROCM_WEIGHTS.get(engine, ()):
            return None
        return f"has no {precision} weights kernels on {acc.name}"
    least = _MIN_CAPABILITY[engine].get(precision)
    if least is None:
        return f"has no {precision} weights format"
    if cc < least:
        return (
            f"runs {precision} weights from compute capability {least / 10:.1f} up "
            f"({acc.name} is {cc / 10:.1f}, {acc.generation})"
        )
    return None


def _kv_reason(engine: str, precision: str) -> str | None:
    if precision in _KV_DTYPES[engine]:
        return None
    return f"has no {precision} KV-cache dtype (it has {', '.join(sorted(_KV_DTYPES[engine]))})"


def _ep_reason(engine: str, w: EngineWorker) -> str | None:
    if engine == "vllm" and 1 < w.ep < w.tp:
        return (
            f"spreads experts over all {w.tp} ranks of an engine (--enable-expert-parallel) or "
            f"splits each over them, not {w.ep} groups of {w.tp // w.ep}"
        )
    return None


def rank_limit(value: int, worker: EngineWorker) -> int:
    """A replica-wide limit (plan.max_batch, plan.max_num_tokens) as each attention data-parallel
    rank's: vLLM's DP ranks and TensorRT-LLM's attention-DP ranks each schedule their own requests
    with the limits they are given, so those get value / tp under dp_attention (SGLang divides its
    server-wide --max-running-requests and --chunked-prefill-size itself)."""
    return ceil(value / worker.tp) if worker.dp_attention else value


def _tokens_reason(engine: str, w: EngineWorker) -> str | None:
    tokens, seqs = rank_limit(w.max_num_tokens, w), rank_limit(w.max_batch, w)
    if engine == "vllm" and tokens < seqs:
        return (
            f"needs --max-num-batched-tokens ({tokens}) >= --max-num-seqs ({seqs}) on each rank: "
            "every running sequence decodes a token each step"
        )
    return None


def _chunk_reason(engine: str, w: EngineWorker, max_model_len: int | None) -> str | None:
    tokens = rank_limit(w.max_num_tokens, w)
    if engine == "vllm" and not w.chunked_prefill and max_model_len and tokens < max_model_len:
        return (
            f"prefills a prompt in one step without chunking, so --max-num-batched-tokens "
            f"({tokens} on each rank) must reach --max-model-len ({max_model_len})"
        )
    return None


def _reasons(
    engine: str,
    plan: ServingPlan,
    workload: Workload,
    cluster: Cluster,
    max_model_len: int | None,
) -> list[tuple[str, object, str | None]]:
    """(field, value, why ``engine`` cannot run it or None) for every setting of the plan."""
    out: list[tuple[str, object, str | None]] = [
        ("cluster.accelerator", cluster.accelerator.key, _device_reason(engine, cluster)),
        (
            "workload.weights_precision",
            workload.weights_precision,
            _weights_reason(engine, workload.weights_precision, cluster),
        ),
        ("workload.kv_precision", workload.kv_precision, _kv_reason(engine, workload.kv_precision)),
    ]
    for w in plan_workers(plan):
        out.append((f"{w.field}.ep", w.ep, _ep_reason(engine, w)))
        out.append(("plan.max_num_tokens", w.max_num_tokens, _tokens_reason(engine, w)))
        out.append(("plan.chunked_prefill", w.chunked_prefill, _chunk_reason(engine, w, max_model_len)))
    return out


def engine_refusals(
    engine: str,
    plan: ServingPlan,
    workload: Workload,
    cluster: Cluster,
    max_model_len: int | None = None,
) -> list[EngineRefusal]:
    """Every setting of (plan, workload, cluster) that ``engine`` cannot run, each naming the
    engines that do."""
    if engine not in ENGINES:
        raise ValueError(
            f"engine.name={engine!r} is not a serving engine; choose one of {', '.join(ENGINES)}"
        )
    table = {e: _reasons(e, plan, workload, cluster, max_model_len) for e in ENGINES}
    out = []
    for i, (field, value, why) in enumerate(table[engine]):
        if why is None:
            continue
        runners = tuple(e for e in ENGINES if e != engine and table[e][i][2] is None)
        out.append(EngineRefusal(engine, field, value, why, runners))
    return out


def engines_running(
    plan: ServingPlan, workload: Workload, cluster: Cluster, max_model_len: int | None = None
) -> tuple[str, ...]:
    """The engines that run every setting of the plan."""
    return tuple(e for e in ENGINES if not engine_refusals(e, plan, workload, cluster, max_model_len))


def check_engine(
    engine: str,
    plan: ServingPlan,
    workload: Workload,
    cluster: Cluster,
    spec: ModelSpec | None = None,
    max_model_len: int | None = None,
) -> None:
    """ValueError with every refusal of ``engine`` (field, value, rule, engines that run it)."""
    found = engine_refusals(engine, plan, workload, cluster, max_model_len)
    if spec is not None and spec.is_moe:
        for w in plan_workers(plan):
            if w.ep > 1 and spec.num_experts % w.ep:
                found.append(
                    EngineRefusal(
                        engine,
                        f"{w.field}.ep",
                        w.ep,
                        f"places whole experts on ranks: ep must divide the model's "
                        f"{spec.num_experts} experts",
                        (),
                    )
                )
    if found:
        raise ValueError("; ".join(r.message for r in found))


def kv_dtype(engine: str, precision: str) -> str:
    """``engine``'s KV-cache dtype value for workload.kv_precision; ValueError naming the field."""
    why = _kv_reason(engine, precision)
    if why is not None:
        raise ValueError(f"workload.kv_precision={precision}: {engine} {ENGINE_VERSIONS[engine]} {why}")
    return _KV_DTYPES[engine][precision]
