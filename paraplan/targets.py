"""solver.target: search only the plans one training framework can run; unset, the plans some
framework runs.

The framework's rules module (paraplan/rules/<name>.py) states its rules (``RULES``) and how its
per-stage choices may vary (``SEARCH``). The solver gets them as search options: a layout
filter (rules/filter.py ``FrameworkFilter``) that runs the rules on each layout with an even split
and one recompute mode (choices every framework has; the rules that read neither the ZeRO stage
nor the rank order run once per layout family, and the solver drops a family they refuse before
bounding it), one recompute mode for every stage, the framework's recompute modes, and even
stages where the framework needs them. The search stays exact over what passes (solver/space.py
``Options``), so the plan is the best the framework can run under the cost model, and it exports
to that framework without a refusal.

Without ``solver.target`` the planner is *runnable by default* (``runnable_options``): one search
whose layout filter is the union of the frameworks' (rules/filter.py ``AnyFramework``: a layout
passes when some framework accepts it) and whose per-stage limits are, per layout, those of the
frameworks that accept it (``Options.layout_limits``: the layout is searched under each). That
space is exactly the union of the frameworks' own searches, so its optimum is the fastest plan
some framework runs, found in one branch and bound. ``solver.target: any`` searches everything
the cost model allows (the unrestricted optimum, which may run nowhere). ``runs_on`` names the
frameworks whose rules pass a plan as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from paraplan.cost import Plan, Recompute
from paraplan.errors import ConfigError, InfeasibleError
from paraplan.instance import Instance
from paraplan.rules import FRAMEWORKS, Draft, RuleContext, first_refusal, rules_of, runs_pools, runs_precision
from paraplan.rules.filter import AnyFramework, FrameworkFilter
from paraplan.solver import Options
from paraplan.solver.limits import narrowed

__all__ = [
    "TARGETS",
    "UNRESTRICTED",
    "RunnableSpace",
    "framework_filter",
    "target_options",
    "fixed_modes",
    "runnable_options",
    "runs_on",
    "rule_context",
]

UNRESTRICTED = "any"
"""``solver.target: any``: the unrestricted optimum of the cost model (may run on no framework)."""
TARGETS: tuple[str, ...] = FRAMEWORKS
"""The frameworks a plan can be searched for and exported to, in the order ``runs_on`` lists
(rules/frameworks.py)."""


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
        # a MoE layout's software state narrows its recompute modes (FrameworkFilter.limits_for)
        layout_limits=(lambda layout: (layout_filter.limits_for(layout),)) if inst.spec.is_moe else None,
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
        layout_limits=union.limits,
        state_holds=union.state_holds,
    )
    return RunnableSpace(tuple(narrowed_by), search, excluded)


def runs_on(inst: Instance, plan: Plan) -> list[str]:
    """The frameworks whose exporter takes ``plan`` as it is: every rule passes, those of the
    cluster and precision it launches (rules/frameworks.py) first, in TARGETS order."""
    ctx = rule_context(inst)
    draft = Draft(plan, ctx.precision)
    return [name for name in TARGETS if first_refusal(ctx, draft, rules_of(name).rules) is None]
