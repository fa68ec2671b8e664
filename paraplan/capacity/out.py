"""The capacity parts of a Result (JSON names are a public contract, issue 25): ``cluster``
({preset, gpus, nodes}), ``training`` (every term of the time to train, with its source) and
``capacity`` (the cluster search: status, bound, the clusters listed, the explanation)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ClusterOut", "TrainingOut", "ClusterOption", "CapacityOut"]

_FROZEN = ConfigDict(extra="forbid", frozen=True)


class ClusterOut(BaseModel):
    model_config = _FROZEN
    preset: str
    gpus: int
    nodes: int


class TrainingOut(BaseModel):
    """The terms behind predicted.time_to_train_days (cost/reliability.py)."""

    model_config = _FROZEN
    tokens: float
    steps: int
    compute_days: float
    failure_rate_per_gpu_hour: float
    mtbf_h: float
    checkpoint_bytes: float
    checkpoint_stall_s: float
    checkpoint_write_s: float
    checkpoint_restore_s: float
    checkpoint_steps: int
    young_interval_s: float
    restart_s: float
    lost_per_failure_s: float
    stall_fraction: float
    failure_fraction: float
    storage: str
    gpus_paid: int
    gpu_hours: float
    price_per_gpu_hour: float | None
    price_source: str | None
    time_to_train_band_days: list[float] = Field(
        description="[p10, p90] of the step-time band carried to the time to train"
    )


class ClusterOption(BaseModel):
    """One cluster the search solved (``--top K`` lists the K best distinct clusters)."""

    model_config = _FROZEN
    preset: str
    gpus: int
    nodes: int
    time_to_train_days: float
    cost_usd: float | None
    effective_training_time_ratio: float
    step_time_s: float
    plan: str
    status: str


class CapacityOut(BaseModel):
    model_config = _FROZEN
    objective: str
    status: str = Field(description="OPTIMAL: the cluster is proven best under the model; FEASIBLE: see gap")
    objective_value: float
    bound: float
    gap: float
    candidates: int
    solved: int
    pruned_by_bound: int
    pruned_by_limits: int
    infeasible: int = Field(description="proven to have no plan (no layout divides the count, or none fits)")
    not_examined: int
    wall_s: float
    clusters: list[ClusterOption] = Field(default_factory=list, description="best first, distinct clusters")
    examined: list[ClusterOption] = Field(
        default_factory=list, description="every cluster solved, in the order solved (the report's scatter)"
    )
    next_cheaper: ClusterOption | None = None
    next_faster: ClusterOption | None = None
    explanation: list[str] = Field(default_factory=list)
