"""The capacity sections of a scenario (pydantic; paraplan/scenario/schema.py attaches them):

cluster.choose:  {presets: [dgx-h100, dgx-b200, gb200-nvl72], min_gpus, max_gpus, step}
cluster.price_per_gpu_hour: USD, or {node preset: USD} under choose (default hardware/data/prices.yaml)
cluster.storage: a tier of hardware/data/storage.yaml, or {write_GBps, read_GBps}
job.tokens, job.deadline_days, job.budget_usd;  objective: time_to_train | cost | gpus
reliability:     failure rate, checkpoint stall / restore / interval, restart, spare nodes
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from paraplan.cost.reliability import DEFAULT_RESTART_S, LLAMA3_FAILURE_RATE_PER_GPU_HOUR
from paraplan.hardware.topology import MAX_DEVICES
from paraplan.scenario.section import Section

if TYPE_CHECKING:
    from paraplan.scenario.schema import Scenario

__all__ = [
    "ChooseSection",
    "StorageSection",
    "ReliabilitySection",
    "Objective",
    "MAX_TOKENS",
    "CAPACITY_JOB_KEYS",
    "MAX_CHOICES",
    "MAX_DAYS",
    "MAX_USD",
    "check_capacity",
]

CAPACITY_JOB_KEYS = ("tokens", "deadline_days", "budget_usd")
"""job keys of capacity planning, not of the cost model's Job."""
MAX_TOKENS = 1e16
"""job.tokens: ~600x the largest published pre-training budgets (15-36T tokens)."""
MAX_CHOICES = 16
"""cluster.choose.presets: node types compared in one search."""
MAX_DAYS = 36_500.0
"""job.deadline_days: a century."""
MAX_USD = 1e13
"""job.budget_usd."""

Objective = Literal["time_to_train", "cost", "gpus"]
"""``objective``: least wall-clock time to train, least cost, or fewest GPUs (then least time);
each under ``job.deadline_days`` and ``job.budget_usd`` when given."""


class ChooseSection(Section):
    presets: list[str] = Field(
        min_length=1,
        max_length=MAX_CHOICES,
        description="node types to choose from (dgx-h100, dgx-b200, gb200-nvl72, ...)",
    )
    min_gpus: int = Field(1, ge=1, le=MAX_DEVICES, description="fewest GPUs considered")
    max_gpus: int = Field(ge=1, le=MAX_DEVICES, description="most GPUs considered")
    step: Literal["node", "double"] | int = Field(
        "node",
        description="GPU counts considered: node (every whole number of nodes), double (one node "
        "doubled: 1, 2, 4, ... nodes) or N (every multiple of N GPUs)",
    )

    @model_validator(mode="after")
    def check_range(self) -> ChooseSection:
        if self.min_gpus > self.max_gpus:
            raise ValueError(
                f"cluster.choose.min_gpus={self.min_gpus} exceeds max_gpus={self.max_gpus}; "
                "give min_gpus <= max_gpus"
            )
        if isinstance(self.step, int) and not 1 <= self.step <= MAX_DEVICES:
            raise ValueError(f"cluster.choose.step={self.step} must be node, double or 1 to {MAX_DEVICES:,}")
        if len(set(self.presets)) != len(self.presets):
            raise ValueError(f"cluster.choose.presets={self.presets} lists a node type twice")
        return self


class StorageSection(Section):
    write_GBps: float = Field(gt=0, le=1e7, allow_inf_nan=False, description="aggregate write GB/s")
    read_GBps: float = Field(gt=0, le=1e7, allow_inf_nan=False, description="aggregate read GB/s")


class ReliabilitySection(Section):
    failure_rate_per_gpu_hour: float = Field(
        LLAMA3_FAILURE_RATE_PER_GPU_HOUR,
        ge=0.0,
        le=1.0,
        allow_inf_nan=False,
        description="interruptions per GPU-hour (default 1.97e-5: Llama 3, arXiv 2407.21783 Sec. 3.3.4)",
    )
    restart_s: float = Field(
        DEFAULT_RESTART_S, ge=0.0, le=1e6, allow_inf_nan=False, description="detect, replace and relaunch"
    )
    checkpoint_stall_s: float | None = Field(
        None, ge=0.0, le=1e6, allow_inf_nan=False, description="training paused per checkpoint"
    )
    checkpoint_restore_s: float | None = Field(
        None, ge=0.0, le=1e6, allow_inf_nan=False, description="reading a checkpoint back"
    )
    checkpoint_interval_s: float | None = Field(
        None, gt=0.0, le=1e8, allow_inf_nan=False, description="fixed interval (default: Young/Daly)"
    )
    async_checkpoint: bool = Field(True, description="write checkpoints in the background")
    spare_nodes: int = Field(0, ge=0, le=MAX_DEVICES, description="hot spare nodes, paid and idle")


def check_capacity(sc: Scenario) -> None:
    """ValueError naming the field unless the capacity keys come together: cluster.choose,
    objective, job.deadline_days and job.budget_usd need job.tokens; a price mapping needs
    cluster.choose."""
    job, cluster = sc.job, sc.cluster
    needs = [
        name
        for name, value in (
            ("cluster.choose", cluster.choose),
            ("objective", sc.objective),
            ("job.deadline_days", job.deadline_days),
            ("job.budget_usd", job.budget_usd),
        )
        if value is not None
    ]
    if needs and job.tokens is None:
        raise ValueError(
            f"{needs[0]} needs job.tokens (the training token budget, e.g. 15e12) to compute the "
            "time to train"
        )
    if cluster.choose is not None and cluster.pools is not None:
        raise ValueError("give either cluster.choose or cluster.pools, not both")
    if isinstance(cluster.price_per_gpu_hour, dict):
        if cluster.choose is None:
            raise ValueError(
                "cluster.price_per_gpu_hour lists prices per node preset only under cluster.choose; "
                "give one number for this cluster"
            )
        extra = sorted(set(cluster.price_per_gpu_hour) - set(cluster.choose.presets))
        if extra:
            raise ValueError(
                f"cluster.price_per_gpu_hour names {extra}, not in cluster.choose.presets="
                f"{cluster.choose.presets}"
            )
    if sc.objective is not None and cluster.choose is None and sc.objective == "gpus":
        raise ValueError("objective: gpus chooses a GPU count; give cluster.choose")
