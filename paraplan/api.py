"""The public API: load a scenario, evaluate a fixed plan, solve for the best one, export it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from paraplan.capacity.terms import with_training
from paraplan.cost import PartialPlan, Plan
from paraplan.cost import evaluate as cost_evaluate
from paraplan.cost.plan import PPSchedule, default_chunks
from paraplan.errors import ConfigError, SolveTimeout
from paraplan.headroom import more_headroom_hint, more_headroom_line
from paraplan.instance import Calibration, Instance, build_instance, fixed_plan
from paraplan.planning import UNRESTRICTED, fixed_modes, runnable_options, runs_on, search, target_options
from paraplan.reports.explain import RunnerProof, explain, summary
from paraplan.result import (
    Alternative,
    Result,
    SolverOut,
    band_out,
    evaluate_plan,
    paraplan_version,
)
from paraplan.rules.pp_schedule import searched_schedules
from paraplan.scenario.plan_doc import plan_doc
from paraplan.scenario.schema import Scenario, load_scenario
from paraplan.serving.schema import is_serving, serving_api
from paraplan.solver import (
    DUPLICATE_REL,
    Options,
    SolverOptions,
)
from paraplan.solver.space import SEARCHABLE_SCHEDULES

if TYPE_CHECKING:
    from paraplan.serving import ServingResult

__all__ = [
    "load_scenario",
    "evaluate",
    "evaluate_plan",
    "solve",
    "paraplan_version",
    "fixed_knobs",
    "search_options",
]


def evaluate(
    scenario: str | Path | dict[str, Any] | Scenario | Result, *, calibration: Calibration | None = None
) -> Result | ServingResult:
    """Step time and memory of the scenario's fully fixed plan (``calibration``: a profile
    file or object, instead of the scenario's ``calibration:`` key). A Result (or its JSON file)
    re-scores its own plan on its own scenario. A serving scenario (``workload:``) gets a
    ``paraplan.serving.ServingResult``: TTFT, TPOT, throughput, goodput and memory."""
    if is_serving(scenario):  # workload: (issue 23)
        return serving_api().evaluate_serving_scenario(scenario, calibration=calibration)
    if isinstance(scenario, Result):
        scenario = scenario.model_dump(mode="json")
    inst = _instance(scenario, calibration)
    plan = fixed_plan(inst)
    return with_training(_with_runs_on(evaluate_plan(inst, plan), inst, plan), inst)


def _instance(
    scenario: str | Path | dict[str, Any] | Scenario, calibration: Calibration | None, search: bool = False
) -> Instance:
    """The scenario's instance; a calibration file given here is recorded in the scenario (as an
    absolute path) so the result, its exports and ``paraplan evaluate RESULT.json`` use it too.
    ``search``: for the solver (the memory band's default headroom, instance.memory_headroom_of)."""
    sc = load_scenario(scenario)
    if isinstance(calibration, str | Path):
        sc = sc.model_copy(update={"calibration": str(Path(calibration).resolve())})
        calibration = None
    return build_instance(sc, calibration, search=search)


def _with_runs_on(result: Result, inst: Instance, plan: Plan) -> Result:
    """``result`` with ``runs_on``: the frameworks whose rules pass its plan as it is and that
    launch its cluster and precision (planning.runs_on; the exporters render what the rules
    accept, tests/cli/test_first_hour.py checks it)."""
    return result.model_copy(update={"runs_on": runs_on(inst, plan)})


def fixed_knobs(inst: Instance) -> PartialPlan:
    """The knobs the scenario's ``plan:`` fixes, as the solver's PartialPlan (``inst.fixed``, the
    reading evaluate shares: plan_knobs.fixed_knobs_of), less what the search cannot honour:
    ConfigError for a chunk layout other than the default of its split, or a number of
    recomputed layers on a model of several block kinds."""
    k = inst.fixed
    if k.recompute_layers is not None and len(inst.graph.kind_blocks) > 1:
        raise ConfigError(
            f"plan.recompute_layers={inst.scenario.plan.recompute_layers}: {inst.spec.name} has "
            "several block kinds, so which layers a count recomputes depends on where each kind "
            "sits, and `paraplan plan` does not search it; fix every plan knob and run `paraplan "
            "evaluate`, or drop plan.recompute_layers"
        )
    if k.pp_schedule == PPSchedule.DUALPIPE:
        raise ConfigError(
            "plan.pp_schedule=dualpipe: `paraplan plan` does not search DualPipe (rank s runs "
            "stages s and pp-1-s, which the search's split does not express, and no target framework "
            "runs it); fix every plan knob and score it with `paraplan evaluate`, or plan with "
            "plan.pp_schedule=dualpipev (torchtitan's DualPipeV)"
        )
    if k.layers_per_chunk is not None:
        assert k.layers_per_stage is not None and k.vp is not None  # fixed_knobs_of
        default = default_chunks(k.layers_per_stage, k.vp)
        if k.layers_per_chunk != default:
            raise ConfigError(
                f"plan.layers_per_chunk={[list(r) for r in k.layers_per_chunk]}: `paraplan plan` "
                f"builds each stage's chunks as {[list(r) for r in default]} (even, short chunks "
                "next to the embedding and the loss); give that, or only plan.layers_per_stage, or "
                "score this layout with `paraplan evaluate`"
            )
    return k


def _searched_schedules(target: str | None) -> tuple[PPSchedule, ...]:
    """The pipeline schedules searched beyond the one vp implies (plan.pp_schedule unset): every
    one the CP-SAT model expresses under ``any``, those the target runs under a framework, none
    for the runnable default (every framework runs the implied ones; a fallback to the
    unrestricted optimum keeps them too, so a fully fixed plan solves to its own evaluation)."""
    if target == UNRESTRICTED:
        return SEARCHABLE_SCHEDULES
    return searched_schedules(target) if target is not None else ()


def _base_options(inst: Instance) -> Options:
    """The scenario's ``solver:`` section as the solver's search Options, before any target."""
    o = inst.scenario.solver
    options = Options(
        allow_uneven_stages=o.allow_uneven_stages,
        search_placement=o.search_placement,
        max_micro_batch=o.max_micro_batch,
        max_vp=o.max_vp,
        uniform_recompute=o.uniform_recompute,
        search_moe_state=o.search_moe_state,
        pp_schedules=_searched_schedules(o.target),
    )
    split = inst.fixed.layers_per_stage
    if not o.allow_uneven_stages and split and len(set(split)) > 1:
        raise ConfigError(
            f"plan.layers_per_stage={list(split)} is uneven but "
            "solver.allow_uneven_stages is false; make the stages equal or turn it on"
        )
    fixed = fixed_modes(inst)
    if o.uniform_recompute and fixed and len(set(fixed)) > 1:
        raise ConfigError(
            f"plan.recompute={[m.value for m in fixed]} differs per stage but "
            "solver.uniform_recompute is true; fix one mode or turn it off"
        )
    vp = inst.fixed.vp
    if vp is not None and vp > o.max_vp:  # a fixed knob raises its cap
        options = replace(options, max_vp=vp)
    return options


def search_options(inst: Instance) -> Options:
    """The scenario's ``solver:`` section as the solver's search Options: ``target`` narrows it to
    what that framework runs (paraplan/planning.py); ``any`` leaves it unrestricted; unset, the
    search of what at least one framework runs (planning.runnable_options; unrestricted when no
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
    more_headroom: bool = False,
) -> Result | ServingResult:
    """The fastest plan under the cost model that at least one framework runs (``runs_on``
    names them; ``solver.target`` narrows the search to one framework, ``any`` widens it to
    the unrestricted optimum), proven optimal when ``result.solver.status`` is OPTIMAL
    (otherwise the gap says how far it can be). Knobs fixed in the scenario's ``plan:`` are
    respected. InfeasibleError says which resource binds; SolveTimeout if no plan was found in
    time. ``calibration``: a profile file or object (as in ``evaluate``). A serving scenario
    (``workload:``) gets the best serving plan for its ``objective`` (paraplan/serving/api.py).
    ``more_headroom``: for a plan at the edge of memory, one more search for the next plan with
    more headroom, stated in the explanation (paraplan/headroom.py; ``paraplan plan
    --more-headroom``). Off by default, as it can double the solve: the explanation then names
    the headroom that search would keep and how to ask for it."""
    started = time.perf_counter()
    _check_solve_args(time_limit_s, workers, top, seed)
    if is_serving(scenario):  # workload: (issue 23)
        left_s = time_limit_s - (time.perf_counter() - started)
        kw = {"workers": workers, "top": top, "seed": seed, "calibration": calibration}
        return serving_api().solve_serving_scenario(scenario, time_limit_s=left_s, **kw)
    if _chooses_cluster(scenario):  # capacity planning: the cluster is part of the search
        from paraplan.capacity.solve import solve_capacity

        return solve_capacity(scenario, time_limit_s=time_limit_s, workers=workers, top=top, seed=seed)
    # the planning room's steps in order (paraplan/planning.py): scenario -> instance -> options
    # -> filter and search -> result
    inst = _instance(scenario, calibration, search=True)
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
        top=top,  # top = 1: the runner-up is the best other layout the search saw (solver Seen)
        duplicate_rel=DUPLICATE_REL,
        runner_up_seen=True,
    )
    searched, notes, runnable_only = search(inst, fixed, base, opts, progress, time_limit_s, deadline)
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
    proof = None  # top = 1: what the search saw of the next best (proven or a bound)
    if out.seen is not None:
        seen_plan = out.seen.plan.plan if out.seen.plan is not None else None
        if seen_plan is not None and (not runnable_only or runs_on(inst, seen_plan)):
            runner = (seen_plan, cost_evaluate(inst.graph, inst.cluster, inst.job, seen_plan))
        proof = RunnerProof(runner is not None and out.seen.proven, out.seen.others_bound_s)
    alternatives = [
        Alternative(
            summary=summary(s.plan),
            step_time_s=s.objective_s,
            step_time_band_s=band_out(inst.cluster, s.objective_s, inst.graph.spec.is_moe),
            plan=plan_doc(s.plan, inst.job),
            runs_on=on,
        )
        for s, on in others[: top - 1]
    ]
    band = band_out(inst.cluster, breakdown.step_time_s, inst.graph.spec.is_moe)
    explanation = explain(best.plan, breakdown, inst.cluster, runner, band, job=inst.job, proof=proof)
    roomier = (
        more_headroom_line(inst, best.plan, breakdown, fixed, base, opts, deadline, time.perf_counter)
        if more_headroom
        else more_headroom_hint(inst, breakdown)
    )
    explanation += ([roomier] if roomier else []) + notes
    result = evaluate_plan(inst, best.plan, solver_out, alternatives=alternatives, explanation=explanation)
    return with_training(_with_runs_on(result, inst, best.plan), inst)


def _chooses_cluster(scenario: str | Path | dict[str, Any] | Scenario) -> bool:
    """The scenario has ``cluster.choose`` (paraplan/capacity: the cluster search)."""
    return load_scenario(scenario).cluster.choose is not None
