"""What the serving renderers share: the engine check, the per-role memory, per-rank batch limits,
one launch command per worker kind (``launches``; each engine gives only its argv and side files),
the aggregated-only check of the single-argv renders, and the text around them."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from paraplan.cost.serving import ServingPlan, ServingPrediction, Workload
from paraplan.errors import ExportError
from paraplan.hardware import Cluster
from paraplan.rules.serving import (
    ENGINE_VERSIONS,
    EngineWorker,
    GpuMemory,
    check_engine,
    kv_fraction,
    plan_workers,
    rank_limit,
)

__all__ = [
    "Memory",
    "Launch",
    "gpu_memory",
    "memory_for",
    "checked_workers",
    "ArgvOf",
    "launches",
    "check_aggregated",
    "weights_note",
    "fraction",
    "per_rank",
    "script",
]

Memory = GpuMemory | Mapping[str, GpuMemory]
"""One GpuMemory for every worker, or one per role ("prefill", "decode"; "aggregated")."""


def gpu_memory(predicted: ServingPrediction, cluster: Cluster) -> GpuMemory:
    """The per-GPU memory of a prediction on ``cluster``'s GPU (one figure for every worker:
    ServingPrediction has one set, the decode worker's when disaggregated)."""
    return GpuMemory(
        weights_bytes=predicted.weights_bytes,
        kv_cache_bytes=predicted.kv_cache_bytes,
        activation_bytes=predicted.activation_bytes,
        buffer_bytes=predicted.buffer_bytes,
        capacity_bytes=cluster.memory_capacity_bytes,
    )


def memory_for(memory: Memory, worker: EngineWorker) -> GpuMemory:
    if isinstance(memory, GpuMemory):
        return memory
    key = worker.role or "aggregated"
    if key not in memory:
        raise ExportError(f"no predicted memory for the {key} workers ({worker.field}); give {key!r}")
    return memory[key]


@dataclass(frozen=True)
class Launch:
    """One kind of engine instance to start ``count`` times: its argv and the files it reads."""

    role: str | None
    count: int
    gpus: int
    argv: list[str]
    files: dict[str, str]

    @property
    def label(self) -> str:
        what = f"{self.role} worker" if self.role else "replica"
        plural = "s" if self.count > 1 else ""
        return f"{self.count} {what}{plural} of {self.gpus} GPU{'s' if self.gpus > 1 else ''} each"


def checked_workers(
    engine: str,
    plan: ServingPlan,
    workload: Workload,
    cluster: Cluster | None,
    max_model_len: int | None,
) -> tuple[EngineWorker, ...]:
    """The plan's workers once ``engine`` is known to run every setting (ExportError otherwise,
    naming the field, the value, the rule and the engines that run it)."""
    if cluster is not None:
        try:
            check_engine(engine, plan, workload, cluster, max_model_len=max_model_len)
        except ValueError as e:
            raise ExportError(str(e)) from None
    return plan_workers(plan)


ArgvOf = Callable[[EngineWorker, GpuMemory], tuple[list[str], dict[str, str]]]
"""One worker's launch: its argv and the side files it reads (file name -> text), given the
per-GPU memory of its role."""


def launches(
    engine: str,
    plan: ServingPlan,
    workload: Workload,
    memory: Memory,
    argv_of: ArgvOf,
    *,
    cluster: Cluster | None,
    max_model_len: int | None,
) -> list[Launch]:
    """One Launch per worker kind of ``plan`` (replica, or prefill and decode workers) once
    ``engine`` is known to run it (``checked_workers``): ``argv_of`` the worker with its role's
    memory (``memory_for``)."""
    out = []
    for w in checked_workers(engine, plan, workload, cluster, max_model_len):
        argv, files = argv_of(w, memory_for(memory, w))
        out.append(Launch(w.role, w.count, w.gpus, argv, files))
    return out


def check_aggregated(engine: str, plan: ServingPlan) -> None:
    """A render of one replica's argv needs an aggregated plan: ExportError for a disaggregated one
    (its two pools: ``<engine>_launches``, or the Dynamo export for one deployment of both)."""
    if plan.mode != "aggregated":
        raise ExportError(
            f"plan.mode=disaggregated has a prefill and a decode pool: use {engine}_launches, "
            "or export to dynamo for one deployment of both"
        )


def weights_note(workload: Workload, model_id: str) -> str:
    """The launch scripts' note on the checkpoint: the engines read the weights' format from it."""
    return f"weights {workload.weights_precision}: {model_id} must be a checkpoint in that format"


def fraction(engine: str, memory: GpuMemory, worker: EngineWorker) -> str:
    """The engine's KV memory knob for ``memory``, as written (ExportError naming the workers when
    none fits)."""
    try:
        return f"{kv_fraction(engine, memory):g}"
    except ValueError as e:
        raise ExportError(f"{engine}, {worker.role or 'replica'} workers ({worker.field}): {e}") from None


per_rank = rank_limit


def script(engine: str, model_id: str, launches: list[Launch], notes: list[str]) -> str:
    """A shell script: a header, each launch with its count, and the files the launches read."""
    lines = [
        "#!/usr/bin/env bash",
        f"# paraplan serving export for {engine} {ENGINE_VERSIONS[engine]}: {model_id}",
    ]
    lines += [f"# {n}" for n in notes]
    for launch in launches:
        for name, text in launch.files.items():
            lines += ["", f"cat > {name} <<'YAML'", text.rstrip("\n"), "YAML"]
        lines += ["", f"# {launch.label}: start each with", shlex.join(launch.argv)]
    return "\n".join(lines) + "\n"
