"""The result of a serving scenario: the plan, the prediction (issue 23's ``predicted`` keys) and
the solver's proof status. ``ServingResult.model_dump()`` is the JSON ``--json`` prints; its
``plan`` works as a serving scenario's ``plan:`` as it is, so ``paraplan evaluate RESULT.json``
re-scores it and ``paraplan plan RESULT.json`` re-solves with every knob fixed."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from paraplan.cost.serving import ServingPlan, ServingPrediction, WorkerPlan
from paraplan.hardware import Cluster, step_time_band
from paraplan.serving.schema import ServingPlanDoc, WorkerDoc

__all__ = [
    "Percentiles",
    "MemoryPerGpu",
    "Range",
    "Band",
    "ServingPredicted",
    "ServingSolverOut",
    "ServingResult",
    "serving_plan_doc",
    "serving_predicted_out",
    "plan_from_out",
]

_OUT = ConfigDict(extra="forbid", frozen=True)


class Percentiles(BaseModel):
    model_config = _OUT
    p50: float
    p90: float


class MemoryPerGpu(BaseModel):
    """Bytes per GPU (the decode worker's when disaggregated)."""

    model_config = _OUT
    weights: float
    kv_cache: float
    activations: float
    buffers: float


class Range(BaseModel):
    model_config = _OUT
    p10: float
    p90: float


class Band(BaseModel):
    """The model's uncertainty, as training's step-time band: p10-p90 of measured/predicted."""

    model_config = _OUT
    tpot_ms: Range = Field(description="p10 and p90 of the median TPOT")
    output_tokens_per_s_per_gpu: Range = Field(description="p10 and p90 of throughput per GPU")
    source: str


class ServingPredicted(BaseModel):
    model_config = _OUT
    ttft_ms: Percentiles
    tpot_ms: Percentiles
    output_tokens_per_s: float
    output_tokens_per_s_per_gpu: float
    goodput_requests_per_s: float = Field(description="requests/s meeting the SLO")
    kv_cache_tokens: int = Field(
        description="KV-cache capacity per replica (decode worker when disaggregated)"
    )
    memory_per_gpu: MemoryPerGpu
    memory_capacity_bytes: float
    gpus: int
    fits_memory: bool
    meets_slo: bool = Field(description="TTFT and TPOT at the SLO percentile within workload.slo")
    batch: float = Field(description="steady-state decode batch per replica")
    band: Band | None = None


class ServingSolverOut(BaseModel):
    model_config = _OUT
    status: str
    wall_s: float
    objective: str
    objective_value: float = Field(description="the objective's value in its unit (req/s/GPU, GPUs or ms)")
    bound: float = Field(description="the proven bound on the objective (equal when OPTIMAL)")
    num_candidates: int = Field(description="layouts, batch caps and worker counts scored by cost.serving")
    time_limit_s: float
    workers: int
    seed: int


class ServingResult(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["serving"] = "serving"
    plan: ServingPlanDoc = Field(description="every knob of the plan document filled (serving_plan_doc)")
    predicted: ServingPredicted
    solver: ServingSolverOut | None = None
    scenario: dict = Field(description="the serving scenario this result answers")
    version: str
    alternatives: list[dict] = Field(default_factory=list, description="--top K runners-up")
    explanation: list[str] = Field(default_factory=list)

    @field_validator("plan")
    @classmethod
    def _every_knob(cls, plan: ServingPlanDoc) -> ServingPlanDoc:
        """A result's plan lists every knob of its mode (the document a scenario fixes a subset of)."""
        pools = ("prefill", "decode") if plan.mode == "disaggregated" else ()
        flat = () if pools else ("tp", "pp", "ep", "dp_attention", "replicas")
        keys = ("mode", "max_batch", "max_num_tokens", "chunked_prefill", "num_devices", *flat, *pools)
        missing = [k for k in keys if getattr(plan, k) is None]
        for k in pools:
            pool = getattr(plan, k)
            missing += [f"{k}.{f}" for f, v in pool.model_dump().items() if v is None] if pool else []
        if missing:
            raise ValueError(f"a result's plan lists every knob; missing plan.{', plan.'.join(missing)}")
        return plan


def _worker_doc(w: WorkerPlan) -> WorkerDoc:
    return WorkerDoc(tp=w.tp, pp=w.pp, ep=w.ep, dp_attention=w.dp_attention, workers=w.workers)


def serving_plan_doc(plan: ServingPlan, gpus: int) -> ServingPlanDoc:
    """``plan`` as a result lists it: the plan document with every knob of its mode set and
    ``num_devices`` (the GPUs it uses)."""
    common: dict[str, Any] = {
        "mode": plan.mode,
        "max_batch": plan.max_batch,
        "max_num_tokens": plan.max_num_tokens,
        "chunked_prefill": plan.chunked_prefill,
        "num_devices": gpus,
    }
    if plan.mode == "disaggregated":
        assert plan.prefill is not None and plan.decode is not None
        return ServingPlanDoc(**common, prefill=_worker_doc(plan.prefill), decode=_worker_doc(plan.decode))
    return ServingPlanDoc(
        **common, tp=plan.tp, pp=plan.pp, ep=plan.ep, dp_attention=plan.dp_attention, replicas=plan.replicas
    )


def plan_from_out(out: ServingPlanDoc) -> ServingPlan:
    """The cost model's ServingPlan a result lists (``serving_plan_doc`` undone)."""
    common = {
        "max_batch": out.max_batch,
        "max_num_tokens": out.max_num_tokens,
        "chunked_prefill": out.chunked_prefill,
    }
    if out.mode == "disaggregated":
        assert out.prefill is not None and out.decode is not None
        return ServingPlan(
            mode="disaggregated",
            prefill=WorkerPlan(**out.prefill.model_dump()),
            decode=WorkerPlan(**out.decode.model_dump()),
            **common,
        )
    return ServingPlan(
        mode="aggregated",
        tp=out.tp or 1,
        pp=out.pp or 1,
        ep=out.ep or 1,
        dp_attention=bool(out.dp_attention),
        replicas=out.replicas or 1,
        **common,
    )


def _band(cluster: Cluster, pred: ServingPrediction, moe: bool) -> Band:
    """Training's step-time band (hardware/data/uncertainty.yaml) applied to a decode step: TPOT
    times its p10/p90 ratios, throughput divided by them. The serving rows' own residuals are
    the fidelity benchmark's (issue 23 item 5); until they are fitted this is the band of the
    same hardware generation's training steps, and its source says so."""
    band = step_time_band([cluster.accelerator.generation], moe=moe)
    return Band(
        tpot_ms=Range(p10=band.p10_ratio * pred.tpot_ms_p50, p90=band.p90_ratio * pred.tpot_ms_p50),
        output_tokens_per_s_per_gpu=Range(
            p10=pred.output_tokens_per_s_per_gpu / band.p90_ratio,
            p90=pred.output_tokens_per_s_per_gpu / band.p10_ratio,
        ),
        source=f"{band.source}; training step-time residuals applied to the decode step (serving's own: "
        "benchmarks serving fidelity)",
    )


def serving_predicted_out(
    pred: ServingPrediction, cluster: Cluster, meets_slo: bool, moe: bool
) -> ServingPredicted:
    """The contract's flat ServingPrediction nested as issue 23's ``predicted`` keys."""
    return ServingPredicted(
        ttft_ms=Percentiles(p50=pred.ttft_ms_p50, p90=pred.ttft_ms_p90),
        tpot_ms=Percentiles(p50=pred.tpot_ms_p50, p90=pred.tpot_ms_p90),
        output_tokens_per_s=pred.output_tokens_per_s,
        output_tokens_per_s_per_gpu=pred.output_tokens_per_s_per_gpu,
        goodput_requests_per_s=pred.goodput_requests_per_s,
        kv_cache_tokens=int(pred.kv_cache_tokens),
        memory_per_gpu=MemoryPerGpu(
            weights=pred.weights_bytes,
            kv_cache=pred.kv_cache_bytes,
            activations=pred.activation_bytes,
            buffers=pred.buffer_bytes,
        ),
        memory_capacity_bytes=cluster.memory_capacity_bytes,
        gpus=pred.gpus,
        fits_memory=pred.fits,
        meets_slo=meets_slo,
        batch=pred.batch,
        band=_band(cluster, pred, moe),
    )
