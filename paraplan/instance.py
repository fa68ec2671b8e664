"""From a validated scenario to the core's typed objects: layer graph, cluster, job, plan."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from paraplan.capacity.sections import CAPACITY_JOB_KEYS
from paraplan.cost import Job, MoEDispatcher, MoERouting, PartialPlan, Plan, Recompute
from paraplan.cost.dispatch import check_dispatcher, dispatcher_sm_fraction
from paraplan.cost.offload import offload_link_bytes_per_s
from paraplan.cost.plan import PLAN_FIELDS, OffloadModule, RecomputeModule, even_split, plan_from_values
from paraplan.cost.pools import stage_pools_of
from paraplan.errors import ConfigError
from paraplan.graph import (
    LayerGraph,
    ModelSpec,
    build_graph,
    from_fields,
    from_hf_config,
    from_hf_trace,
    preset,
)
from paraplan.hardware import (
    CalibrationProfile,
    Cluster,
    apply_calibration,
    build_cluster,
    build_pooled_cluster,
    load_profile,
    with_memory_headroom,
)
from paraplan.hardware.uncertainty import default_memory_headroom
from paraplan.rules.moe_probs import AUTO, resolve_moe_probs
from paraplan.scenario.plan_doc import REQUIRED_KNOBS
from paraplan.scenario.plan_knobs import fixed_knobs_of
from paraplan.scenario.schema import Scenario

__all__ = [
    "Instance",
    "Calibration",
    "build_instance",
    "memory_headroom_of",
    "headroom_hint",
    "fixed_plan",
    "even_split",
    "default_stage_pools",
    "REQUIRED_KNOBS",
]


@dataclass(frozen=True, slots=True)
class Instance:
    """A scenario's model graph, cluster and job, and ``fixed``: the knobs its ``plan:`` fixes
    (plan_knobs.fixed_knobs_of, the one reading solve and evaluate share)."""

    scenario: Scenario
    graph: LayerGraph
    cluster: Cluster
    job: Job
    fixed: PartialPlan

    @property
    def spec(self) -> ModelSpec:
        return self.graph.spec


def job_of(scenario: Scenario) -> Job:
    """The cost model's Job of the scenario's ``job:`` (``moe_routing: {capacity_factor: F}``
    becomes routing ``capacity`` with ``moe_capacity_factor`` F; ``moe_probs_applied: auto`` the
    framework's, by ``solver.target``: rules/moe_probs.py resolve_moe_probs)."""
    values = scenario.job.model_dump(exclude=set(CAPACITY_JOB_KEYS))  # not cost-model terms
    routing = values.pop("moe_routing")
    if isinstance(routing, dict):
        values["moe_routing"] = MoERouting.CAPACITY
        values["moe_capacity_factor"] = routing["capacity_factor"]
    else:
        values["moe_routing"] = MoERouting(routing)
    values["recompute_modules"] = frozenset(RecomputeModule(m) for m in values["recompute_modules"])
    values["offload_modules"] = frozenset(OffloadModule(m) for m in values["offload_modules"])
    given = values.pop("moe_probs_applied")
    values["moe_probs_applied"] = resolve_moe_probs(given, scenario.solver.target)
    values["is_moe_probs_given"] = given != AUTO
    return Job(**values)


def _model_spec(scenario: Scenario) -> ModelSpec:
    m = scenario.model
    if m.preset:
        return preset(m.preset)
    if m.hf_config and m.trace:
        return from_hf_trace(m.hf_config, allow_bias=bool(m.allow_bias))
    if m.hf_config:
        return from_hf_config(m.hf_config)
    fields = {k: v for k, v in m.model_dump().items() if v is not None}
    return from_fields(m.name or "custom", fields)


Calibration = str | Path | CalibrationProfile
"""A calibration profile: a YAML file (``paraplan calibrate``) or a loaded profile."""


def memory_headroom_of(scenario: Scenario, search: bool) -> float:
    """The share of device memory kept free: ``solver.memory_headroom`` where the scenario sets
    it; unset, the memory band's margin for a search (hardware/uncertainty.py
    default_memory_headroom: the plan the solver picks keeps its predicted peak under capacity
    by the band) and none for evaluating a given plan (its fit is reported against the device)."""
    given = scenario.solver.memory_headroom
    if given is not None:
        return given
    return default_memory_headroom() if search else 0.0


def headroom_hint(cluster: Cluster, min_bytes: float) -> str:
    """The part of a "no plan fits memory" reason that names the headroom, where the least plan
    would fit the device without it: what keeps it out and how to plan at the edge instead."""
    headroom = cluster.memory_headroom
    if headroom <= 0 or min_bytes > cluster.memory_capacity_bytes / (1.0 - headroom):
        return ""
    return (
        f"; it would fit without the {headroom:.1%} of device memory the search keeps free "
        "(solver.memory_headroom; unset, the memory band's margin, since measured peaks run up to "
        "that much above predicted ones): set solver.memory_headroom lower, or 0, to plan at the edge"
    )


def build_instance(
    scenario: Scenario, calibration: Calibration | None = None, *, search: bool = False
) -> Instance:
    """ConfigError (naming the field) for unknown presets, bad shapes or unsupported precision.

    ``calibration`` (else the scenario's ``calibration:`` key) replaces the catalog efficiencies
    of the accelerators it covers (hardware/calibration.py). ``search``: the instance is for the
    solver, whose default keeps the memory band's headroom (memory_headroom_of)."""
    try:
        spec = _model_spec(scenario)
        cluster = _calibrated(_cluster(scenario), calibration or scenario.calibration)
        headroom = memory_headroom_of(scenario, search)
        if headroom:
            cluster = with_memory_headroom(cluster, headroom)
        job = job_of(scenario)
        fixed = fixed_knobs_of(scenario.plan, spec, cluster, job)
        if fixed.moe_dispatcher is not None:
            check_dispatcher(fixed.moe_dispatcher, cluster)
            overlap = fixed.moe_overlap or (fixed.moe_overlap is None and scenario.solver.search_moe_state)
            if overlap:  # the overlap reads the dispatcher's SM share
                _check_dispatcher_costed(fixed.moe_dispatcher, cluster)
        for pool in cluster.pools or (cluster,):
            pool.accelerator.peak_for(job.precision.value)
            if job.offload_modules:  # the copies' time reads the host link (cost/offload.py)
                offload_link_bytes_per_s(pool.accelerator)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return Instance(scenario, build_graph(spec), cluster, job, fixed)


def _check_dispatcher_costed(dispatcher: MoEDispatcher, cluster: Cluster) -> None:
    """ValueError naming plan.moe_dispatcher when the cost model has no SM share for it on an
    accelerator of the cluster (hardware/data/dispatch.yaml), which the EP overlap reads."""
    for pool in cluster.pools or (cluster,):
        try:
            dispatcher_sm_fraction(dispatcher, pool.accelerator)
        except ValueError as e:
            raise ValueError(
                f"plan.moe_dispatcher={dispatcher.value} is not modelled on {pool.accelerator.key} ({e}); "
                "use alltoall or allgather"
            ) from None


def _calibrated(cluster: Cluster, calibration: Calibration | None) -> Cluster:
    if calibration is None:
        return cluster
    profile = calibration if isinstance(calibration, CalibrationProfile) else load_profile(calibration)
    return apply_calibration(cluster, profile)


def _cluster(scenario: Scenario) -> Cluster:
    """The scenario's cluster; ValueError naming ``cluster.pools[i].preset`` for a bad pool."""
    c = scenario.cluster
    if c.choose is not None:
        raise ValueError(
            "cluster.choose: `paraplan plan` chooses the cluster; evaluate needs cluster.preset with "
            "nodes or gpus (or the result of `paraplan plan --json`)"
        )
    if c.pools is None:
        assert c.preset is not None  # ClusterSection.check_size
        return build_cluster(c.preset, nodes=c.nodes, gpus=c.gpus)
    for i, pool in enumerate(c.pools):
        try:
            build_cluster(pool.preset, nodes=pool.nodes, gpus=pool.gpus)
        except ValueError as e:
            raise ValueError(str(e).replace("cluster.", f"cluster.pools[{i}].")) from None
    return build_pooled_cluster([p.model_dump(exclude_none=True) for p in c.pools])


def default_stage_pools(cluster: Cluster, plan: Plan) -> tuple[int, ...]:
    """Every pool in cluster.pools order, each hosting its devices / (tp*cp*dp) stages
    (() on a homogeneous cluster or when the pools do not divide)."""
    if not cluster.pools:
        return ()
    return stage_pools_of(cluster, tuple(range(len(cluster.pools))), plan.tp * plan.cp * plan.dp) or ()


def fixed_plan(inst: Instance) -> Plan:
    """The scenario's plan with every knob given (``inst.fixed``, with the defaults: cp=ep=vp=1,
    SP on when tp>1, even layer split, Megatron rank order, every pool in order); ConfigError
    naming every missing knob."""
    k = inst.fixed
    missing = [name for name in REQUIRED_KNOBS if getattr(k, name) is None]
    if missing:
        raise ConfigError(
            "evaluate needs a fully fixed plan; missing plan."
            + ", plan.".join(missing)
            + " (or run `paraplan plan` to let the solver choose them)"
        )
    assert k.pp is not None and k.tp is not None and k.recompute is not None
    modes = k.recompute if len(k.recompute) == k.pp else k.recompute[:1] * k.pp
    values = {name: getattr(k, name) for name in PLAN_FIELDS}
    values.update(
        sequence_parallel=k.sequence_parallel if k.sequence_parallel is not None else k.tp > 1,
        recompute=modes,
        recompute_layers=_recompute_layers(k.recompute_layers, modes),
        layers_per_stage=k.layers_per_stage or even_split(inst.spec.num_layers, k.pp),
    )
    try:
        plan = plan_from_values(values)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if k.stage_pools is not None:
        return plan
    return replace(plan, stage_pools=default_stage_pools(inst.cluster, plan))


def _recompute_layers(counts: tuple[int, ...] | None, modes: tuple[Recompute, ...]) -> tuple[int, ...]:
    """plan.recompute_layers per stage: one N (the one entry of a plan with pp > 1) applies to
    every full-recompute stage, 0 on the others (Megatron's one --recompute-num-layers)."""
    if not counts:
        return ()
    if len(counts) == len(modes):
        return counts
    return tuple(counts[0] if m is Recompute.FULL else 0 for m in modes)
