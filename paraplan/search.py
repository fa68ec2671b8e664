"""The search behind ``paraplan.solve``: one solver run with its failures as the API's errors
(``run_search``), and the runnable-by-default search (``runnable_search``: one branch and bound
over the plans some framework runs, paraplan/targets.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, NamedTuple

from paraplan.cost import PartialPlan
from paraplan.errors import InfeasibleError, SolveTimeout
from paraplan.instance import Instance
from paraplan.plan_doc import given
from paraplan.reports.text import gib
from paraplan.rules.filter import AnyFramework, FrameworkFilter
from paraplan.solver import (
    NoFitError,
    NoLayoutError,
    Options,
    Outcome,
    OutOfTime,
    SolverOptions,
    solve_instance,
)
from paraplan.targets import RunnableSpace

__all__ = ["Search", "run_search", "runnable_search", "time_left"]


def _device_names(inst: Instance) -> str:
    pools = inst.cluster.pools or (inst.cluster,)
    return " / ".join(sorted({p.accelerator.name for p in pools}))


def _no_layout_reason(inst: Instance) -> str:
    spec, job, n = inst.spec, inst.job, inst.cluster.num_devices
    fixed = given(inst.scenario.plan)
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
        if isinstance(f, AnyFramework) and f.refused:
            raise InfeasibleError(
                f"no framework runs any layout of this scenario: {f.reason()}; change the scenario",
                ("solver.target",),
            ) from None
        if isinstance(f, FrameworkFilter) and f.refused:
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
            if isinstance(f, FrameworkFilter | AnyFramework) and f.refused
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
    """The runnable-by-default search (paraplan/targets.py): one search over the union of the
    frameworks' spaces, whose optimum is the fastest plan some framework runs. When no framework
    runs any plan of the scenario at all (``space.options`` is None): the unrestricted optimum,
    with a note. InfeasibleError / SolveTimeout when the frameworks' plans are none or not found
    in time; an InfeasibleError then names the unrestricted optimum (``solver.target: any``),
    searched only on that failure."""
    if space.options is None:
        widest = run_search(inst, fixed, base, opts, progress, time_limit_s)
        return widest, [
            "no framework runs any plan of this scenario ("
            + "; ".join(f"{n}: {r}" for n, r in space.excluded.items())
            + "), so this is the unrestricted optimum (solver.target: any)"
        ]
    try:
        return run_search(inst, fixed, space.options, opts, progress, time_limit_s), []
    except InfeasibleError as e:
        try:
            left = replace(opts, time_limit_s=time_left(deadline, time_limit_s))
            free = run_search(inst, fixed, base, left, None, time_limit_s)
        except (InfeasibleError, SolveTimeout):
            raise e from None
        free_s = free.out.solutions[0].objective_s
        raise InfeasibleError(
            f"{e}; the unrestricted optimum ({free_s:.4g} s, solver.target: any / --target any) "
            "runs on no framework as it is",
            e.families,
        ) from None


def time_left(deadline: float, time_limit_s: float) -> float:
    """Seconds left before ``deadline``; SolveTimeout when none are."""
    left_s = deadline - time.perf_counter()
    if left_s <= 0:
        raise SolveTimeout(f"no plan found within --time-limit {time_limit_s:g} s; raise it")
    return left_s
