"""A serving result (paraplan.serving's ``ServingResult``, or its JSON as a dict) as the renderers'
inputs: the ServingPlan, the Workload, the engine, the cluster, the model id and the per-GPU memory.

Read by field name only (``kind: serving``, ``plan``, ``predicted.memory_per_gpu`` and
``predicted.memory_capacity_bytes``, ``scenario.{model, cluster, workload, engine}``), so it needs
nothing of the front door's types."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paraplan.cost.serving import Engine, ServingPlan, WorkerPlan, Workload
from paraplan.errors import ExportError
from paraplan.graph import ModelSpec, from_fields, from_hf_config, preset
from paraplan.hardware import Cluster, build_cluster
from paraplan.rules.serving import GpuMemory
from paraplan.rules.serving_memory import pool_memories

__all__ = ["ServingExportInput", "is_serving_result", "read_serving_result"]

HF_DIR = Path(__file__).resolve().parents[3] / "graph" / "data" / "hf"


@dataclass(frozen=True)
class ServingExportInput:
    plan: ServingPlan
    workload: Workload
    engine: str
    cluster: Cluster
    model_id: str
    memory: GpuMemory | dict[str, GpuMemory]  # one for all workers, or per role (disaggregated)
    model_note: str | None = None  # set when model_id is a stand-in for the checkpoint to serve


def _plain(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    return dump() if callable(dump) else value


def is_serving_result(result: object) -> bool:
    """Whether ``result`` is a serving result (``kind: serving``)."""
    kind = result.get("kind") if isinstance(result, dict) else getattr(result, "kind", None)
    return kind == "serving"


def _plan(data: dict[str, Any]) -> ServingPlan:
    common = {k: data[k] for k in ("max_batch", "max_num_tokens", "chunked_prefill")}
    if data["mode"] == "disaggregated":
        return ServingPlan(
            mode="disaggregated",
            prefill=WorkerPlan(**data["prefill"]),
            decode=WorkerPlan(**data["decode"]),
            **common,
        )
    knobs = {k: data[k] for k in ("tp", "pp", "ep", "dp_attention", "replicas") if data.get(k) is not None}
    return ServingPlan(mode="aggregated", **knobs, **common)


def _length(value: Any) -> tuple[float, float | None]:
    if isinstance(value, dict):
        return float(value["mean"]), (float(value["p90"]) if value.get("p90") is not None else None)
    return float(value), None


def _workload(w: dict[str, Any]) -> Workload:
    isl, isl_p90 = _length(w["isl"])
    osl, osl_p90 = _length(w["osl"])
    slo = w.get("slo") or {}
    return Workload(
        isl=isl,
        osl=osl,
        isl_p90=isl_p90,
        osl_p90=osl_p90,
        concurrency=w.get("concurrency"),
        request_rate=w.get("request_rate"),
        ttft_ms=slo.get("ttft_ms"),
        tpot_ms=slo.get("tpot_ms"),
        percentile=int(slo.get("percentile", 90)),
        weights_precision=w.get("weights_precision", "bf16"),
        kv_precision=w.get("kv_precision", "bf16"),
    )


def _cluster(c: dict[str, Any]) -> Cluster:
    if c.get("pools"):
        raise ExportError("cluster.pools: the serving exports launch one GPU type; plan for one pool")
    return build_cluster(c["preset"], nodes=c.get("nodes"), gpus=c.get("gpus"))


def _model_id(model: dict[str, Any], given: str | None) -> tuple[str, str | None]:
    """The HF id to serve: ``given``, the HF config's ``_name_or_path``, the preset's shipped HF
    config's; else the preset name, with a note to replace it."""
    if given:
        return given, None
    for path in (model.get("hf_config"), HF_DIR / f"{model.get('preset')}.json"):
        if path and Path(path).is_file():
            name = json.loads(Path(path).read_text()).get("_name_or_path")
            if name:
                return str(name).split()[0], None
    name = str(model.get("preset") or model.get("name") or "MODEL")
    return name, f"{name} is paraplan's preset name: put the checkpoint's HF id or path in its place"


def _spec(model: dict[str, Any]) -> ModelSpec:
    """The scenario's model as the cost model's spec (as the front door builds it: a preset, an HF
    config.json, or the explicit fields)."""
    if model.get("preset"):
        return preset(model["preset"])
    if model.get("hf_config"):
        return from_hf_config(model["hf_config"])
    fields = {k: v for k, v in model.items() if v is not None and k != "name"}
    return from_fields(model.get("name") or "custom", fields)


def _pool_memory(
    scenario: dict[str, Any], cluster: Cluster, plan: ServingPlan, workload: Workload, decode: GpuMemory
) -> dict[str, GpuMemory]:
    """Each pool's memory: the result's figures are the decode pool's; the prefill pool's are the
    cost model's for its own shape (rules/serving_memory.py ``pool_memories``)."""
    engine = scenario.get("engine") or {}
    try:
        spec = _spec(scenario.get("model") or {})
        pools = pool_memories(
            spec,
            cluster,
            plan,
            workload,
            Engine(engine.get("name") or "vllm", kv_fraction=engine.get("kv_fraction")),
        )
    except ValueError as e:
        raise ExportError(f"the prefill pool's memory: {e}") from None
    return {"prefill": pools["prefill"], "decode": decode}


def read_serving_result(result: Any, model_id: str | None = None) -> ServingExportInput:
    """The renderers' inputs from a serving result; ExportError naming what is missing."""
    data = _plain(result)
    try:
        scenario = data["scenario"]
        predicted = data["predicted"]
        mem = predicted["memory_per_gpu"]
        memory = GpuMemory(
            weights_bytes=float(mem["weights"]),
            kv_cache_bytes=float(mem["kv_cache"]),
            activation_bytes=float(mem["activations"]),
            buffer_bytes=float(mem["buffers"]),
            capacity_bytes=float(predicted["memory_capacity_bytes"]),
        )
        plan = _plan(data["plan"])
        workload = _workload(scenario["workload"])
        engine = (scenario.get("engine") or {}).get("name") or "vllm"
        cluster = _cluster(scenario["cluster"])
    except (KeyError, TypeError) as e:
        raise ExportError(f"not a serving result: it has no {e}") from None
    name, note = _model_id(scenario.get("model") or {}, model_id)
    if plan.mode == "disaggregated":
        pools = _pool_memory(scenario, cluster, plan, workload, memory)
        return ServingExportInput(plan, workload, engine, cluster, name, pools, note)
    return ServingExportInput(plan, workload, engine, cluster, name, memory, note)
