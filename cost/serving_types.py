"""The public types of the serving cost model (issue 23; the scenario's ``workload`` /
``engine`` / ``plan`` and the result's ``predicted``) and the rules a serving plan and workload
must keep (``check_serving_plan``, ``check_workload``: ValueError naming the field and the rule).
Field names are a public contract shared with the scenario front door and the exporters; add
fields only with defaults. cost/serving.py re-exports everything here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from paraplan.graph import ModelSpec
from paraplan.hardware import Cluster

__all__ = [
    "ServingMode",
    "EngineName",
    "Workload",
    "Engine",
    "WorkerPlan",
    "ServingPlan",
    "ServingPrediction",
    "check_serving_plan",
    "check_workload",
]

ServingMode = Literal["aggregated", "disaggregated"]
EngineName = Literal["vllm", "sglang", "trtllm"]


@dataclass(frozen=True)
class Workload:  # scenario `workload:`
    isl: float  # mean input tokens per request
    osl: float  # mean output tokens per request
    isl_p90: float | None = None
    osl_p90: float | None = None
    concurrency: int | None = None  # closed loop: requests in flight
    request_rate: float | None = None  # open loop: requests/s (Poisson)
    ttft_ms: float | None = None  # SLO (slo.ttft_ms)
    tpot_ms: float | None = None  # SLO (slo.tpot_ms)
    percentile: int = 90  # SLO percentile
    weights_precision: str = "bf16"  # bf16 | fp8 | fp4 (nvfp4/mxfp4) | int4 ...
    kv_precision: str = "bf16"  # bf16 | fp8
    num_requests: int | None = None  # a finite run (benchmarks): requests sent; bounds the open-loop wait


@dataclass(frozen=True)
class Engine:  # scenario `engine:`
    name: EngineName = "vllm"
    version: str | None = None
    # the engine's own KV memory fraction, in its own meaning (vLLM --gpu-memory-utilization,
    # SGLang --mem-fraction-static, TensorRT-LLM free_gpu_memory_fraction); None: its default
    kv_fraction: float | None = None


@dataclass(frozen=True)
class WorkerPlan:  # one pool of a disaggregated plan (plan.prefill / plan.decode)
    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp_attention: bool = False
    workers: int = 1  # replicas of this worker; GPUs = workers * tp * pp


@dataclass(frozen=True)
class ServingPlan:  # scenario `plan:` for a serving scenario; result `plan`
    mode: ServingMode = "aggregated"
    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp_attention: bool = False
    replicas: int = 1
    max_batch: int = 256  # max concurrent sequences per replica (vLLM --max-num-seqs)
    max_num_tokens: int = 8192  # tokens per engine step (vLLM --max-num-batched-tokens)
    chunked_prefill: bool = True
    prefill: WorkerPlan | None = None  # disaggregated only
    decode: WorkerPlan | None = None  # disaggregated only


@dataclass(frozen=True)
class ServingPrediction:  # result `predicted` of a serving scenario
    ttft_ms_p50: float
    ttft_ms_p90: float
    tpot_ms_p50: float
    tpot_ms_p90: float
    output_tokens_per_s: float
    output_tokens_per_s_per_gpu: float
    goodput_requests_per_s: float  # requests/s meeting the SLO
    kv_cache_tokens: int  # per replica (decode worker when disaggregated)
    weights_bytes: float  # per GPU
    kv_cache_bytes: float  # per GPU
    activation_bytes: float  # per GPU
    buffer_bytes: float  # per GPU
    gpus: int
    fits: bool
    batch: float  # steady-state decode batch per replica
    ttft_ms_mean: float = 0.0
    tpot_ms_mean: float = 0.0
    requests_per_s: float = 0.0  # completed requests/s (all replicas)
    overloaded: bool = False  # the offered rate reaches capacity (open loop)
    reasons: tuple[str, ...] = ()  # why the plan does not fit
    breakdown: dict[str, float] = field(default_factory=dict)  # step-time parts of the decode step, s


# ----------------------------------------------------------------------------------------- checks


def _positive(name: str, value: int) -> None:
    if value < 1:
        raise ValueError(f"{name}={value} must be at least 1")


def _check_worker(prefix: str, spec: ModelSpec, tp: int, pp: int, ep: int, dp_attention: bool) -> None:
    for n, v in (("tp", tp), ("pp", pp), ("ep", ep)):
        _positive(f"{prefix}.{n}", v)
    if ep > 1 and not spec.is_moe:
        raise ValueError(f"{prefix}.ep={ep} needs a mixture-of-experts model ({spec.name} has no experts)")
    if tp % ep:
        raise ValueError(f"{prefix}.ep={ep} must divide {prefix}.tp={tp} (experts split over the tp GPUs)")
    if spec.is_moe and ep > spec.num_experts:
        raise ValueError(f"{prefix}.ep={ep} exceeds the model's {spec.num_experts} experts")
    if not dp_attention and spec.num_heads % tp:
        raise ValueError(
            f"{prefix}.tp={tp} must divide the model's {spec.num_heads} attention heads (or set dp_attention)"
        )
    kv = spec.num_kv_heads
    if not dp_attention and not spec.is_mla and kv % tp and tp % kv:
        raise ValueError(f"{prefix}.tp={tp} and the model's {kv} KV heads must divide one another")
    if pp > spec.num_layers:
        raise ValueError(f"{prefix}.pp={pp} exceeds the model's {spec.num_layers} layers")


def check_serving_plan(spec: ModelSpec, cluster: Cluster, plan: ServingPlan) -> None:
    """Refuse a plan that breaks a rule: ValueError naming the field and the rule."""
    if plan.mode not in ("aggregated", "disaggregated"):
        raise ValueError(f"plan.mode={plan.mode!r} must be 'aggregated' or 'disaggregated'")
    _positive("plan.max_batch", plan.max_batch)
    _positive("plan.max_num_tokens", plan.max_num_tokens)
    if plan.mode == "aggregated":
        if plan.prefill is not None or plan.decode is not None:
            raise ValueError("plan.prefill / plan.decode are for plan.mode='disaggregated' only")
        _positive("plan.replicas", plan.replicas)
        _check_worker("plan", spec, plan.tp, plan.pp, plan.ep, plan.dp_attention)
        gpus = plan.replicas * plan.tp * plan.pp
    else:
        if plan.prefill is None or plan.decode is None:
            raise ValueError("plan.mode='disaggregated' needs both plan.prefill and plan.decode")
        gpus = 0
        for name, w in (("plan.prefill", plan.prefill), ("plan.decode", plan.decode)):
            _positive(f"{name}.workers", w.workers)
            _check_worker(name, spec, w.tp, w.pp, w.ep, w.dp_attention)
            gpus += w.workers * w.tp * w.pp
    if gpus > cluster.num_devices:
        raise ValueError(f"plan needs {gpus} GPUs but cluster has {cluster.num_devices}")


def check_workload(w: Workload) -> None:
    if w.isl <= 0 or w.osl <= 0:
        raise ValueError(f"workload.isl={w.isl} and workload.osl={w.osl} must be positive")
    if w.concurrency is not None and w.request_rate is not None:
        raise ValueError("workload.concurrency and workload.request_rate exclude one another; give one")
    if w.concurrency is not None and w.concurrency < 1:
        raise ValueError(f"workload.concurrency={w.concurrency} must be at least 1")
    if w.request_rate is not None and not w.request_rate > 0:
        raise ValueError(f"workload.request_rate={w.request_rate} must be positive (inf: all at once)")
    if w.num_requests is not None and w.num_requests < 1:
        raise ValueError(f"workload.num_requests={w.num_requests} must be at least 1")
    if not 50 <= w.percentile < 100:
        raise ValueError(f"workload.percentile={w.percentile} must be in [50, 100)")
