"""The result a user gets back: plan, prediction and (from the planner) the solver's proof status.

``Result.model_dump()`` is the JSON object ``--json`` prints; ``paraplan.export.load_result``
reads it back (``paraplan export`` does), and its ``plan`` works as a scenario's ``plan:`` as it is
(``paraplan evaluate RESULT.json``). ``runs_on`` names the frameworks whose exporter takes the plan
as it is (paraplan/planning.py).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from paraplan.capacity.out import CapacityOut, ClusterOut, TrainingOut
from paraplan.cost import Breakdown, Plan
from paraplan.cost import evaluate as cost_evaluate
from paraplan.cost.memory import StageMemory
from paraplan.errors import ConfigError
from paraplan.hardware import Cluster, step_time_band
from paraplan.instance import Instance
from paraplan.scenario.plan_doc import PlanDoc, filled, plan_doc

__all__ = [
    "PlanDoc",
    "Alternative",
    "StageOut",
    "StepTimeBandOut",
    "Predicted",
    "band_out",
    "SolverOut",
    "Result",
    "predicted_out",
    "evaluate_plan",
    "paraplan_version",
]

_OUT = ConfigDict(extra="forbid", frozen=True)


class StageOut(BaseModel):
    model_config = _OUT
    stage: int
    layers: int
    pool: int | None = Field(None, description="pooled clusters: index in cluster.pools")
    recompute: str
    time_per_micro_batch_s: float
    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    buffers_bytes: float
    total_bytes: float
    allocated_bytes: float = Field(
        0.0, description="tensor bytes at the peak (torch max_memory_allocated): total less the reserve"
    )
    reserved_bytes: float = Field(
        0.0,
        description="allocated plus the caching allocator's overhead (torch max_memory_reserved); "
        "total adds the CUDA context and NCCL buffers",
    )


class StepTimeBandOut(BaseModel):
    model_config = _OUT
    p10: float = Field(description="10th percentile of the step time, seconds")
    p90: float = Field(description="90th percentile of the step time, seconds")
    source: str = Field(description="the residuals it comes from (hardware/data/uncertainty.yaml)")


class Predicted(BaseModel):
    model_config = _OUT
    step_time_s: float
    step_time_band_s: StepTimeBandOut | None = Field(
        None,
        description="the model's uncertainty: p10-p90 of measured/predicted over the "
        "published runs of the hardware generation, times step_time_s",
    )
    tokens_per_s_per_gpu: float
    model_flops_per_token: float
    model_tflops_per_gpu: float
    mfu: float
    peak_memory_bytes: float
    peak_allocated_bytes: float = Field(
        0.0,
        description="largest allocated (tensor) bytes over the stages, as torch.cuda.max_memory_allocated",
    )
    peak_reserved_bytes: float = Field(
        0.0,
        description="largest reserved bytes over the stages (allocated plus the caching "
        "allocator's overhead, job.allocator), as torch.cuda.max_memory_reserved; "
        "peak_memory_bytes adds the CUDA context and NCCL buffers",
    )
    memory_capacity_bytes: float
    memory_reserve_bytes: float = Field(
        0.0,
        description="runtime reserve on the peak stage (CUDA context, NCCL buffers, "
        "allocator fragmentation; cost/memory.py), included in peak_memory_bytes",
    )
    memory_headroom_bytes: float = Field(
        0.0,
        description="device memory kept free by solver.memory_headroom, already taken off "
        "memory_capacity_bytes",
    )
    fits_memory: bool
    compute_s: float
    bubble_s: float
    exposed_comm_s: float
    optimizer_s: float
    num_micro_batches: int
    stages: list[StageOut]
    # capacity planning (job.tokens; paraplan/capacity/terms.py): names are a public contract
    time_to_train_days: float | None = None
    cost_usd: float | None = None
    effective_training_time_ratio: float | None = None
    expected_interruptions: float | None = None
    checkpoint_interval_s: float | None = None


class SolverOut(BaseModel):
    model_config = _OUT
    status: str
    wall_s: float
    objective_s: float
    bound_s: float
    gap: float
    time_limit_s: float
    workers: int
    seed: int
    num_layouts: int = Field(
        description="layouts (degrees, micro-batch, ZeRO, rank order) in the space searched"
    )
    num_layouts_pruned: int = Field(
        description="layouts left out of CP-SAT: proven worse by bound or by dominance, or unfit"
    )
    target: str | None = Field(
        None, description="solver.target: the framework whose runnable plans were searched"
    )


class Alternative(BaseModel):
    """A runner-up plan (``--top K``): its plan document, as the result's own plan."""

    model_config = _OUT
    summary: str = Field(description="the plan in one line")
    step_time_s: float
    step_time_band_s: StepTimeBandOut | None = None
    plan: PlanDoc
    runs_on: list[str] | None = Field(None, description="the frameworks that run it as it is")

    @field_validator("plan")
    @classmethod
    def _every_knob(cls, plan: PlanDoc) -> PlanDoc:
        return filled(plan)


class Result(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    plan: PlanDoc = Field(description="every knob of the plan (plan_doc.plan_doc)")
    predicted: Predicted
    solver: SolverOut | None = None
    runs_on: list[str] | None = Field(
        None,
        description="the frameworks whose exporter takes this plan as it is (paraplan "
        "export --to NAME); null in results from versions that did not check",
    )
    scenario: dict = Field(description="the scenario this result answers, for export")
    version: str
    alternatives: list[Alternative] = Field(default_factory=list, description="--top K runners-up")
    explanation: list[str] = Field(default_factory=list)
    cluster: ClusterOut | None = Field(None, description="the cluster (capacity planning: the one chosen)")
    training: TrainingOut | None = Field(None, description="time-to-train terms (job.tokens)")
    capacity: CapacityOut | None = Field(None, description="the cluster search (cluster.choose)")

    @field_validator("plan")
    @classmethod
    def _every_knob(cls, plan: PlanDoc) -> PlanDoc:
        return filled(plan)


def band_out(cluster: Cluster, step_time_s: float, moe: bool = False) -> StepTimeBandOut:
    """The uncertainty band of a step time predicted on ``cluster`` (hardware/uncertainty.py;
    ``moe``: the model has routed experts, whose band is their own)."""
    pools = cluster.pools or (cluster,)
    band = step_time_band([p.accelerator.generation for p in pools], moe=moe)
    calibrated = any(p.efficiency_override is not None for p in pools + (cluster,))
    source = band.source + (
        "; of the catalog model: a calibration profile is applied, its own residuals are in the profile"
        if calibrated
        else ""
    )
    return StepTimeBandOut(p10=band.p10_ratio * step_time_s, p90=band.p90_ratio * step_time_s, source=source)


def _reserved(m: StageMemory, b: Breakdown, stage: int) -> float:
    """A stage's reserved bytes, at most what its device has beyond the CUDA context and NCCL
    buffers: near capacity the caching allocator frees its cached blocks before it fails
    (cost/memory.py), so reserved saturates there (memory.md: rows at 96-97.6% of capacity)."""
    caps = b.stage_capacity_bytes or (b.memory_capacity_bytes,) * len(b.stage_memory)
    device = caps[stage] + b.memory_headroom_bytes
    return max(m.allocated_bytes, min(m.reserved_bytes, device - m.context_bytes))


def predicted_out(b: Breakdown, plan: Plan, band: StepTimeBandOut | None = None) -> Predicted:
    stages = [
        StageOut(
            stage=s,
            layers=plan.layers_per_stage[s],
            recompute=plan.recompute[s].value,
            pool=plan.stage_pools[s] if plan.stage_pools else None,
            time_per_micro_batch_s=b.stage_time_s[s],
            weights_bytes=m.weights_bytes,
            grads_bytes=m.grads_bytes,
            optimizer_bytes=m.optimizer_bytes,
            activations_bytes=m.activations_bytes,
            buffers_bytes=m.buffers_bytes,
            total_bytes=m.total_bytes,
            allocated_bytes=m.allocated_bytes,
            reserved_bytes=_reserved(m, b, s),
        )
        for s, m in enumerate(b.stage_memory)
    ]
    # the peak stage's own device memory (pooled clusters: its pool's), so peak <= capacity
    # reads the same as fits_memory
    peak_capacity = (
        b.stage_capacity_bytes[b.binding_stage] if b.stage_capacity_bytes else b.memory_capacity_bytes
    )
    return Predicted(
        step_time_s=b.step_time_s,
        step_time_band_s=band,
        tokens_per_s_per_gpu=b.tokens_per_s_per_gpu,
        model_flops_per_token=b.model_flops_per_token,
        model_tflops_per_gpu=b.model_tflops_per_gpu,
        mfu=b.mfu,
        peak_memory_bytes=b.peak_memory_bytes,
        peak_allocated_bytes=max(m.allocated_bytes for m in b.stage_memory),
        peak_reserved_bytes=max(_reserved(m, b, s) for s, m in enumerate(b.stage_memory)),
        memory_capacity_bytes=peak_capacity,
        memory_reserve_bytes=b.memory_reserve_bytes,
        memory_headroom_bytes=b.memory_headroom_bytes,
        fits_memory=b.fits,
        compute_s=b.compute_s,
        bubble_s=b.bubble_s,
        exposed_comm_s=b.exposed_comm_s,
        optimizer_s=b.optimizer_s,
        num_micro_batches=b.num_micro_batches,
        stages=stages,
    )


def paraplan_version() -> str:
    try:
        return version("paraplan")
    except PackageNotFoundError:
        return "0+unknown"


def evaluate_plan(inst: Instance, plan: Plan, solver: SolverOut | None = None, **extra: Any) -> Result:
    """Result of ``plan`` on the instance; ConfigError when the plan breaks a rule."""
    try:
        breakdown = cost_evaluate(inst.graph, inst.cluster, inst.job, plan)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return Result(
        plan=plan_doc(plan, inst.job),
        predicted=predicted_out(
            breakdown, plan, band_out(inst.cluster, breakdown.step_time_s, inst.graph.spec.is_moe)
        ),
        solver=solver,
        scenario=inst.scenario.model_dump(mode="json", exclude_none=True),
        version=paraplan_version(),
        **extra,
    )
