"""The scenario's ``plan:`` section: the I/O edge of cost.Plan. Its keys are Plan's fields (each
optional: a subset fixes those knobs, ``evaluate`` needs all) and the two values a result's plan
derives from them (``grad_accum``, ``num_devices``), so a result's plan reads back as it is;
the module checks on import that the keys stay Plan's. paraplan/instance.py and paraplan/api.py
turn it into a Plan or a PartialPlan through ``fields(Plan)`` (cost.plan.plan_from_values,
PartialPlan.from_values).

Written out rather than built from ``fields(Plan)`` with ``pydantic.create_model`` (tried: the
same JSON schema): a built model is opaque to type checkers, so every ``scenario.plan.<knob>``
read would be untyped, and each key's bounds and description are I/O facts Plan does not hold,
so a table keyed by field name would remain; the import check gives the same guarantee."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator

from paraplan.cost import Axis, CPComm, CudaGraphs, MoEDispatcher, Recompute
from paraplan.cost.plan import PLAN_FIELDS
from paraplan.graph.spec import show_value
from paraplan.hardware.topology import MAX_DEVICES, MAX_POOLS
from paraplan.section import MAX_GLOBAL_BATCH, MAX_LAYERS, Section

__all__ = ["PlanSection", "PLAN_SECTION_DERIVED"]


class PlanSection(Section):
    dp: int | None = Field(None, ge=1, le=MAX_DEVICES)
    tp: int | None = Field(None, ge=1, le=MAX_DEVICES)
    pp: int | None = Field(None, ge=1, le=MAX_LAYERS, description="pipeline stages (each holds a layer)")
    cp: int | None = Field(None, ge=1, le=MAX_DEVICES)
    ep: int | None = Field(None, ge=1, le=MAX_DEVICES)
    etp: int | None = Field(
        None, ge=1, le=MAX_DEVICES, description="expert tensor-parallel degree: tp (default) or 1"
    )
    cp_comm: CPComm | None = Field(None, description="context-parallel K/V exchange: p2p | all_gather")
    vp: int | None = Field(None, ge=1, le=MAX_LAYERS, description="virtual stages per pp rank")
    micro_batch: int | None = Field(None, ge=1, le=MAX_GLOBAL_BATCH)
    zero: int | None = Field(None, ge=0, le=3, description="ZeRO stage; 3 = fully sharded (FSDP)")
    sequence_parallel: bool | None = None
    recompute: Recompute | list[Recompute] | None = Field(
        None, description="none | selective | full, or one per pipeline stage"
    )
    recompute_layers: int | list[int] | None = Field(
        None,
        description="full recompute of only the first N layers of each chunk, the rest stored "
        "(Megatron --recompute-method block --recompute-num-layers N): one N for every "
        "full-recompute stage, or one per pipeline stage (0 on stages not full); default: every layer",
    )
    layers_per_stage: list[int] | None = Field(
        None, max_length=MAX_LAYERS, description="uneven pipeline stages"
    )
    layers_per_chunk: list[list[int]] | None = Field(
        None,
        max_length=MAX_LAYERS,
        description="interleaving with unequal virtual stages: one "
        "row of vp layer counts per pipeline stage (rank s chunk c = virtual stage c*pp + s); "
        "default: each stage's layers spread evenly, short chunks next to the embedding on stage "
        "0 and next to the loss elsewhere (Megatron's account-for-embedding/loss split)",
    )
    order: list[Axis] | None = Field(None, max_length=len(Axis), description="rank order, innermost first")
    stage_pools: list[int] | None = Field(
        None,
        max_length=MAX_LAYERS,
        description="pooled clusters: the pool (index in "
        "cluster.pools) of each pipeline stage; default for evaluate: every pool in cluster.pools "
        "order",
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
    grad_accum: int | None = Field(
        None,
        ge=1,
        le=MAX_GLOBAL_BATCH,
        description="micro-batches per step per dp rank, as a "
        "result's plan lists it: must equal job.global_batch / (micro_batch x dp)",
    )
    num_devices: int | None = Field(
        None,
        ge=1,
        le=MAX_DEVICES,
        description="devices the plan uses, as a result's plan lists it: must equal dp x tp x pp x cp",
    )

    @model_validator(mode="before")
    @classmethod
    def accept_result_plan(cls, data: Any) -> Any:
        """A result's plan as returned (``result.plan``): empty ``stage_pools``,
        ``layers_per_chunk``, ``recompute_layers`` and ``torus_shape`` mean none (a homogeneous
        cluster, the default chunks, every layer recomputed, not a TPU slice); ``recompute_per_stage`` is the
        per-stage form of ``recompute`` and must agree with it. The result's plan object itself is read as its
        dict, so ``Scenario(..., plan=result.plan)`` works."""
        if isinstance(data, BaseModel) and not isinstance(data, PlanSection):
            data = data.model_dump()
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for key in ("stage_pools", "layers_per_chunk", "recompute_layers", "torus_shape"):
            if data.get(key) == []:
                del data[key]
        if "recompute_per_stage" in data:
            per_stage = data.pop("recompute_per_stage")
            given = data.get("recompute")
            if per_stage is None:
                return data
            if not isinstance(per_stage, list) or not per_stage:
                raise ValueError(
                    f"plan.recompute_per_stage={show_value(per_stage)} must list one "
                    "recompute mode per pipeline stage"
                )
            same = (
                given is None
                or given == per_stage
                or (isinstance(given, str) and all(m == given for m in per_stage))
            )
            if not same:
                raise ValueError(
                    f"plan.recompute_per_stage={show_value(per_stage)} disagrees with "
                    f"plan.recompute={show_value(given)}; give one of them"
                )
            if given is None:
                data["recompute"] = per_stage
        return data

    @model_validator(mode="after")
    def check_num_devices(self) -> PlanSection:
        degrees = (self.dp, self.tp, self.pp)
        if self.num_devices is not None and None not in degrees:
            used = self.dp * self.tp * self.pp * (self.cp or 1)  # type: ignore[operator]
            if used != self.num_devices:
                raise ValueError(
                    f"plan.num_devices={self.num_devices} but dp x tp x pp x cp = "
                    f"{used}; fix the degrees or drop plan.num_devices"
                )
        return self

    torus_shape: list[int] | None = Field(
        None,
        max_length=3,
        description="TPU slices: the slice's torus shape, e.g. [4, 8, 16] "
        "(v4/v5p slices of whole cubes may take any shape; default: the most cubic)",
    )

    @field_validator("recompute")
    @classmethod
    def check_recompute_length(
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
    def check_recompute_layers(cls, v: int | list[int] | None) -> int | list[int] | None:
        counts = v if isinstance(v, list) else [] if v is None else [v]
        if isinstance(v, list) and not 1 <= len(v) <= MAX_LAYERS:
            raise ValueError(f"lists {len(v):,} stages; give one count per pipeline stage")
        if isinstance(v, int) and v < 1:
            raise ValueError(f"{v} recomputes no layer; give at least 1 (or plan.recompute=none for none)")
        if any(n < 0 or n > MAX_LAYERS for n in counts):
            raise ValueError(f"counts run from 0 to {MAX_LAYERS:,} layers; got {show_value(v)}")
        return v

    @field_validator("layers_per_stage")
    @classmethod
    def check_layers_positive(cls, v: list[int] | None) -> list[int] | None:
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
    def check_chunks_positive(cls, v: list[list[int]] | None) -> list[list[int]] | None:
        if v is None:
            return v
        for s, row in enumerate(v):
            if not row or len(row) > MAX_LAYERS or any(n < 1 or n > MAX_LAYERS for n in row):
                raise ValueError(
                    f"row {s} = {show_value(row)}: each pipeline stage lists vp "
                    f"virtual-stage layer counts, each from 1 to {MAX_LAYERS:,}"
                )
        return v

    @field_validator("stage_pools")
    @classmethod
    def check_pool_indices(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and any(not 0 <= i < MAX_POOLS for i in v):
            raise ValueError(
                f"pool indices run from 0 to {MAX_POOLS - 1} (at most {MAX_POOLS} pools); got {show_value(v)}"
            )
        return v


PLAN_SECTION_DERIVED = frozenset({"grad_accum", "num_devices"})
"""plan: keys beyond the Plan's fields: values derived from it, as a result lists them."""
if set(PlanSection.model_fields) != set(PLAN_FIELDS) | PLAN_SECTION_DERIVED:  # a knob added to Plan only
    raise TypeError(
        f"PlanSection's keys must be Plan's fields {PLAN_FIELDS} and {sorted(PLAN_SECTION_DERIVED)}"
    )
