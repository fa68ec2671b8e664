"""What every section of a scenario shares: the limits of its keys and the ``Section`` base
(unknown keys refused, values frozen, true/false refused for whole numbers), and the small value
types of its keys (``CapacityRouting``). paraplan/scenario/schema.py and paraplan/scenario/plan_doc.py
build the sections on it."""

from __future__ import annotations

from typing import Any, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from paraplan.graph.spec import MODEL_LIMITS

__all__ = [
    "STRICT",
    "Section",
    "CapacityRouting",
    "MAX_SEQ_LEN",
    "MAX_GLOBAL_BATCH",
    "MAX_TOKENS_PER_STEP",
    "MAX_LAYERS",
    "MAX_SEARCH_MICRO_BATCH",
    "MAX_SEARCH_VP",
    "MAX_LOSS_CHUNKS",
]

# Limits of the scenario's job, plan and solver keys (README "Limits"; the model's are
# graph.spec.MODEL_LIMITS, the cluster's hardware.topology.MAX_DEVICES and MAX_POOLS). Each is far
# beyond any real training job, so absurd sizes are refused at once instead of searched for minutes.
MAX_SEQ_LEN = 16_777_216
"""Tokens per sequence: 16x the 1M-token contexts paraplan plans today."""
MAX_GLOBAL_BATCH = 16_777_216
"""Sequences per optimizer step: ~1,000x the largest published batches."""
MAX_TOKENS_PER_STEP = 2**32
"""seq_len x global_batch: ~250x the 16M-token steps of the largest published runs; keeps step
times far inside the solver's 64-bit ticks (a 10^15-token step overflowed them)."""
MAX_LAYERS = MODEL_LIMITS["num_layers"]
"""Longest per-stage list (layers_per_stage, recompute, stage_pools): one entry per stage, and a
stage holds at least one layer."""
MAX_SEARCH_MICRO_BATCH = 1_024
"""solver.max_micro_batch: sequences per micro-batch the search considers."""
MAX_SEARCH_VP = 64
"""solver.max_vp: interleaving degrees the search considers (real runs use at most ~24)."""
MAX_LOSS_CHUNKS = 4_096
"""job.loss_chunks: 512x torchtitan's default 8 chunks (a chunk is at least one token)."""
STRICT = ConfigDict(extra="forbid", frozen=True)
"""Every scenario model: unknown keys refused, values frozen."""


def _takes_int(annotation: Any) -> bool:
    """The annotation is int, int | None or a list of ints (not bool, which subclasses int)."""
    if annotation is int:
        return True
    return any(_takes_int(a) for a in get_args(annotation))


class Section(BaseModel):
    """A scenario section: unknown keys refused, values frozen, and true/false refused where a
    whole number is expected (pydantic would read true as 1: `layers: true` is one layer)."""

    model_config = STRICT

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_int(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if field is None or not _takes_int(field.annotation) or _takes_bool(field.annotation):
            return value
        if isinstance(value, bool):
            raise ValueError(f"{value!r} is true/false; give a whole number")
        if isinstance(value, list) and any(isinstance(v, bool) for v in _flat(value)):
            raise ValueError("holds true/false; give whole numbers")
        return value


def _flat(values: list) -> list:
    return [x for v in values for x in (_flat(v) if isinstance(v, list) else [v])]


def _takes_bool(annotation: Any) -> bool:
    return annotation is bool or any(_takes_bool(a) for a in get_args(annotation))


class CapacityRouting(BaseModel):
    """``job.moe_routing: {capacity_factor: F}``: experts take at most F x their mean share of
    the routed tokens and drop the rest (Megatron ``--moe-expert-capacity-factor F``)."""

    model_config = {"extra": "forbid"}
    capacity_factor: float = Field(ge=1.0, le=16.0, allow_inf_nan=False)
