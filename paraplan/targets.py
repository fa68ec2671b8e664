"""solver.target: search only the plans one training framework can run.

The framework's rules module (paraplan/rules/<name>.py) states its rules (``RULES``) and how its
per-stage choices may vary (``SEARCH``). The solver gets them as search options: a layout
filter that runs the rules on each layout with an even split and one recompute mode (choices every
framework has; the rules that read neither the ZeRO stage nor the rank order run once per layout
family, and the solver drops a family they refuse before bounding it), one recompute mode for
every stage, the framework's recompute modes, and even stages where the framework needs them. The
search stays exact over what passes (solver/space.py ``Options``), so the plan is the best the
framework can run under the cost model, and it exports to that framework without a refusal.

Without ``solver.target`` the planner is *runnable by default* (``runnable_space``; the search
order is paraplan/api.py ``_runnable_search``): the fastest plan at least one framework runs.
The unrestricted search comes first; its space holds every framework's, so when a framework runs
its optimum (``runs_on``), or the same plan with one recompute mode on every stage at the same
step time, that plan is the answer. Else one relaxed search covers all frameworks (a layout
passes when any framework's rules accept it, ``UnionFilter``; one recompute mode per stage, as
every framework runs; the per-stage limits all frameworks share): again a superset, so a runnable
optimum is the answer. Else the frameworks are searched in groups that share their per-stage
limits (a union filter each) and the fastest group plan wins. ``solver.target: any`` searches
everything the cost model allows (the unrestricted optimum, which may run nowhere).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import get_args

from paraplan.cost import Layout, Plan, Recompute
from paraplan.cost.plan import plan_key
from paraplan.errors import ConfigError, InfeasibleError
from paraplan.export import POOLED_TARGETS, exports_precision
from paraplan.instance import Instance
from paraplan.rules import Draft, Rule, RuleContext, TargetRules, first_refusal, rules_of
from paraplan.schema import SolverTarget
from paraplan.solver import Options
from paraplan.solver.tables import even_layers

__all__ = [
    "TARGETS",
    "UNRESTRICTED",
    "TargetFilter",
    "UnionFilter",
    "RunnableSpace",
    "target_options",
    "fixed_modes",
    "runnable_space",
    "runs_on",
    "rule_context",
]

UNRESTRICTED = "any"
"""``solver.target: any``: the unrestricted optimum of the cost model (may run on no framework)."""
TARGETS: tuple[str, ...] = tuple(t for t in get_args(SolverTarget) if t != UNRESTRICTED)
"""The frameworks a plan can be searched for and exported to, in the order ``runs_on`` lists."""


def rule_context(inst: Instance) -> RuleContext:
    """What the framework rules read of ``inst``: model, job, cluster and the model preset."""
    return RuleContext(inst.spec, inst.job, inst.cluster, inst.scenario.model.preset)


class TargetFilter:
    """A layout filter: the target's rules on the layout with one representative split and mode.

    The rules that read neither the ZeRO stage nor the rank order (``TargetRules.family_rules``)
    run once per layout family (``family_passes``, also the solver's family filter, which drops
    a refused family before it is bounded); the rest (``LAYOUT_RULES``) once per layout.
    Remembers each verdict (the solver may ask again) and how often each rule refused, so an
    empty search can say which rule stood in the way."""

    def __init__(self, name: str, inst: Instance, rules: TargetRules) -> None:
        self.name = name
        self._model_rules = rules.model_rules
        self._family_rules = rules.family_rules
        self._layout_rules = tuple(r for r in rules.layout_rules if r not in rules.model_rules)
        self._ctx = rule_context(inst)
        self._num_layers = inst.spec.num_layers
        fixed = inst.scenario.plan
        self._layers = tuple(fixed.layers_per_stage) if fixed.layers_per_stage else None
        self._recompute = fixed_modes(inst)
        self._split = rules.search.stage_split
        self._families: dict[tuple[object, ...], bool] = {}
        self._verdicts: dict[Layout, bool] = {}
        self._splits: dict[tuple[int, int], tuple[int, ...] | None] = {}
        self.refused: Counter[str] = Counter()

    def check_model(self) -> None:
        """InfeasibleError when a rule about the model or job alone (MODEL_RULES) refuses: then
        no layout can pass, and the per-layout check leaves those rules out."""
        plan = Plan(
            dp=1, tp=1, pp=1, micro_batch=1, recompute=(Recompute.NONE,), layers_per_stage=(self._num_layers,)
        )
        refusal = first_refusal(self._ctx, Draft(plan, self._ctx.precision), self._model_rules)
        if refusal is not None:
            raise InfeasibleError(
                f"no plan {self.name} can run: {refusal.rule}; change the scenario or drop solver.target",
                ("solver.target",),
            )

    def _representative(self, layout: Layout) -> Plan | None:
        """The layout with the scenario's fixed split (else the framework's own, else an even
        one) and its fixed recompute mode (else none)."""
        pp = layout.pp
        if (pp, layout.vp) not in self._splits:  # one per (pp, vp): the filter sees many layouts
            if self._layers and len(self._layers) == pp:
                chosen: tuple[int, ...] | None = self._layers
            elif self._split is not None:
                chosen = self._split(self._num_layers, pp, layout.vp)
            else:
                chosen = even_layers(self._num_layers, pp, layout.vp)
            self._splits[pp, layout.vp] = chosen
        split = self._splits[pp, layout.vp]
        if split is None:
            return None
        modes = self._recompute or (Recompute.NONE,)
        return layout.plan(split, modes if len(modes) == pp else (modes[0],) * pp)

    def _passes(self, layout: Layout, rules: tuple[Rule, ...]) -> bool:
        """``rules`` accept ``layout``'s representative (a refusal is counted)."""
        representative = self._representative(layout)
        if representative is None:
            return False
        refusal = first_refusal(self._ctx, Draft(representative, self._ctx.precision), rules)
        if refusal is not None:
            self.refused[refusal.rule] += 1
            return False
        return True

    def family_passes(self, family: Layout) -> bool:
        """Whether the family rules accept ``family`` (any ZeRO stage and rank order: those
        rules do not read them); False means every layout of the family fails."""
        key = plan_key(family, _LAYOUT_FIELDS)
        verdict = self._families.get(key)
        if verdict is None:
            verdict = self._families[key] = self._passes(family, self._family_rules)
        return verdict

    def __call__(self, layout: Layout) -> bool:
        verdict = self._verdicts.get(layout)
        if verdict is None:
            verdict = self.family_passes(layout) and self._passes(layout, self._layout_rules)
            self._verdicts[layout] = verdict
        return verdict

    def reason(self) -> str:
        """Why nothing passed: the rules that refused, most frequent first."""
        if not self.refused:
            return f"{self.name} can run none of the layouts"
        rules = [rule for rule, _ in self.refused.most_common(2)]
        return f"{self.name} refused every layout, e.g.: " + "; ".join(rules)


_LAYOUT_FIELDS = frozenset({"zero", "order", "torus_shape"})
"""What the solver chooses per layout of a family (solver/space.py ``zeros``, ``placements``)."""


def fixed_modes(inst: Instance) -> tuple[Recompute, ...] | None:
    """The recompute mode(s) the scenario's plan fixes (one, or one per stage), else None."""
    r = inst.scenario.plan.recompute
    if r is None:
        return None
    return tuple(Recompute(m) for m in r) if isinstance(r, list) else (Recompute(r),)


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
    if inst.cluster.pools and name not in POOLED_TARGETS:
        raise ConfigError(
            f"solver.target={name}: {name} builds one mesh of one device type and "
            "cannot run a mixed-GPU cluster (cluster.pools); use megatron or no "
            "target"
        )
    rules = rules_of(name)
    layout_filter = TargetFilter(name, inst, rules)
    layout_filter.check_model()
    limits = rules.search
    _check_fixed_recompute(name, inst, limits.recompute_modes, limits.uniform_recompute)
    if inst.scenario.plan.recompute_layers is not None and not limits.partial_recompute:
        raise InfeasibleError(
            f"no plan {name} can run: plan.recompute_layers={inst.scenario.plan.recompute_layers} "
            f"recomputes a number of layers, which {name} cannot (it recomputes every layer "
            "alike); drop plan.recompute_layers or solver.target",
            ("solver.target",),
        )
    modes = limits.recompute_modes
    if modes is not None and options.recompute_modes is not None:
        modes = tuple(r for r in modes if r in options.recompute_modes)
    return replace(
        options,
        uniform_recompute=options.uniform_recompute or limits.uniform_recompute,
        allow_uneven_stages=options.allow_uneven_stages and not limits.even_stages,
        recompute_modes=modes if modes is not None else options.recompute_modes,
        layout_filter=layout_filter,
        family_filter=layout_filter.family_passes,
        stage_split=limits.stage_split,
        partial_recompute=options.partial_recompute and limits.partial_recompute,
    )


class UnionFilter:
    """A layout filter passing what at least one of ``filters`` passes (first to accept wins;
    the frameworks that accept most come first, so most layouts cost one check)."""

    def __init__(self, filters: list[TargetFilter]) -> None:
        self.filters = filters
        self.name = " or ".join(f.name for f in filters)
        self._verdicts: dict[Layout, bool] = {}

    @property
    def refused(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for f in self.filters:
            total.update({f"{f.name}: {rule}": n for rule, n in f.refused.items()})
        return total

    def __call__(self, layout: Layout) -> bool:
        if layout not in self._verdicts:
            self._verdicts[layout] = any(f(layout) for f in self.filters)
        return self._verdicts[layout]

    def family_passes(self, family: Layout) -> bool:
        """Whether some framework's family rules accept ``family`` (TargetFilter.family_passes)."""
        return any(f.family_passes(family) for f in self.filters)

    def reason(self) -> str:
        """Why nothing passed: each framework's most frequent refusal."""
        return "; ".join(f.reason() for f in self.filters)


@dataclass(frozen=True)
class RunnableSpace:
    """What the runnable-by-default search (module docstring) searches.

    ``names``: the frameworks that can run some plan of the scenario; ``relaxed``: one search
    whose space holds all of theirs; ``groups``: searches whose union is exactly theirs (one per
    distinct set of per-stage limits); ``excluded``: framework -> why it runs no plan at all."""

    names: tuple[str, ...]
    relaxed: Options | None
    groups: tuple[Options, ...]
    excluded: dict[str, str]


_LIMIT_FIELDS = (
    "uniform_recompute",
    "allow_uneven_stages",
    "recompute_modes",
    "stage_split",
    "partial_recompute",
)


def _merge(options: list[Options]) -> Options:
    """The narrowest options whose space holds each of ``options``' spaces (their layout
    filters united)."""
    first = options[0]
    modes = [o.recompute_modes for o in options]
    splits = {o.stage_split for o in options}
    union = UnionFilter([o.layout_filter for o in options])  # type: ignore[misc]
    return replace(
        first,
        uniform_recompute=all(o.uniform_recompute for o in options),
        allow_uneven_stages=any(o.allow_uneven_stages for o in options),
        recompute_modes=(
            None
            if any(m is None for m in modes)
            else tuple(r for r in Recompute if any(r in m for m in modes))
        ),
        stage_split=splits.pop() if len(splits) == 1 else None,
        partial_recompute=any(o.partial_recompute for o in options),
        layout_filter=union,
        family_filter=union.family_passes,
    )


def runnable_space(options: Options, inst: Instance) -> RunnableSpace:
    """The runnable-by-default search of ``inst`` (module docstring): each framework's own
    narrowing of ``options`` (``target_options``), united."""
    narrowed: dict[str, Options] = {}
    excluded: dict[str, str] = {}
    for name in TARGETS:
        if not exports_precision(name, inst.job.precision):
            excluded[name] = f"job.precision={inst.job.precision.value}: {name} has no setting for it"
            continue
        try:
            narrowed[name] = target_options(options, name, inst)
        except (ConfigError, InfeasibleError) as e:
            excluded[name] = str(e)
    if not narrowed:
        return RunnableSpace((), None, (), excluded)
    groups: dict[tuple, list[Options]] = {}
    for o in narrowed.values():
        groups.setdefault(tuple(getattr(o, f) for f in _LIMIT_FIELDS), []).append(o)
    return RunnableSpace(
        tuple(narrowed), _merge(list(narrowed.values())), tuple(_merge(g) for g in groups.values()), excluded
    )


def runs_on(inst: Instance, plan: Plan) -> list[str]:
    """The frameworks whose exporter takes ``plan`` as it is (every rule passes, the cluster
    and precision are ones it launches), in TARGETS order."""
    ctx = rule_context(inst)
    draft = Draft(plan, ctx.precision)
    return [
        name
        for name in TARGETS
        if exports_precision(name, inst.job.precision)
        and (not inst.cluster.pools or name in POOLED_TARGETS)
        and first_refusal(ctx, draft, rules_of(name).rules) is None
    ]
