"""The planning room: how ``paraplan.solve`` turns a training scenario into its plan, one step
after another (as torchtitan's parallelize functions apply one parallelism after another):

1. scenario -> instance: ``api.load_scenario`` reads it (paraplan/scenario/schema.py, the plan document
   paraplan/scenario/plan_doc.py), ``instance.build_instance`` builds the graph, cluster, job and the
   fixed knobs (plan_knobs.fixed_knobs_of);
2. instance -> options: ``api.fixed_knobs`` (what the search can honour) and the ``solver:``
   section as solver.Options (``api.search_options``);
3. options -> filter: ``target_options`` (``solver.target``: the plans one framework runs) or
   ``runnable_options`` (unset: the plans some framework runs); below;
4. filter -> search: ``search`` runs the one branch and bound (``run_search``, its failures as
   the API's errors; ``runnable_search`` for the default); below;
5. search -> result: ``api.solve`` scores the best plan (result.evaluate_plan), explains it
   (reports/explain.py) and names the frameworks that run it (``runs_on``, below).

Steps 3 and 4 live here. The filter: the framework's rules module (paraplan/rules/<name>.py)
states its rules (``RULES``) and how its per-stage choices may vary (``SEARCH``). The solver gets
them as search options: a layout filter (rules/filter.py ``FrameworkFilter``) that runs the rules
on each layout with an even split and one recompute mode (choices every framework has; the rules
that read neither the ZeRO stage nor the rank order run once per layout family, and the solver
drops a family they refuse before bounding it), one recompute mode for every stage, the
framework's recompute modes, and even stages where the framework needs them. The search stays
exact over what passes (solver/space.py ``Options``), so the plan is the best the framework can
run under the cost model, and it exports to that framework without a refusal.

Without ``solver.target`` the planner is *runnable by default* (``runnable_options``): one search
whose layout filter is the union of the frameworks' (rules/filter.py ``AnyFramework``: a layout
passes when some framework accepts it) and whose per-stage limits are, per layout, those of the
frameworks that accept it (``Options.layout_limits``: the layout is searched under each). That
space is exactly the union of the frameworks' own searches, so its optimum is the fastest plan
some framework runs, found in one branch and bound. ``solver.target: any`` searches everything the
cost model allows (the unrestricted optimum); ``runs_on`` names the frameworks a plan passes.

Size: one module because it is the recipe, read top to bottom: scenario, instance, options,
filter, search, result.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from paraplan.cost import PartialPlan, Plan, Recompute
from paraplan.errors import ConfigError, InfeasibleError, SolveTimeout
from paraplan.instance import Instance, headroom_hint
from paraplan.reports.text import gib
from paraplan.rules import FRAMEWORKS, Draft, RuleContext, first_refusal, rules_of, runs_pools, runs_precision
from paraplan.rules.filter import AnyFramework, FrameworkFilter
from paraplan.scenario.plan_doc import given
from paraplan.solver import (
    NoFitError,
    NoLayoutError,
    Options,
    Outcome,
    OutOfTime,
    SolverOptions,
    solve_instance,
)
from paraplan.solver.limits import narrowed

__all__ = [
    "TARGETS",
    "UNRESTRICTED",
    "Planned",
    "RunnableSpace",
    "Search",
    "fixed_modes",
    "framework_filter",
    "rule_context",
    "run_search",
    "runnable_options",
    "runnable_search",
    "runs_on",
    "search",
    "target_options",
    "time_left",
]

UNRESTRICTED = "any"
"""``solver.target: any``: the unrestricted optimum of the cost model (may run on no framework)."""
TARGETS: tuple[str, ...] = FRAMEWORKS
"""The frameworks a plan can be searched for and exported to, in the order ``runs_on`` lists
(rules/frameworks.py)."""


# steps 3 and 4 in order; each step's functions follow


class Planned(NamedTuple):
    """Step 4's outcome: the search, the notes for the explanation, and whether the plan is
    from the runnable default's search (its runners-up are kept only where a framework runs)."""

    searched: Search
    notes: list[str]
    runnable_only: bool


def search(
    inst: Instance,
    fixed: PartialPlan,
    base: Options,
    opts: SolverOptions,
    progress: Callable[[str], None] | None,
    time_limit_s: float,
    deadline: float,
) -> Planned:
    """Steps 3 and 4 (module docstring): ``base`` narrowed by ``solver.target`` (one framework,
    ``any``: none) or, unset, to the plans some framework runs; then the one search."""
    target = inst.scenario.solver.target
    if target is None:
        space = runnable_options(base, inst)
        searched, notes = runnable_search(inst, fixed, space, base, opts, progress, time_limit_s, deadline)
        return Planned(searched, notes, space.options is not None)
    options = base if target == UNRESTRICTED else target_options(base, target, inst)
    return Planned(run_search(inst, fixed, options, opts, progress, time_limit_s), [], False)


# step 3: the filter


def rule_context(inst: Instance) -> RuleContext:
    """What the framework rules read of ``inst``: model, job, cluster and the model preset."""
    return RuleContext(inst.spec, inst.job, inst.cluster, inst.scenario.model.preset)


def framework_filter(name: str, inst: Instance) -> FrameworkFilter:
    """Framework ``name``'s layout filter for ``inst`` (its fixed split and recompute modes);
    InfeasibleError when a rule about the model or job alone (MODEL_RULES) refuses."""
    f = FrameworkFilter(
        name, rule_context(inst), rules_of(name), inst.fixed.layers_per_stage, fixed_modes(inst)
    )
    refusal = f.model_refusal()
    if refusal is not None:
        raise InfeasibleError(
            f"no plan {name} can run: {refusal}; change the scenario or drop solver.target",
            ("solver.target",),
        )
    return f


def fixed_modes(inst: Instance) -> tuple[Recompute, ...] | None:
    """The recompute mode(s) the scenario's plan fixes (one, or one per stage), else None."""
    return inst.fixed.recompute


def _check_fixed_recompute(
    name: str, inst: Instance, modes: tuple[Recompute, ...] | None, uniform: bool
) -> None:
    """InfeasibleError when the scenario fixes recompute modes the framework does not run."""
    fixed = fixed_modes(inst)
    if fixed is None:
        return
    if uniform and len(set(fixed)) > 1:
        raise InfeasibleError(
            f"no plan {name} can run: plan.recompute={[m.value for m in fixed]} "
            f"differs per stage, but {name} applies one recompute setting to "
            "every stage; fix one mode or drop solver.target",
            ("solver.target",),
        )
    if modes is not None and not set(fixed) <= set(modes):
        raise InfeasibleError(
            f"no plan {name} can run: plan.recompute={fixed[0].value} is not a "
            f"mode {name} has ({', '.join(m.value for m in modes)}); change it "
            "or drop solver.target",
            ("solver.target",),
        )


def target_options(options: Options, name: str, inst: Instance) -> Options:
    """``options`` narrowed to what framework ``name`` runs (module docstring); InfeasibleError
    when the model or job alone rules the framework out (its MODEL_RULES)."""
    if inst.cluster.pools and not runs_pools(name):
        raise ConfigError(
            f"solver.target={name}: {name} builds one mesh of one device type and "
            "cannot run a mixed-GPU cluster (cluster.pools); use megatron or no "
            "target"
        )
    layout_filter = framework_filter(name, inst)
    limits = layout_filter.limits
    _check_fixed_recompute(name, inst, limits.recompute_modes, limits.uniform_recompute)
    if inst.fixed.recompute_layers is not None and not limits.partial_recompute:
        raise InfeasibleError(
            f"no plan {name} can run: plan.recompute_layers={inst.scenario.plan.recompute_layers} "
            f"recomputes a number of layers, which {name} cannot (it recomputes every layer "
            "alike); drop plan.recompute_layers or solver.target",
            ("solver.target",),
        )
    return replace(
        narrowed(options, limits),
        layout_filter=layout_filter,
        family_filter=layout_filter.family_passes,
        zero_filter=layout_filter.zero_passes,
        layout_limits=(lambda lay: (layout_filter.limits_for(lay),)) if inst.spec.is_moe else None,
        state_holds=layout_filter.state_holds,
    )


@dataclass(frozen=True)
class RunnableSpace:
    """What the runnable-by-default search (module docstring) searches: ``names``, the
    frameworks that can run some plan of the scenario; ``options``, the one search over the union
    of their spaces (None when there are none); ``excluded``: framework -> why it runs no plan."""

    names: tuple[str, ...]
    options: Options | None
    excluded: dict[str, str]


def _widest(options: list[Options]) -> Options:
    """The narrowest options whose per-stage fields hold each of ``options``' (they bound every
    framework's variant of a layout)."""
    modes = [o.recompute_modes for o in options]
    splits = {o.stage_split for o in options}
    return replace(
        options[0],
        uniform_recompute=all(o.uniform_recompute for o in options),
        allow_uneven_stages=any(o.allow_uneven_stages for o in options),
        recompute_modes=(
            None
            if any(m is None for m in modes)
            else tuple(r for r in Recompute if any(r in m for m in modes))
        ),
        stage_split=splits.pop() if len(splits) == 1 else None,
        partial_recompute=any(o.partial_recompute for o in options),
    )


def runnable_options(options: Options, inst: Instance) -> RunnableSpace:
    """The runnable-by-default search of ``inst`` (module docstring): each framework's own
    narrowing of ``options`` (``target_options``) checks what it runs at all; the one search
    filters layouts by their union and searches each under its frameworks' per-stage limits."""
    narrowed_by: dict[str, Options] = {}
    excluded: dict[str, str] = {}
    for name in TARGETS:
        if not runs_precision(name, inst.job.precision):
            excluded[name] = f"job.precision={inst.job.precision.value}: {name} has no setting for it"
            continue
        try:
            narrowed_by[name] = target_options(options, name, inst)
        except (ConfigError, InfeasibleError) as e:
            excluded[name] = str(e)
    if not narrowed_by:
        return RunnableSpace((), None, excluded)
    filters = [o.layout_filter for o in narrowed_by.values()]
    union = AnyFramework(filters, options.allow_uneven_stages)  # type: ignore[arg-type]
    search = replace(
        _widest(list(narrowed_by.values())),
        layout_filter=union,
        family_filter=union.family_passes,
        zero_filter=union.zero_passes,
        layout_limits=union.limits,
        order_limits=union.order_limits,
        state_holds=union.state_holds,
    )
    return RunnableSpace(tuple(narrowed_by), search, excluded)


def runs_on(inst: Instance, plan: Plan) -> list[str]:
    """The frameworks whose exporter takes ``plan`` as it is: every rule passes, those of the
    cluster and precision it launches (rules/frameworks.py) first, in TARGETS order."""
    ctx = rule_context(inst)
    draft = Draft(plan, ctx.precision)
    return [name for name in TARGETS if first_refusal(ctx, draft, rules_of(name).rules) is None]


# step 4: the search


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
            f"{gib(e.min_bytes - e.capacity)}); add devices, use a larger-memory GPU, shorten job.seq_len, "
            f"or free plan knobs fixed in the scenario{headroom_hint(inst.cluster, e.min_bytes)}",
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
    """The runnable-by-default search (module docstring): one search over the union of the
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
