"""The searches behind ``paraplan.solve``: one solver run with its failures as the API's errors
(``run_search``), and the runnable-by-default order of searches (``runnable_search``, described
in paraplan/targets.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, NamedTuple

from paraplan.cost import PartialPlan
from paraplan.cost import evaluate as cost_evaluate
from paraplan.errors import InfeasibleError, SolveTimeout
from paraplan.instance import Instance
from paraplan.report import gib
from paraplan.solver import (
    NoFitError,
    NoLayoutError,
    Options,
    Outcome,
    OutOfTime,
    Solution,
    SolverOptions,
    solve_instance,
)
from paraplan.targets import RunnableSpace, TargetFilter, UnionFilter, runs_on

__all__ = ["Search", "run_search", "runnable_search", "time_left"]


def _device_names(inst: Instance) -> str:
    pools = inst.cluster.pools or (inst.cluster,)
    return " / ".join(sorted({p.accelerator.name for p in pools}))


def _no_layout_reason(inst: Instance) -> str:
    spec, job, n = inst.spec, inst.job, inst.cluster.num_devices
    p = inst.scenario.plan
    fixed = {k: v for k, v in p.model_dump().items() if v is not None}
    return (
        f"no parallel layout satisfies the rules for {n} devices: tp must divide heads="
        f"{spec.num_heads} (and match kv_heads={spec.num_kv_heads}), pp at most layers="
        f"{spec.num_layers}, dp = devices/(tp*pp*cp) must divide global_batch={job.global_batch}, "
        f"cp must split seq_len={job.seq_len} evenly"
        + (
            "; on cluster.pools, tp*cp*dp must divide the devices of every pool used and pp is "
            "the outermost axis of plan.order"
            if inst.cluster.pools
            else ""
        )
        + (
            f"; solver.allow_uneven_stages is false, so pp x vp must divide layers={spec.num_layers}"
            if not inst.scenario.solver.allow_uneven_stages
            else ""
        )
        + (
            f"; fixed knobs {fixed} leave nothing; free some of them"
            if fixed
            else "; change the device count or the global batch"
        )
    )


class Search(NamedTuple):
    """One search's outcome with the options it ran under."""

    out: Outcome
    options: Options


def run_search(
    inst: Instance,
    fixed: PartialPlan,
    options: Options,
    opts: SolverOptions,
    progress: Callable[[str], None] | None,
    time_limit_s: float,
    shared: dict[tuple[object, ...], Any] | None = None,
) -> Search:
    """solve_instance with its failures as the API's errors (InfeasibleError, SolveTimeout);
    ``shared`` keeps the cost terms across searches of one instance."""
    try:
        out = solve_instance(inst.graph, inst.cluster, inst.job, fixed, options, opts, progress, shared)
    except OutOfTime as e:
        raise SolveTimeout(
            f"no plan found within --time-limit {time_limit_s:g} s ({e}); raise "
            "it, or fix more plan knobs to shrink the space"
        ) from None
    except NoLayoutError:
        f = options.layout_filter
        if isinstance(f, UnionFilter) and f.refused:
            raise InfeasibleError(
                f"no framework runs any layout of this scenario: {f.reason()}; change the scenario",
                ("solver.target",),
            ) from None
        if isinstance(f, TargetFilter) and f.refused:
            raise InfeasibleError(
                f"no plan {f.name} can run: {f.reason()}; change the scenario or drop solver.target",
                ("solver.target",),
            ) from None
        raise InfeasibleError(_no_layout_reason(inst), ("divisibility",)) from None
    except NoFitError as e:
        raise InfeasibleError(
            f"no plan fits memory: the least any plan needs is {gib(e.min_bytes)} per device, "
            f"but {_device_names(inst)} has {gib(e.capacity)} (short by "
            f"{gib(e.min_bytes - e.capacity)}); add devices, use a larger-memory GPU, shorten "
            "job.seq_len, or free plan knobs fixed in the scenario",
            ("memory_per_stage",),
        ) from None
    if not out.solutions:
        if out.status == "INFEASIBLE":
            raise InfeasibleError("the solver proved the model infeasible", ("model",))
        f = options.layout_filter
        refused = (
            f"; solver.target: {f.reason()}"
            if isinstance(f, TargetFilter | UnionFilter) and f.refused
            else ""
        )
        raise SolveTimeout(f"no plan found within --time-limit {time_limit_s:g} s; raise it" + refused)
    return Search(out, options)


def runnable_search(
    inst: Instance,
    fixed: PartialPlan,
    space: RunnableSpace,
    base: Options,
    opts: SolverOptions,
    progress: Callable[[str], None] | None,
    time_limit_s: float,
    deadline: float,
) -> tuple[Search, list[str]]:
    """The runnable-by-default search (paraplan/targets.py), widest space first: the unrestricted
    search, then the relaxed one, each kept when its optimum runs on some framework (its space
    holds every framework's, so that plan is the fastest any framework runs); else one search per
    group of frameworks, the fastest winning (the bound the least over the groups). When no
    framework runs any plan of the scenario at all (``space.relaxed`` is None): the unrestricted
    optimum, with a note. InfeasibleError / SolveTimeout when the frameworks' plans are none or
    not found in time (naming the unrestricted optimum, which ``solver.target: any`` returns)."""
    shared: dict[tuple[object, ...], Any] = {}  # one instance: its cost terms serve every search
    widest = run_search(inst, fixed, base, opts, progress, time_limit_s, shared)
    if space.relaxed is None:
        return widest, [
            "no framework runs any plan of this scenario ("
            + "; ".join(f"{n}: {r}" for n, r in space.excluded.items())
            + "), so this is the unrestricted optimum (solver.target: any)"
        ]
    if runs_on(inst, widest.out.solutions[0].plan):
        return widest, []
    twin = _uniform_twin(inst, widest.out.solutions[0]) if fixed.recompute is None else None
    if twin is not None:  # as fast, so as optimal, and a framework runs it
        return Search(replace(widest.out, solutions=[twin, *widest.out.solutions[1:]]), widest.options), []
    free_s = widest.out.solutions[0].objective_s
    any_hint = (
        f"; the unrestricted optimum ({free_s:.4g} s, solver.target: any / --target any) "
        "runs on no framework as it is"
    )
    try:
        relaxed = run_search(
            inst,
            fixed,
            space.relaxed,
            replace(opts, time_limit_s=time_left(deadline, time_limit_s)),
            progress,
            time_limit_s,
            shared,
        )
    except InfeasibleError as e:
        raise InfeasibleError(f"{e}{any_hint}", e.families) from None
    except SolveTimeout as e:
        raise SolveTimeout(f"{e}: no plan a framework runs was found in time{any_hint}") from None
    if runs_on(inst, relaxed.out.solutions[0].plan):
        return relaxed, [_slower_note(free_s, relaxed.out.solutions[0].objective_s)]
    found: list[Search] = []
    for options in space.groups if len(space.groups) > 1 else ():  # search each group exactly
        try:
            found.append(
                run_search(
                    inst,
                    fixed,
                    options,
                    replace(opts, time_limit_s=time_left(deadline, time_limit_s)),
                    progress,
                    time_limit_s,
                    shared,
                )
            )
        except InfeasibleError:
            continue  # nothing in this group's space: it adds nothing to the union
        except SolveTimeout as e:
            raise SolveTimeout(f"{e}: no plan a framework runs was found in time{any_hint}") from None
    runnable = [f for f in found if runs_on(inst, f.out.solutions[0].plan)]
    if not runnable:
        raise InfeasibleError(f"no plan a framework runs was found{any_hint}", ("solver.target",))
    best = min(runnable, key=lambda f: f.out.solutions[0].objective_s)
    proven = len(runnable) == len(found) and all(f.out.status == "OPTIMAL" for f in found)
    out = replace(
        best.out, bound_s=min(f.out.bound_s for f in found), status="OPTIMAL" if proven else "FEASIBLE"
    )
    return Search(out, best.options), [_slower_note(free_s, best.out.solutions[0].objective_s)]


def _slower_note(free_s: float, step_s: float) -> str:
    """The explanation line of a runnable default slower than the unrestricted optimum."""
    return (
        f"the unrestricted optimum ({free_s:.4g} s; solver.target: any) runs on no framework "
        f"as it is; this is the fastest plan a framework runs ({(step_s / free_s - 1):+.1%})"
    )


def _uniform_twin(inst: Instance, best: Solution) -> Solution | None:
    """``best`` with one of its recompute modes on every stage, when that is no slower (the
    solver breaks such ties its own way), fits, and a framework runs it; else None."""
    plan = best.plan
    best_s = cost_evaluate(inst.graph, inst.cluster, inst.job, plan).step_time_s
    for mode in dict.fromkeys(plan.recompute):
        twin = plan.with_recompute(mode)
        if twin == plan:
            continue
        b = cost_evaluate(inst.graph, inst.cluster, inst.job, twin)
        if b.fits and b.step_time_s <= best_s and runs_on(inst, twin):
            return Solution(twin, best.objective_s + b.step_time_s - best_s)
    return None


def time_left(deadline: float, time_limit_s: float) -> float:
    """Seconds left before ``deadline``; SolveTimeout when none are."""
    left_s = deadline - time.perf_counter()
    if left_s <= 0:
        raise SolveTimeout(f"no plan found within --time-limit {time_limit_s:g} s; raise it")
    return left_s
