"""The plan document: cost.Plan's knobs at the I/O edge, declared once (as megatron-core's
``ModelParallelConfig`` declares its parallel settings once, with their doc and metadata).

One pydantic model, ``PlanDoc``, is the scenario's ``plan:`` (any subset of the knobs: the ones
given are fixed, the rest left to the solver; ``evaluate`` needs ``REQUIRED_KNOBS``), the
result's ``plan`` (every field filled by ``plan_doc(plan, job)``) and the plan of each of a
result's alternatives. Its keys are Plan's fields and the values a result derives from them
(``DERIVED``: ``grad_accum``, ``num_devices``, ``recompute_per_stage``); the module checks on
import that they stay so. Enum-valued knobs hold their values (the JSON's strings), so a dump of
a document is the JSON a result prints.

The one reading of a document into the knobs it fixes (a cost.PartialPlan), which solve and
evaluate share, is paraplan/scenario/plan_knobs.py ``fixed_knobs_of``.

Written out rather than built from ``fields(Plan)`` with ``pydantic.create_model``: a built
model is opaque to type checkers, and each key's bounds and description are I/O facts Plan does
not hold; the import check keeps the keys Plan's.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field, field_validator

from paraplan.cost import Axis, CPComm, CudaGraphs, Job, MoEDispatcher, Plan, Recompute
from paraplan.cost.plan import (
    PLAN_FIELDS,
    chunk_layers,
    is_even_chunks,
    plan_from_values,
    plan_values,
)
from paraplan.cost.pp_schedule import PPSchedule, implied_schedule, resolved_schedule
from paraplan.graph.spec import show_value
from paraplan.hardware.topology import MAX_DEVICES, MAX_POOLS
from paraplan.scenario.section import MAX_GLOBAL_BATCH, MAX_LAYERS, STRICT, Section

__all__ = [
    "PlanDoc",
    "DERIVED",
    "REQUIRED_KNOBS",
    "RESULT_KEYS",
    "plan_doc",
    "plan_of",
    "filled",
    "given",
]


class PlanDoc(Section):
    """A plan at the I/O edge: each key optional in a scenario (None = left to the solver), every
    key filled in a result (``plan_doc``). Keys are in the order a result prints them."""

    model_config = ConfigDict(**STRICT, use_enum_values=True)

    dp: int | None = Field(None, ge=1, le=MAX_DEVICES, description="data-parallel degree")
    tp: int | None = Field(None, ge=1, le=MAX_DEVICES, description="tensor-parallel degree")
    pp: int | None = Field(None, ge=1, le=MAX_LAYERS, description="pipeline stages (each holds a layer)")
    cp: int | None = Field(None, ge=1, le=MAX_DEVICES, description="context-parallel degree")
    ep: int | None = Field(None, ge=1, le=MAX_DEVICES, description="expert-parallel degree")
    etp: int | None = Field(
        None,
        ge=1,
        le=MAX_DEVICES,
        description="expert tensor-parallel degree: tp or 1; in a result, null = tp",
    )
    cp_comm: CPComm | None = Field(None, description="context-parallel K/V exchange: p2p | all_gather")
    vp: int | None = Field(None, ge=1, le=MAX_LAYERS, description="virtual stages per pp rank")
    micro_batch: int | None = Field(None, ge=1, le=MAX_GLOBAL_BATCH, description="sequences per micro-batch")
    grad_accum: int | None = Field(
        None,
        ge=1,
        le=MAX_GLOBAL_BATCH,
        description="derived: micro-batches per step per dp rank; given, it must equal "
        "job.global_batch / (micro_batch x dp)",
    )
    zero: int | None = Field(None, ge=0, le=3, description="ZeRO stage; 3 = fully sharded (FSDP)")
    sequence_parallel: bool | None = Field(
        None, description="sequence parallelism beside tp (default: on when tp > 1)"
    )
    recompute: Recompute | list[Recompute] | None = Field(
        None,
        description="none | selective | full, or one per pipeline stage (a result lists one mode "
        "when every stage shares it)",
    )
    recompute_per_stage: list[Recompute] | None = Field(
        None,
        description="derived: one recompute mode per pipeline stage; given, it must agree with recompute",
    )
    recompute_layers: int | list[int] | None = Field(
        None,
        description="full recompute of only the first N layers of each chunk, the rest stored "
        "(Megatron --recompute-method block --recompute-num-layers N): one N for every "
        "full-recompute stage, or one per pipeline stage (0 on stages not full); empty or "
        "unset: every layer of a full-recompute stage",
    )
    layers_per_stage: list[int] | None = Field(
        None, max_length=MAX_LAYERS, description="layers per pipeline stage (default: even)"
    )
    layers_per_chunk: list[list[int]] | None = Field(
        None,
        max_length=MAX_LAYERS,
        description="interleaving with unequal virtual stages: one row of vp layer counts per "
        "pipeline stage (rank s chunk c = virtual stage c*pp + s); empty or unset: each stage's "
        "layers spread evenly, short chunks next to the embedding on stage 0 and next to the "
        "loss elsewhere (Megatron's account-for-embedding/loss split)",
    )
    order: list[Axis] | None = Field(
        None, max_length=len(Axis), description="rank order, innermost first (default tp, cp, dp, pp)"
    )
    num_devices: int | None = Field(
        None,
        ge=1,
        le=MAX_DEVICES,
        description="derived: devices the plan uses; given, it must equal dp x tp x pp x cp",
    )
    stage_pools: list[int] | None = Field(
        None,
        max_length=MAX_LAYERS,
        description="pooled clusters: the pool (index in cluster.pools) of each pipeline stage; "
        "empty or unset: every pool in cluster.pools order",
    )
    torus_shape: list[int] | None = Field(
        None,
        max_length=3,
        description="TPU slices: the slice's torus shape, e.g. [4, 8, 16] (v4/v5p slices of "
        "whole cubes may take any shape); empty or unset: the most cubic",
    )
    moe_dispatcher: MoEDispatcher | None = Field(
        None,
        description="MoE token dispatch: alltoall (NCCL all-to-all; default) | allgather | deepep "
        "| hybridep (one copy per destination node, forwarded over NVLink)",
    )
    moe_overlap: bool | None = Field(
        None,
        description="EP all-to-all hidden under another micro-batch's compute (Megatron "
        "--overlap-moe-expert-parallel-comm; needs interleaving when pp > 1); default off",
    )
    cuda_graphs: CudaGraphs | None = Field(
        None,
        description="captured CUDA graphs: none (default) | partial (attention, router, MoE "
        "preprocess) | full (whole layers)",
    )
    pp_schedule: PPSchedule | None = Field(
        None,
        description="pipeline schedule: 1f1b (vp=1) | interleaved (vp>1) | zb1p (zero bubble) | "
        "dualpipe (two parameter copies, even pp, vp=1) | dualpipev (vp=2); unset: what vp implies "
        "(or the solver's choice among those the target runs)",
    )

    @field_validator("recompute", "recompute_per_stage")
    @classmethod
    def _check_recompute_length(
        cls, v: Recompute | list[Recompute] | None
    ) -> Recompute | list[Recompute] | None:
        if isinstance(v, list) and len(v) > MAX_LAYERS:
            raise ValueError(
                f"lists {len(v):,} stages; at most {MAX_LAYERS:,} (one per stage, "
                "and a stage holds at least one layer)"
            )
        return v

    @field_validator("recompute_layers")
    @classmethod
    def _check_recompute_layers(cls, v: int | list[int] | None) -> int | list[int] | None:
        counts = v if isinstance(v, list) else [] if v is None else [v]
        if isinstance(v, list) and len(v) > MAX_LAYERS:
            raise ValueError(f"lists {len(v):,} stages; give one count per pipeline stage")
        if isinstance(v, int) and v < 1:
            raise ValueError(f"{v} recomputes no layer; give at least 1 (or plan.recompute=none for none)")
        if any(n < 0 or n > MAX_LAYERS for n in counts):
            raise ValueError(f"counts run from 0 to {MAX_LAYERS:,} layers; got {show_value(v)}")
        return v

    @field_validator("layers_per_stage")
    @classmethod
    def _check_layers_positive(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and any(n < 1 for n in v):
            raise ValueError(f"every stage needs at least one layer; got {show_value(v)}")
        if v is not None and any(n > MAX_LAYERS for n in v):
            raise ValueError(
                f"a stage of {show_value(max(v))} layers exceeds paraplan's limit of "
                f'{MAX_LAYERS:,} layers (README "Limits")'
            )
        return v

    @field_validator("layers_per_chunk")
    @classmethod
    def _check_chunks_positive(cls, v: list[list[int]] | None) -> list[list[int]] | None:
        for s, row in enumerate(v or []):
            if not row or len(row) > MAX_LAYERS or any(n < 1 or n > MAX_LAYERS for n in row):
                raise ValueError(
                    f"row {s} = {show_value(row)}: each pipeline stage lists vp "
                    f"virtual-stage layer counts, each from 1 to {MAX_LAYERS:,}"
                )
        return v

    @field_validator("stage_pools")
    @classmethod
    def _check_pool_indices(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and any(not 0 <= i < MAX_POOLS for i in v):
            raise ValueError(
                f"pool indices run from 0 to {MAX_POOLS - 1} (at most {MAX_POOLS} pools); got {show_value(v)}"
            )
        return v


DERIVED = frozenset({"grad_accum", "num_devices", "recompute_per_stage"})
"""The document's keys beyond Plan's fields: values a result derives from the plan."""
if set(PlanDoc.model_fields) != set(PLAN_FIELDS) | DERIVED:  # a knob added to Plan only
    raise TypeError(f"PlanDoc's keys must be Plan's fields {PLAN_FIELDS} and {sorted(DERIVED)}")

REQUIRED_KNOBS = ("dp", "tp", "pp", "micro_batch", "zero", "recompute")
"""The knobs ``evaluate`` needs fixed; the others have defaults (instance.fixed_plan)."""
RESULT_KEYS = (
    "dp",
    "tp",
    "pp",
    "cp",
    "ep",
    "vp",
    "micro_batch",
    "grad_accum",
    "zero",
    "sequence_parallel",
    "recompute",
    "recompute_per_stage",
    "layers_per_stage",
    "order",
    "num_devices",
)
"""The keys every result's plan has listed since the first version (the others were added
later and take Plan's defaults when a result file lacks them; ``filled``)."""


def plan_doc(plan: Plan, job: Job) -> PlanDoc:
    """``plan`` as a result lists it: every field (cost.plan.plan_values), ``recompute`` one mode
    when every stage shares it, ``layers_per_chunk`` empty when the chunks are even, and the
    derived ``grad_accum``, ``num_devices`` and ``recompute_per_stage``."""
    values = plan_values(plan)
    modes = values["recompute"]
    rows = [] if is_even_chunks(plan) else [list(r) for r in chunk_layers(plan)]
    schedule = resolved_schedule(plan.pp_schedule, plan.vp).value
    return PlanDoc(
        **{
            **values,
            "recompute": modes[0] if len(set(modes)) == 1 else modes,
            "layers_per_chunk": rows,
            "pp_schedule": schedule,
        },
        recompute_per_stage=modes,
        grad_accum=plan.num_micro_batches(job),
        num_devices=plan.num_devices,
    )


def filled(doc: PlanDoc) -> PlanDoc:
    """A result's plan with every key: ValueError naming the ``RESULT_KEYS`` it lacks; the keys
    added since take Plan's defaults (a result file from an older version)."""
    missing = [k for k in RESULT_KEYS if getattr(doc, k) is None]
    if missing:
        raise ValueError(f"a result's plan lists every knob; missing {', '.join(missing)}")
    later = {k: v for k, v in plan_values(plan_of(doc)).items() if v is not None and getattr(doc, k) is None}
    return doc.model_copy(update=later) if later else doc


def plan_of(doc: PlanDoc) -> Plan:
    """The cost model's Plan of a result's plan (``plan_doc`` undone: one recompute mode per pp
    rank; a key left out takes Plan's default). ValueError on a broken rule."""
    values = doc.model_dump(include=set(PLAN_FIELDS), exclude_none=True)
    if values.get("pp_schedule") == implied_schedule(values.get("vp", 1)):
        del values["pp_schedule"]  # what vp implies: written out by plan_doc, a default here
    return plan_from_values({**values, "recompute": doc.recompute_per_stage or values.get("recompute")})


def given(doc: PlanDoc) -> dict[str, Any]:
    """The keys ``doc`` fixes, as given: None and empty lists (a result's "none") dropped."""
    return {k: v for k, v in doc.model_dump(exclude_none=True).items() if v != []}
