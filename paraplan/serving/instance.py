"""From a validated serving scenario to the cost model's objects: the model spec, the cluster,
``cost.serving``'s Workload and Engine, the fixed plan (``paraplan evaluate``) and the fixed
knobs (``paraplan plan``; solver/serving.py's ``ServingFixed``)."""

from __future__ import annotations

from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any

from paraplan.cost.serving import Engine, ServingPlan, WorkerPlan, Workload
from paraplan.errors import ConfigError
from paraplan.graph import ModelSpec
from paraplan.hardware import Cluster
from paraplan.instance import _cluster, _model_spec
from paraplan.scenario.scenario_file import read_scenario
from paraplan.serving.schema import ServingPlanDoc, ServingScenario, WorkerDoc, validate_serving
from paraplan.solver.serving_space import ServingFixed, WorkerFixed

__all__ = [
    "ServingInstance",
    "load_serving_scenario",
    "build_serving_instance",
    "workload_of",
    "engine_of",
    "fixed_serving_plan",
    "serving_fixed",
]


@dataclass(frozen=True, slots=True)
class ServingInstance:
    scenario: ServingScenario
    spec: ModelSpec
    cluster: Cluster
    workload: Workload
    engine: Engine


def load_serving_scenario(source: str | PathLike[str] | dict[str, Any] | ServingScenario) -> ServingScenario:
    """A serving scenario from a YAML/JSON file, a dict or a result document (its plan fixed);
    ConfigError names each bad field. ``model.hf_config`` is relative to the file."""
    if isinstance(source, ServingScenario):
        return source
    data, base = read_scenario(source)
    scenario = validate_serving(data)
    hf = scenario.model.hf_config
    if hf and not Path(hf).is_absolute():
        model = scenario.model.model_copy(update={"hf_config": str((base / hf).resolve())})
        scenario = scenario.model_copy(update={"model": model})
    return scenario


def workload_of(scenario: ServingScenario) -> Workload:
    w = scenario.workload
    isl, isl_p90, osl, osl_p90 = w.lengths()
    return Workload(
        isl=isl,
        osl=osl,
        isl_p90=isl_p90,
        osl_p90=osl_p90,
        concurrency=w.concurrency,
        request_rate=w.request_rate,
        ttft_ms=w.slo.ttft_ms,
        tpot_ms=w.slo.tpot_ms,
        percentile=w.slo.percentile,
        weights_precision=w.weights_precision,
        kv_precision=w.kv_precision,
    )


def engine_of(scenario: ServingScenario) -> Engine:
    return Engine(name=scenario.engine.name, version=scenario.engine.version)


def build_serving_instance(scenario: ServingScenario) -> ServingInstance:
    """ConfigError (naming the field) for unknown presets or bad shapes."""
    try:
        spec = _model_spec(scenario)  # type: ignore[arg-type]  # reads only .model
        cluster = _cluster(scenario)  # type: ignore[arg-type]  # reads only .cluster
        workload, engine = workload_of(scenario), engine_of(scenario)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return ServingInstance(scenario, spec, cluster, workload, engine)


def _mode(p: ServingPlanDoc) -> str | None:
    if p.mode is not None:
        return p.mode
    if p.prefill is not None or p.decode is not None:
        return "disaggregated"
    if any(getattr(p, k) is not None for k in ("tp", "pp", "ep", "dp_attention", "replicas")):
        return "aggregated"
    return None


def _missing_worker(section: WorkerDoc | None, name: str) -> list[str]:
    return [f"{name}.{k}" for k in ("tp", "workers") if section is None or getattr(section, k) is None]


def _worker(section: WorkerDoc) -> WorkerPlan:
    assert section.tp is not None and section.workers is not None
    return WorkerPlan(
        tp=section.tp,
        pp=section.pp or 1,
        ep=section.ep or 1,
        dp_attention=bool(section.dp_attention),
        workers=section.workers,
    )


def _need(missing: list[str]) -> ConfigError:
    return ConfigError(
        "evaluate needs a fixed layout; missing plan."
        + ", plan.".join(missing)
        + " (or run `paraplan plan` to let the solver choose them)"
    )


def fixed_serving_plan(inst: ServingInstance) -> ServingPlan:
    """The scenario's serving plan with its layout given (defaults: pp = ep = 1, no attention
    DP, the contract's max_batch / max_num_tokens / chunked prefill); ConfigError naming every
    missing knob."""
    p = inst.scenario.plan
    mode = _mode(p)
    defaults = ServingPlan()
    common = {
        "max_batch": p.max_batch or defaults.max_batch,
        "max_num_tokens": p.max_num_tokens or defaults.max_num_tokens,
        "chunked_prefill": defaults.chunked_prefill if p.chunked_prefill is None else p.chunked_prefill,
    }
    if mode is None:
        raise _need(
            [
                "mode (aggregated: with plan.tp and plan.replicas; "
                "disaggregated: with plan.prefill and plan.decode)"
            ]
        )
    if mode == "disaggregated":
        missing = _missing_worker(p.prefill, "prefill") + _missing_worker(p.decode, "decode")
        if missing:
            raise _need(missing)
        assert p.prefill is not None and p.decode is not None
        return ServingPlan(
            mode="disaggregated", prefill=_worker(p.prefill), decode=_worker(p.decode), **common
        )
    missing = [k for k in ("tp", "replicas") if getattr(p, k) is None]
    if missing:
        raise _need(missing)
    assert p.tp is not None and p.replicas is not None
    return ServingPlan(
        mode="aggregated",
        tp=p.tp,
        pp=p.pp or 1,
        ep=p.ep or 1,
        dp_attention=bool(p.dp_attention),
        replicas=p.replicas,
        **common,
    )


def _worker_fixed(section: WorkerDoc | None) -> WorkerFixed | None:
    if section is None:
        return None
    return WorkerFixed(
        tp=section.tp,
        pp=section.pp,
        ep=section.ep,
        dp_attention=section.dp_attention,
        workers=section.workers,
    )


def serving_fixed(inst: ServingInstance) -> ServingFixed:
    """The knobs the scenario's ``plan:`` fixes, for the search."""
    p = inst.scenario.plan
    return ServingFixed(
        mode=_mode(p),  # type: ignore[arg-type]
        tp=p.tp,
        pp=p.pp,
        ep=p.ep,
        dp_attention=p.dp_attention,
        replicas=p.replicas,
        max_batch=p.max_batch,
        max_num_tokens=p.max_num_tokens,
        chunked_prefill=p.chunked_prefill,
        prefill=_worker_fixed(p.prefill),
        decode=_worker_fixed(p.decode),
        num_devices=p.num_devices,
    )
