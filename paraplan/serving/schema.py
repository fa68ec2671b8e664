"""The serving scenario (issue 23): ``workload:`` in place of ``job:`` makes a scenario a serving
one; ``model:`` and ``cluster:`` are the training scenario's own sections (presets, HF configs).

model:     as training (paraplan/model_section.py)
cluster:   as training (one node type; pooled clusters are for training only, for now)
workload:  ``isl``, ``osl`` (a mean, or ``{mean, p90}``), ``concurrency`` or ``request_rate``,
           ``slo: {ttft_ms, tpot_ms, percentile}``, ``weights_precision``, ``kv_precision``
engine:    ``{name: vllm | sglang | trtllm, version}``
objective: ``goodput_per_gpu`` (default) | ``min_gpus`` | ``min_ttft``
plan:      optional; any subset of the serving knobs fixes them (evaluate needs the layout)

Field names are the public contract of issue 23 (the serving contract): they map one to
one onto ``paraplan.cost.serving``'s ``Workload``, ``Engine``, ``ServingPlan`` and ``WorkerPlan``
(paraplan/serving/instance.py converts them). Bad input raises ConfigError naming the field and
the rule, through paraplan/schema.py's formatter.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, ValidationInfo, field_validator, model_validator

from paraplan.cost.kv import KV_BYTES, WEIGHT_BYTES
from paraplan.errors import ConfigError
from paraplan.hardware.topology import MAX_DEVICES
from paraplan.scenario.model_section import ModelSection
from paraplan.scenario.schema import ClusterSection, _format
from paraplan.scenario.section import MAX_LAYERS, MAX_SEQ_LEN, STRICT, Section

__all__ = [
    "TokenLength",
    "SloSection",
    "WorkloadSection",
    "EngineSection",
    "WorkerDoc",
    "ServingPlanDoc",
    "ServingScenario",
    "Objective",
    "SLO_PERCENTILES",
    "MAX_CONCURRENCY",
    "MAX_REQUEST_RATE",
    "MAX_SERVING_BATCH",
    "MAX_NUM_TOKENS",
    "is_serving_document",
    "is_serving",
    "serving_api",
    "validate_serving",
]

MAX_CONCURRENCY = 1_048_576
"""Requests in flight: ~100x the largest published wide-EP deployments (decode batches of a few
thousand sequences per instance: benchmarks/data/serving_runs_calibration.csv, trtllm_dsr1_best_perf
concurrency 1024-7168)."""
MAX_REQUEST_RATE = 1e6
"""Requests per second offered: far beyond any single deployment."""
MAX_SERVING_BATCH = 65_536
"""plan.max_batch (sequences per replica; vLLM --max-num-seqs): 64x vLLM's largest default."""
MAX_NUM_TOKENS = 4_194_304
"""plan.max_num_tokens (tokens per engine step; vLLM --max-num-batched-tokens)."""
SLO_PERCENTILES = (50, 90)
"""The percentiles the cost model predicts (ServingPrediction: p50 and p90)."""

Objective = Literal["goodput_per_gpu", "min_gpus", "min_ttft"]
"""What ``paraplan plan`` optimises for a serving scenario: requests/s meeting the SLO per GPU
(default); the fewest GPUs that serve ``workload.request_rate`` within the SLO; the lowest TTFT at
the SLO percentile with TPOT within the SLO."""

EngineName = Literal["vllm", "sglang", "trtllm"]
ServingMode = Literal["aggregated", "disaggregated"]


class TokenLength(Section):
    """``isl: {mean, p90}``: a length distribution's mean and 90th percentile (tokens)."""

    mean: float = Field(ge=1, le=MAX_SEQ_LEN, allow_inf_nan=False, description="mean tokens per request")
    p90: float | None = Field(
        None, ge=1, le=MAX_SEQ_LEN, allow_inf_nan=False, description="90th percentile of tokens per request"
    )

    @model_validator(mode="after")
    def check_order(self) -> TokenLength:
        if self.p90 is not None and self.p90 < self.mean:
            raise ValueError(
                f"p90={self.p90:g} is below mean={self.mean:g}; a 90th percentile is at least the mean"
            )
        return self


class SloSection(Section):
    ttft_ms: float | None = Field(
        None, gt=0, le=3.6e6, allow_inf_nan=False, description="time to first token at the percentile, ms"
    )
    tpot_ms: float | None = Field(
        None, gt=0, le=3.6e6, allow_inf_nan=False, description="time per output token at the percentile, ms"
    )
    percentile: int = Field(90, description="the percentile the SLO holds at: 50 | 90")

    @model_validator(mode="after")
    def check_percentile(self) -> SloSection:
        if self.percentile not in SLO_PERCENTILES:
            raise ValueError(
                f"slo.percentile={self.percentile} must be one of {', '.join(map(str, SLO_PERCENTILES))} "
                "(the percentiles the serving cost model predicts)"
            )
        return self


class WorkloadSection(Section):
    isl: float | TokenLength = Field(description="input tokens per request: a mean, or {mean, p90}")
    osl: float | TokenLength = Field(description="output tokens per request: a mean, or {mean, p90}")
    concurrency: int | None = Field(
        None, ge=1, le=MAX_CONCURRENCY, description="closed loop: requests in flight"
    )
    request_rate: float | None = Field(
        None, gt=0, le=MAX_REQUEST_RATE, allow_inf_nan=False, description="open loop: requests/s (Poisson)"
    )
    slo: SloSection = Field(default_factory=SloSection)
    weights_precision: str = Field(
        "bf16", description=f"stored weights: {' | '.join(WEIGHT_BYTES)} (cost/kv.py WEIGHT_BYTES)"
    )
    kv_precision: str = Field("bf16", description=f"KV cache: {' | '.join(KV_BYTES)} (cost/kv.py KV_BYTES)")

    @field_validator("weights_precision", "kv_precision")
    @classmethod
    def check_precision(cls, value: str, info: ValidationInfo) -> str:
        known = WEIGHT_BYTES if info.field_name == "weights_precision" else KV_BYTES
        if value not in known:
            raise ValueError(f"{value!r} is not one of {', '.join(known)}")
        return value

    @model_validator(mode="after")
    def check_load(self) -> WorkloadSection:
        if (self.concurrency is None) == (self.request_rate is None):
            raise ValueError(
                "give exactly one of workload.concurrency (requests in flight) or "
                "workload.request_rate (requests/s)"
            )
        for name in ("isl", "osl"):
            value = getattr(self, name)
            if isinstance(value, float | int) and not 1 <= value <= MAX_SEQ_LEN:
                raise ValueError(f"workload.{name}={value:g} must be from 1 to {MAX_SEQ_LEN:,} tokens")
        return self

    @staticmethod
    def _split(value: float | TokenLength) -> tuple[float, float | None]:
        return (value.mean, value.p90) if isinstance(value, TokenLength) else (float(value), None)

    def lengths(self) -> tuple[float, float | None, float, float | None]:
        """(isl mean, isl p90, osl mean, osl p90)."""
        return (*self._split(self.isl), *self._split(self.osl))


class EngineSection(Section):
    name: EngineName = Field("vllm", description="vllm | sglang | trtllm")
    version: str | None = Field(None, max_length=64, description="engine release, e.g. 0.33.0")


class WorkerDoc(Section):
    """One pool of a disaggregated plan (``plan.prefill`` / ``plan.decode``); any subset fixes
    those knobs."""

    tp: int | None = Field(None, ge=1, le=MAX_DEVICES)
    pp: int | None = Field(None, ge=1, le=MAX_LAYERS)
    ep: int | None = Field(None, ge=1, le=MAX_DEVICES)
    dp_attention: bool | None = None
    workers: int | None = Field(None, ge=1, le=MAX_DEVICES, description="replicas of this worker")


class ServingPlanDoc(Section):
    """The serving plan document, declared once: the scenario's ``plan:`` (any subset fixes those
    knobs; ``paraplan plan`` chooses the rest) and, every knob filled, the result's ``plan``
    (paraplan/serving/result.py ``serving_plan_doc``), as paraplan/plan_doc.py is for training;
    ``paraplan evaluate`` needs ``mode`` and the layout (aggregated: ``tp``; disaggregated: the
    ``prefill`` and ``decode`` pools), the others take the engines' defaults."""

    mode: ServingMode | None = Field(
        None, description="aggregated | disaggregated (prefill and decode pools)"
    )
    tp: int | None = Field(None, ge=1, le=MAX_DEVICES)
    pp: int | None = Field(None, ge=1, le=MAX_LAYERS)
    ep: int | None = Field(None, ge=1, le=MAX_DEVICES)
    dp_attention: bool | None = Field(
        None, description="attention data-parallel over the tp ranks (MLA models)"
    )
    replicas: int | None = Field(None, ge=1, le=MAX_DEVICES, description="aggregated: engine replicas")
    max_batch: int | None = Field(
        None, ge=1, le=MAX_SERVING_BATCH, description="max concurrent sequences per replica (--max-num-seqs)"
    )
    max_num_tokens: int | None = Field(
        None, ge=1, le=MAX_NUM_TOKENS, description="tokens per engine step (--max-num-batched-tokens)"
    )
    chunked_prefill: bool | None = None
    prefill: WorkerDoc | None = Field(None, description="disaggregated: the prefill pool")
    decode: WorkerDoc | None = Field(None, description="disaggregated: the decode pool")
    num_devices: int | None = Field(
        None, ge=1, le=MAX_DEVICES, description="GPUs the plan uses (a result lists it; checked when given)"
    )

    @model_validator(mode="after")
    def check_mode(self) -> ServingPlanDoc:
        pools = [k for k in ("prefill", "decode") if getattr(self, k) is not None]
        if self.mode == "aggregated" and pools:
            raise ValueError(
                f"plan.{pools[0]} is a pool of a disaggregated plan; set plan.mode: disaggregated or drop it"
            )
        if self.mode == "disaggregated":
            flat = [k for k in ("tp", "pp", "ep", "dp_attention", "replicas") if getattr(self, k) is not None]
            if flat:
                raise ValueError(
                    f"plan.{flat[0]} is a knob of an aggregated plan; a disaggregated plan sets it per "
                    f"pool (plan.prefill.{flat[0] if flat[0] != 'replicas' else 'workers'}, plan.decode...)"
                )
        return self


class ServingScenario(BaseModel):
    model_config = STRICT
    model: ModelSection
    cluster: ClusterSection
    workload: WorkloadSection
    engine: EngineSection = Field(default_factory=EngineSection)
    objective: Objective = Field("goodput_per_gpu", description="goodput_per_gpu | min_gpus | min_ttft")
    plan: ServingPlanDoc = Field(default_factory=ServingPlanDoc)

    @model_validator(mode="after")
    def check_objective(self) -> ServingScenario:
        if self.cluster.pools is not None:
            raise ValueError(
                "cluster.pools: a serving scenario runs on one node type for now; "
                "give cluster.preset with nodes or gpus"
            )
        if self.objective == "min_gpus" and self.workload.request_rate is None:
            raise ValueError(
                "objective min_gpus finds the fewest GPUs for workload.request_rate; give a request_rate"
            )
        return self


def is_serving_document(data: Any) -> bool:
    """A scenario mapping (or a result document of one) with ``workload:``: a serving scenario."""
    if not isinstance(data, dict):
        return False
    if "workload" in data:
        return True
    inner = data.get("scenario")
    return isinstance(inner, dict) and "workload" in inner and "predicted" in data


def is_serving(scenario: Any) -> bool:
    """A serving scenario, its result, or a file of either (paraplan/api.py dispatches on it)."""
    from pathlib import Path

    from paraplan.scenario.scenario_file import read_scenario

    if isinstance(scenario, ServingScenario) or getattr(scenario, "kind", None) == "serving":
        return True  # a ServingResult
    if isinstance(scenario, str | Path):
        try:
            return is_serving_document(read_scenario(scenario)[0])
        except ConfigError:
            return False  # the training path reports it
    return is_serving_document(scenario)


def serving_api() -> Any:
    """paraplan/serving/api.py, imported on first use (a training run never loads it)."""
    from paraplan.serving import api

    return api


def validate_serving(data: dict[str, Any]) -> ServingScenario:
    """The ServingScenario of a mapping; ConfigError naming each bad field (training's format)."""
    if "job" in data:
        raise ConfigError(
            "invalid scenario: give job: (a training scenario) or workload: (a serving scenario), not both"
        )
    try:
        return ServingScenario.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format(e)) from None
