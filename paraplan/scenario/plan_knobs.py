"""The one reading of a plan document (paraplan/scenario/plan_doc.py) into the knobs it fixes, a
cost.PartialPlan: empty lists mean none (a result's ``torus_shape: []`` on a GPU cluster,
``stage_pools: []`` on one node type), ``recompute_per_stage`` must agree with ``recompute``,
the derived ``grad_accum`` and ``num_devices`` must agree with the job, the cluster and the
degrees beside them. Solve (paraplan/api.py ``fixed_knobs``) and evaluate (paraplan/instance.py
``fixed_plan``) both start from it (``Instance.fixed``), so a result's plan reads back the same
in both (tests/test_plan_round_trip.py)."""

from __future__ import annotations

from typing import Any

from paraplan.cost import Axis, Job, PartialPlan, Recompute
from paraplan.cost.plan import check_expert_tp, check_order, check_recompute_layers
from paraplan.cost.validity import check_ep_experts, check_etp_experts
from paraplan.errors import ConfigError
from paraplan.graph import ModelSpec
from paraplan.graph.spec import show_value
from paraplan.hardware import Cluster
from paraplan.scenario.plan_doc import DERIVED, PlanDoc, given

__all__ = ["fixed_knobs_of"]


def fixed_knobs_of(doc: PlanDoc, spec: ModelSpec, cluster: Cluster, job: Job) -> PartialPlan:
    """The knobs ``doc`` fixes (module docstring), read the one way solve and evaluate share:
    empty lists are none, ``recompute_per_stage`` agrees with ``recompute`` (and stands for it),
    ``grad_accum`` and ``num_devices`` agree with the job, the cluster and the degrees,
    ``layers_per_chunk`` fixes the split and vp it implies, one ``recompute_layers`` count stands
    for every full-recompute stage (and fixes recompute full when recompute is free), a per-stage
    one needs pp. The knob rules are cost's (``check_order``, ``check_expert_tp``,
    ``check_ep_experts``, ...). ConfigError naming the key and the rule."""
    values = given(doc)
    for key in DERIVED:
        values.pop(key, None)
    _check_derived(doc, cluster, job)
    try:
        _check_knobs(doc, spec)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    values["recompute"] = _recompute(doc)
    if values["recompute"] is None:
        del values["recompute"]
    _read_recompute_layers(doc, values)
    _read_chunks(doc, values)
    if doc.stage_pools and not cluster.pools:
        raise ConfigError(
            f"plan.stage_pools={doc.stage_pools} needs a mixed-GPU cluster "
            "(cluster.pools); remove it for a single node type"
        )
    if doc.torus_shape:
        _check_torus(doc.torus_shape, cluster)
    return PartialPlan.from_values(values)


def _check_derived(doc: PlanDoc, cluster: Cluster, job: Job) -> None:
    if doc.grad_accum is not None:
        if doc.dp is None or doc.micro_batch is None:
            raise ConfigError(
                f"plan.grad_accum={doc.grad_accum} is checked against plan.dp and "
                "plan.micro_batch; fix both or drop plan.grad_accum"
            )
        if doc.grad_accum * doc.micro_batch * doc.dp != job.global_batch:
            raise ConfigError(
                f"plan.grad_accum={doc.grad_accum} but job.global_batch / (micro_batch x dp) = "
                f"{job.global_batch} / ({doc.micro_batch} x {doc.dp}) = "
                f"{job.global_batch / (doc.micro_batch * doc.dp):g}; fix it or drop plan.grad_accum"
            )
    if doc.num_devices is None:
        return
    if doc.dp is not None and doc.tp is not None and doc.pp is not None:
        used = doc.dp * doc.tp * doc.pp * (doc.cp or 1)
        if used != doc.num_devices:
            raise ConfigError(
                f"plan.num_devices={doc.num_devices} but dp x tp x pp x cp = "
                f"{used}; fix the degrees or drop plan.num_devices"
            )
    n = cluster.num_devices
    if not cluster.pools and doc.num_devices != n:
        raise ConfigError(
            f"plan.num_devices={doc.num_devices} but the cluster has {n} devices; "
            "fix it or drop plan.num_devices"
        )


def _check_knobs(doc: PlanDoc, spec: ModelSpec) -> None:
    """cost's knob rules on the knobs given (ValueError)."""
    experts = spec.num_experts if spec.is_moe else 0
    check_ep_experts(doc.ep or 1, experts)
    check_etp_experts(doc.etp, doc.tp, experts)
    if doc.order:
        check_order(tuple(Axis(a) for a in doc.order))
    check_expert_tp(doc.etp, doc.tp)


def _recompute(doc: PlanDoc) -> list[str] | None:
    """plan.recompute as PartialPlan takes it: one entry (every stage) or one per stage (pp
    fixed); recompute_per_stage, a result's per-stage form, must agree with it."""
    given_modes, per_stage = doc.recompute, doc.recompute_per_stage or None
    if per_stage is not None:
        same = (
            given_modes is None
            or given_modes == per_stage
            or (not isinstance(given_modes, list) and all(m == given_modes for m in per_stage))
        )
        if not same:
            raise ConfigError(
                f"plan.recompute_per_stage={show_value(per_stage)} disagrees with "
                f"plan.recompute={show_value(given_modes)}; give one of them"
            )
        given_modes = per_stage if given_modes is None or isinstance(given_modes, list) else given_modes
    if given_modes is None or given_modes == []:
        return None
    if not isinstance(given_modes, list):
        return [given_modes]
    if doc.pp is None:
        raise ConfigError("plan.recompute lists one mode per stage; fix plan.pp too")
    if len(given_modes) != doc.pp:
        raise ConfigError(f"plan.recompute lists {len(given_modes)} stages; need one per pp={doc.pp}")
    return list(given_modes)


def _read_recompute_layers(doc: PlanDoc, values: dict[str, Any]) -> None:
    """plan.recompute_layers: one N for every full-recompute stage, kept as one entry (recompute
    full when it is free), or one count per stage (pp fixed), checked against the modes."""
    counts = doc.recompute_layers
    if counts is None or counts == []:
        values.pop("recompute_layers", None)
        return
    modes = values.get("recompute")
    if isinstance(counts, int):
        if modes is None:
            values["recompute"] = [Recompute.FULL.value]
        elif Recompute.FULL.value not in modes:
            raise ConfigError(
                f"plan.recompute_layers={counts} needs plan.recompute=full on some stage "
                f"(got {sorted(set(modes))}): only full recompute takes a number of layers"
            )
        values["recompute_layers"] = [counts]
        return
    if doc.pp is None:
        raise ConfigError("plan.recompute_layers lists one count per stage; fix plan.pp too")
    if len(counts) != doc.pp:
        raise ConfigError(
            f"plan.recompute_layers={counts} lists {len(counts)} stages; need one per pp={doc.pp}"
        )
    if modes is not None:
        try:
            check_recompute_layers(tuple(counts), tuple(Recompute(m) for m in modes), doc.pp)
        except ValueError as e:
            raise ConfigError(str(e)) from None


def _read_chunks(doc: PlanDoc, values: dict[str, Any]) -> None:
    """plan.layers_per_chunk fixes the split (its row sums) and vp (its row length)."""
    rows = doc.layers_per_chunk
    if not rows:
        values.pop("layers_per_chunk", None)
        return
    sums, vp = [sum(r) for r in rows], len(rows[0])
    if doc.vp is not None and doc.vp != vp or any(len(r) != vp for r in rows):
        raise ConfigError(
            f"plan.layers_per_chunk rows must each list vp={doc.vp or vp} layer "
            f"counts; got {[len(r) for r in rows]}"
        )
    if doc.layers_per_stage and doc.layers_per_stage != sums:
        raise ConfigError(
            f"plan.layers_per_chunk row sums {sums} differ from plan.layers_per_stage={doc.layers_per_stage}"
        )
    values.update(layers_per_stage=sums, vp=vp)


def _check_torus(shape: list[int], cluster: Cluster) -> None:
    """plan.torus_shape checked against the cluster's slice shapes (ConfigError otherwise)."""
    torus = cluster.torus
    if torus is None:
        raise ConfigError(
            f"plan.torus_shape={shape} needs a TPU slice cluster (cluster.preset "
            "such as v5p-1024); remove it for this cluster"
        )
    try:
        torus.reshaped(tuple(shape))
    except ValueError as e:
        raise ConfigError(str(e)) from None
