"""The public API: load a scenario, evaluate a fixed plan, solve for the best one, export it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from paraplan.capacity.terms import with_training
from paraplan.cost import PartialPlan, Plan, Recompute
from paraplan.cost import evaluate as cost_evaluate
from paraplan.cost.plan import (
    PLAN_FIELDS,
    check_expert_tp,
    check_order,
    check_recompute_layers,
    default_chunks,
)
from paraplan.cost.validity import check_ep_experts, check_etp_experts
from paraplan.errors import ConfigError, SolveTimeout
from paraplan.explain import explain, summary
from paraplan.instance import Calibration, Instance, build_instance, fixed_plan
from paraplan.result import (
    Result,
    SolverOut,
    band_out,
    evaluate_plan,
    paraplan_version,
    plan_out,
)
from paraplan.schema import Scenario, load_scenario
from paraplan.search import run_search, runnable_search
from paraplan.solver import (
    DUPLICATE_REL,
    Options,
    SolverOptions,
)
from paraplan.targets import (
    UNRESTRICTED,
    fixed_modes,
    runnable_options,
    runs_on,
    target_options,
)

__all__ = [
    "load_scenario",
    "evaluate",
    "evaluate_plan",
    "solve",
    "paraplan_version",
    "fixed_knobs",
    "search_options",
    "check_derived_knobs",
]


def evaluate(
    scenario: str | Path | dict[str, Any] | Scenario | Result, *, calibration: Calibration | None = None
) -> Result:
    """Step time and memory of the scenario's fully fixed plan (``calibration``: a profile
    file or object, instead of the scenario's ``calibration:`` key). A Result (or its JSON file)
    re-scores its own plan on its own scenario."""
    if isinstance(scenario, Result):
        scenario = scenario.model_dump(mode="json")
    inst = _instance(scenario, calibration)
    check_derived_knobs(inst)
    plan = fixed_plan(inst)
    return with_training(_with_runs_on(evaluate_plan(inst, plan), inst, plan), inst)


def _instance(scenario: str | Path | dict[str, Any] | Scenario, calibration: Calibration | None) -> Instance:
    """The scenario's instance; a calibration file given here is recorded in the scenario (as an
    absolute path) so the result, its exports and ``paraplan evaluate RESULT.json`` use it too."""
    sc = load_scenario(scenario)
    if isinstance(calibration, str | Path):
        sc = sc.model_copy(update={"calibration": str(Path(calibration).resolve())})
        calibration = None
    return build_instance(sc, calibration)


def _with_runs_on(result: Result, inst: Instance, plan: Plan) -> Result:
    """``result`` with ``runs_on``: the frameworks whose rules pass its plan as it is and that
    launch its cluster and precision (targets.runs_on; the exporters render what the rules
    accept, tests/cli/test_first_hour.py checks it)."""
    return result.model_copy(update={"runs_on": runs_on(inst, plan)})


def check_derived_knobs(inst: Instance) -> None:
    """ConfigError unless the derived values a result's plan lists (``grad_accum``,
    ``num_devices``) agree with the job, the cluster and the degrees fixed beside them."""
    p, job = inst.scenario.plan, inst.job
    if p.grad_accum is not None:
        if p.dp is None or p.micro_batch is None:
            raise ConfigError(
                f"plan.grad_accum={p.grad_accum} is checked against plan.dp and "
                "plan.micro_batch; fix both or drop plan.grad_accum"
            )
        if p.grad_accum * p.micro_batch * p.dp != job.global_batch:
            raise ConfigError(
                f"plan.grad_accum={p.grad_accum} but job.global_batch / (micro_batch x dp) = "
                f"{job.global_batch} / ({p.micro_batch} x {p.dp}) = "
                f"{job.global_batch / (p.micro_batch * p.dp):g}; fix it or drop plan.grad_accum"
            )
    n = inst.cluster.num_devices
    if p.num_devices is not None and not inst.cluster.pools and p.num_devices != n:
        raise ConfigError(
            f"plan.num_devices={p.num_devices} but the cluster has {n} devices; "
            "fix it or drop plan.num_devices"
        )


def fixed_knobs(inst: Instance) -> PartialPlan:
    """The knobs the scenario's ``plan:`` fixes, as the solver's PartialPlan; ConfigError on
    misuse. The knob rules are cost/validity.py's, the same ``check_plan`` and the search use."""
    p = inst.scenario.plan
    check_derived_knobs(inst)
    if isinstance(p.recompute, list) and p.pp is None:
        raise ConfigError("plan.recompute lists one mode per stage; fix plan.pp too")
    if p.stage_pools is not None and not inst.cluster.pools:
        raise ConfigError(
            f"plan.stage_pools={p.stage_pools} needs a mixed-GPU cluster "
            "(cluster.pools); remove it for a single node type"
        )
    experts = inst.spec.num_experts if inst.spec.is_moe else 0
    try:
        check_ep_experts(p.ep or 1, experts)
        check_etp_experts(p.etp, p.tp, experts)
        if p.order is not None:
            check_order(p.order)
        check_expert_tp(p.etp, p.tp)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    layers, vp = _fixed_chunks(p)
    values = p.model_dump(include=set(PLAN_FIELDS), exclude_none=True)
    if isinstance(p.recompute, Recompute):  # one mode for every stage
        values["recompute"] = (p.recompute,)
    if p.recompute_layers is not None:
        _check_fixed_recompute_layers(inst, values)
    values.update(layers_per_stage=layers, vp=vp, torus_shape=_torus_shape(inst, p.torus_shape))
    return PartialPlan.from_values(values)


def _check_fixed_recompute_layers(inst: Instance, values: dict[str, Any]) -> None:
    """plan.recompute_layers for the search (solver/constraints/recompute_layers.py): one N for
    every full-recompute stage (recompute full when the scenario leaves it open), or one count
    per stage with plan.pp fixed; ConfigError where the search cannot honour it."""
    p = inst.scenario.plan
    if len(inst.graph.kind_blocks) > 1:
        raise ConfigError(
            f"plan.recompute_layers={p.recompute_layers}: {inst.spec.name} has several block kinds, "
            "so which layers a count recomputes depends on where each kind sits, and `paraplan "
            "plan` does not search it; fix every plan knob and run `paraplan evaluate`, or drop "
            "plan.recompute_layers"
        )
    modes = values.get("recompute")
    if isinstance(p.recompute_layers, int):
        if modes is None:
            values["recompute"] = (Recompute.FULL,)
        elif Recompute.FULL not in modes:
            raise ConfigError(
                f"plan.recompute_layers={p.recompute_layers} needs plan.recompute=full on some "
                "stage: only full recompute takes a number of layers"
            )
        values["recompute_layers"] = (p.recompute_layers,)
        return
    if p.pp is None:
        raise ConfigError("plan.recompute_layers lists one count per stage; fix plan.pp too")
    if len(p.recompute_layers) != p.pp:
        raise ConfigError(
            f"plan.recompute_layers={p.recompute_layers} lists {len(p.recompute_layers)} stages; "
            f"need one per pp={p.pp}"
        )
    if modes is not None:
        try:
            check_recompute_layers(tuple(p.recompute_layers), modes, p.pp)
        except ValueError as e:
            raise ConfigError(str(e)) from None


def _torus_shape(inst: Instance, shape: list[int] | None) -> tuple[int, ...] | None:
    """plan.torus_shape checked against the cluster's slice shapes (ConfigError otherwise)."""
    if shape is None:
        return None
    torus = inst.cluster.torus
    if torus is None:
        raise ConfigError(
            f"plan.torus_shape={shape} needs a TPU slice cluster (cluster.preset "
            "such as v5p-1024); remove it for this cluster"
        )
    try:
        torus.reshaped(tuple(shape))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return tuple(shape)


def _fixed_chunks(p: Any) -> tuple[tuple[int, ...] | None, int | None]:
    """The split and vp a scenario fixes; plan.layers_per_chunk fixes both, and the search
    builds only the default chunk layout of its split (cost.plan.default_chunks, Megatron's
    account-for-embedding/loss placement), so other chunk layouts are for evaluate."""
    layers = tuple(p.layers_per_stage) if p.layers_per_stage else None
    if not p.layers_per_chunk:
        return layers, p.vp
    rows = tuple(tuple(r) for r in p.layers_per_chunk)
    sums, vp = tuple(sum(r) for r in rows), len(rows[0])
    if p.vp is not None and p.vp != vp or any(len(r) != vp for r in rows):
        raise ConfigError(
            f"plan.layers_per_chunk rows must each list vp={p.vp or vp} layer "
            f"counts; got {[len(r) for r in rows]}"
        )
    if layers is not None and layers != sums:
        raise ConfigError(
            f"plan.layers_per_chunk row sums {list(sums)} differ from plan.layers_per_stage={list(layers)}"
        )
    if rows != default_chunks(sums, vp):
        raise ConfigError(
            f"plan.layers_per_chunk={[list(r) for r in rows]}: `paraplan plan` builds each "
            f"stage's chunks as {[list(r) for r in default_chunks(sums, vp)]} (even, short chunks "
            "next to the embedding and the loss); give that, or only plan.layers_per_stage, or "
            "score this layout with `paraplan evaluate`"
        )
    return sums, vp


def _base_options(inst: Instance) -> Options:
    """The scenario's ``solver:`` section as the solver's search Options, before any target."""
    o = inst.scenario.solver
    options = Options(
        allow_uneven_stages=o.allow_uneven_stages,
        search_placement=o.search_placement,
        max_micro_batch=o.max_micro_batch,
        max_vp=o.max_vp,
        uniform_recompute=o.uniform_recompute,
    )
    split = inst.scenario.plan.layers_per_stage
    if not o.allow_uneven_stages and split and len(set(split)) > 1:
        raise ConfigError(
            f"plan.layers_per_stage={split} is uneven but "
            "solver.allow_uneven_stages is false; make the stages equal or turn it on"
        )
    fixed = fixed_modes(inst)
    if o.uniform_recompute and fixed and len(set(fixed)) > 1:
        raise ConfigError(
            f"plan.recompute={[m.value for m in fixed]} differs per stage but "
            "solver.uniform_recompute is true; fix one mode or turn it off"
        )
    vp = inst.scenario.plan.vp
    if vp is not None and vp > o.max_vp:  # a fixed knob raises its cap
        options = replace(options, max_vp=vp)
    return options


def search_options(inst: Instance) -> Options:
    """The scenario's ``solver:`` section as the solver's search Options: ``target`` narrows it to
    what that framework runs (paraplan/targets.py); ``any`` leaves it unrestricted; unset, the
    search of what at least one framework runs (targets.runnable_options; unrestricted when no
    framework runs any plan of the scenario)."""
    options = _base_options(inst)
    target = inst.scenario.solver.target
    if target == UNRESTRICTED:
        return options
    if target is not None:
        return target_options(options, target, inst)
    return runnable_options(options, inst).options or options


MAX_TIME_LIMIT_S = 86_400.0  # a day; CP-SAT's clock and the deadline arithmetic stay exact
MAX_WORKERS = 256
MAX_TOP = 1_000
MAX_SEED = 2**31 - 1  # CP-SAT's random_seed is a 32-bit signed integer


def _check_solve_args(time_limit_s: object, workers: object, top: object, seed: object) -> None:
    """ConfigError naming the argument (and its CLI flag) unless each is a number in range."""

    def whole(name: str, flag: str, value: object, low: int, high: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ConfigError(f"{name}={value!r} ({flag}) must be a whole number from {low:,} to {high:,}")

    if (
        isinstance(time_limit_s, bool)
        or not isinstance(time_limit_s, int | float)
        or not 0 < time_limit_s <= MAX_TIME_LIMIT_S
    ):  # also refuses nan
        raise ConfigError(
            f"time_limit_s={time_limit_s!r} (--time-limit) must be a number of "
            f"seconds above 0 and at most {MAX_TIME_LIMIT_S:,.0f}"
        )
    whole("workers", "--workers", workers, 1, MAX_WORKERS)
    whole("top", "--top", top, 1, MAX_TOP)
    whole("seed", "--seed", seed, 0, MAX_SEED)


def solve(
    scenario: str | Path | dict[str, Any] | Scenario,
    *,
    time_limit_s: float = 30.0,
    workers: int = 2,
    top: int = 1,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    calibration: Calibration | None = None,
) -> Result:
    """The fastest plan under the cost model that at least one framework runs (``runs_on``
    names them; ``solver.target`` narrows the search to one framework, ``any`` widens it to
    the unrestricted optimum), proven optimal when ``result.solver.status`` is OPTIMAL
    (otherwise the gap says how far it can be). Knobs fixed in the scenario's ``plan:`` are
    respected. InfeasibleError says which resource binds; SolveTimeout if no plan was found in
    time. ``calibration``: a profile file or object (as in ``evaluate``)."""
    started = time.perf_counter()
    _check_solve_args(time_limit_s, workers, top, seed)
    if _chooses_cluster(scenario):  # capacity planning: the cluster is part of the search
        from paraplan.capacity.solve import solve_capacity

        return solve_capacity(scenario, time_limit_s=time_limit_s, workers=workers, top=top, seed=seed)
    inst = _instance(scenario, calibration)
    target = inst.scenario.solver.target
    base = _base_options(inst)
    fixed = fixed_knobs(inst)
    deadline = started + time_limit_s  # the limit counts from the call
    left_s = deadline - time.perf_counter()
    if left_s <= 0:
        raise SolveTimeout(f"--time-limit {time_limit_s:g} s ran out while reading the scenario; raise it")
    opts = SolverOptions(
        time_limit_s=left_s,
        num_workers=workers,
        random_seed=seed,
        top=max(top, 2),
        duplicate_rel=DUPLICATE_REL,
    )
    notes: list[str] = []
    if target is None:
        space = runnable_options(base, inst)
        searched, notes = runnable_search(inst, fixed, space, base, opts, progress, time_limit_s, deadline)
        runnable_only = space.options is not None
    else:
        options = base if target == UNRESTRICTED else target_options(base, target, inst)
        searched = run_search(inst, fixed, options, opts, progress, time_limit_s)
        runnable_only = False
    out = searched.out
    best = out.solutions[0]
    gap = (best.objective_s - out.bound_s) / best.objective_s if best.objective_s else 0.0
    solver_out = SolverOut(
        status=out.status,
        wall_s=out.wall_s,
        objective_s=best.objective_s,
        bound_s=out.bound_s,
        gap=max(0.0, gap),
        time_limit_s=time_limit_s,
        workers=workers,
        seed=seed,
        num_layouts=out.num_layouts,
        num_layouts_pruned=out.num_pruned,
        target=target,
    )
    breakdown = cost_evaluate(inst.graph, inst.cluster, inst.job, best.plan)
    others = [(s, runs_on(inst, s.plan)) for s in out.solutions[1:]]
    if runnable_only:  # runners-up a framework runs, as the plan itself
        others = [(s, on) for s, on in others if on]
    runner = None
    if others:
        rp = others[0][0].plan
        runner = (rp, cost_evaluate(inst.graph, inst.cluster, inst.job, rp))
    alternatives = [
        {
            "summary": summary(s.plan),
            "step_time_s": s.objective_s,
            "step_time_band_s": band_out(inst.cluster, s.objective_s, inst.graph.spec.is_moe).model_dump(),
            "plan": plan_out(s.plan, inst.job).model_dump(),
            "runs_on": on,
        }
        for s, on in others[: top - 1]
    ]
    band = band_out(inst.cluster, breakdown.step_time_s, inst.graph.spec.is_moe)
    explanation = explain(best.plan, breakdown, inst.cluster, runner, band) + notes
    result = evaluate_plan(inst, best.plan, solver_out, alternatives=alternatives, explanation=explanation)
    return with_training(_with_runs_on(result, inst, best.plan), inst)


def _chooses_cluster(scenario: str | Path | dict[str, Any] | Scenario) -> bool:
    """The scenario has ``cluster.choose`` (paraplan/capacity: the cluster search)."""
    return load_scenario(scenario).cluster.choose is not None
