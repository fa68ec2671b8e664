"""The framework rules as the solver's layout predicates: ``FrameworkFilter`` (one framework,
``solver.target``) and ``AnyFramework`` (the runnable default: some framework runs the layout).

A layout (cost.Layout: degrees, micro-batch, ZeRO, SP, rank order; no split or recompute modes yet)
is checked on a representative plan: the scenario's fixed split (else the framework's own, else the
even one, cost.split.even_layers) and its fixed recompute mode (else none). How the per-stage
choices may then vary is the framework's ``SearchLimits``, which the solver applies to the layouts
the framework accepts (solver/space.py ``Options.layout_limits``). The rules that read neither the
ZeRO stage nor the rank order (``TargetRules.family_rules``) run once per layout family
(``family_passes``, also the solver's family filter); the rest (LAYOUT_RULES) once per layout less
the fields they do not read (``LAYOUT_RULES_IGNORE``: micro-batch, vp, SP, cp_comm), those of them
that do not read the rank order (``ZERO_RULES``) once per family with its ZeRO stage
(``zero_passes``, also the solver's zero filter: a family and ZeRO stage they refuse is dropped
before it is bounded). Every verdict is remembered (the solver asks again) and every refusal
counted, so an empty search can say which rule stood in the way. The placement search asks about the
rank orders of one family at a time (``AnyFramework.order_limits``): the family's keys and verdicts
are found once, and a layout is built only where a rule must run.

Size: one module because ``FrameworkFilter`` and ``AnyFramework`` share the memo keys and the
refusal counts that make the runnable default one search (the union must read what each reads).

Pure functions of (model, job, cluster, plan) with memo tables: nothing here scores a plan.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from operator import attrgetter

from paraplan.cost import Axis, CudaGraphs, Layout, Plan, Recompute
from paraplan.cost.derive import derive
from paraplan.cost.plan import plan_key
from paraplan.cost.software import SOFTWARE_FIELDS
from paraplan.cost.split import even_layers
from paraplan.rules import moe_state
from paraplan.rules.base import (
    Draft,
    Rule,
    RuleContext,
    SearchLimits,
    TargetRules,
    building_fixes,
    first_refusal,
    holds,
    verdict_only,
)

__all__ = ["FrameworkFilter", "AnyFramework", "holds", "LAYOUT_FIELDS", "LAYOUT_RULES_IGNORE"]

LAYOUT_FIELDS = frozenset({"zero", "order", "torus_shape"})
"""What the solver chooses per layout of a family (solver/space.py ``zeros``, ``placements``)."""
LAYOUT_RULES_IGNORE = frozenset({"micro_batch", "vp", "sequence_parallel", "cp_comm"})
"""What no framework's LAYOUT_RULES read (they read the degrees, ZeRO stage, rank order, pools
and slice shape): their verdict is remembered per layout less these, so the layouts of a family
that differ only here are checked once (tests/rules/test_layout_rules.py checks it). Every field
not named here, a new one included, keeps the verdicts apart."""
STATELESS_FIELDS = LAYOUT_FIELDS | frozenset(SOFTWARE_FIELDS)
"""A family less its MoE software state: the key of the verdict of the rules that do not read it."""
_RULES_BASE_IGNORE = LAYOUT_RULES_IGNORE | {"order"}
"""A layout's LAYOUT_RULES verdict key is (its id less these, its rank order): the rank orders of
one family share the rest, so it is found once per family (``AnyFramework.order_limits``)."""
_ORDER = frozenset({"order"})
Order = tuple[Axis, ...]
_state_key = attrgetter(*(f for f in moe_state.STATE_RULE_READS if f != "recompute"))
"""What the state rules read of a layout (moe_state.STATE_RULE_READS; the recompute mode is the
representative's, the filter's own): the key of their verdicts (``FrameworkFilter._state_refusal``,
``limits_for``). The representative's split reads pp and vp, which the key holds."""


class Asked:
    """A layout the filters are asked about, as its family and rank order: the layout itself
    (and its representatives, ``plans``) is built only when a rule must run, most verdicts
    being remembered. ``layout``: the layout when the caller has it."""

    __slots__ = ("family", "order", "plans", "family_plans", "_layout")

    def __init__(
        self,
        family: Layout,
        order: Order,
        layout: Layout | None = None,
        family_plans: dict[object, Plan] | None = None,
    ) -> None:
        self.family = family
        self.order = order
        self.plans: dict[object, Plan] = {}  # representatives by split, shared by the frameworks
        self.family_plans = {} if family_plans is None else family_plans  # the family's, by split
        self._layout = layout

    @property
    def layout(self) -> Layout:
        if self._layout is None:
            same = self.family.order == self.order
            self._layout = self.family if same else derive(self.family, order=self.order)
        return self._layout


def _is_state_rule(rule: Rule) -> bool:
    """A rule on the MoE software state (defined in rules/moe_state.py): the only rules that read
    the dispatcher, EP overlap or CUDA graphs, and the only ones whose verdict on the recompute
    mode depends on them (FrameworkFilter.limits_for)."""
    return rule.__module__ == moe_state.__name__


class FrameworkFilter:
    """Framework ``name``'s rules as a predicate on layouts (module docstring). ``layers``: the
    split the scenario fixes (None: free); ``recompute``: the mode(s) it fixes (None: free)."""

    def __init__(
        self,
        name: str,
        ctx: RuleContext,
        rules: TargetRules,
        layers: tuple[int, ...] | None = None,
        recompute: tuple[Recompute, ...] | None = None,
    ) -> None:
        self.name = name
        self.limits: SearchLimits = rules.search
        self.rule_set = frozenset(rules.rules)
        self._model_rules = rules.model_rules
        # the family rules on the MoE software state (rules/moe_state.py) apart: the others give
        # one verdict for every state of a family (``family_passes``)
        self._state_rules = tuple(r for r in rules.family_rules if _is_state_rule(r))
        self._family_rules = tuple(r for r in rules.family_rules if not _is_state_rule(r))
        self._mode_rules = tuple(r for r in rules.rules if _is_state_rule(r))
        # the layout rules are independent checks of the ZeRO stage and rank order: those that do
        # not read the order (ZERO_RULES) once per family with its ZeRO stage, the others asked in
        # the order of the last refusal first (``_refusal``), which gives the same verdicts sooner
        layout_rules = [r for r in rules.layout_rules if r not in rules.model_rules]
        self._zero_rules = tuple(r for r in layout_rules if r in rules.zero_rules)
        self._layout_rules = [r for r in layout_rules if r not in rules.zero_rules]
        self._ctx = ctx
        self._num_layers = ctx.spec.num_layers
        self._layers = layers
        self._recompute = recompute
        self._split = rules.search.stage_split
        self._families: dict[tuple[object, ...], bool] = {}
        self._verdicts: dict[Layout, bool] = {}
        # LAYOUT_RULES verdicts (the refusing rule or None) by (rules_base, rank order)
        self._layout_verdicts: dict[tuple[int, Order], str | None] = {}
        self._zero_verdicts: dict[int, str | None] = {}  # ZERO_RULES verdicts by rules_base
        self._rules_bases: dict[tuple[object, ...], int] = {}
        self._splits: dict[tuple[int, int], tuple[int, ...] | None] = {}
        self.refused: Counter[str] = Counter()
        self._mode_limits: dict[tuple[object, ...], SearchLimits] = {}  # limits_for by _state_key
        self._state_refusals: dict[tuple[object, ...], str | None] = {}  # state rules by _state_key

    def model_refusal(self) -> str | None:
        """The rule about the model or job alone (MODEL_RULES) that refuses, if any: then no
        layout can pass, and the per-layout check leaves those rules out."""
        plan = Plan(
            dp=1, tp=1, pp=1, micro_batch=1, recompute=(Recompute.NONE,), layers_per_stage=(self._num_layers,)
        )
        with verdict_only():
            refusal = first_refusal(self._ctx, Draft(plan, self._ctx.precision), self._model_rules)
        return None if refusal is None else refusal.rule

    def _representative(self, layout: Layout, plans: dict[object, Plan] | None = None) -> Plan | None:
        """The layout with the fixed split (else the framework's own, else an even one) and its
        fixed recompute mode (else none). ``plans``: representatives of this layout already
        built, by split (frameworks with the same split share one)."""
        pp = layout.pp
        split = self._representative_split(layout)
        if split is None:
            return None
        plan = plans.get(split) if plans is not None else None
        if plan is None:
            modes = self._recompute or (Recompute.NONE,)
            plan = layout.plan(split, modes if len(modes) == pp else (modes[0],) * pp)
            if plans is not None:
                plans[split] = plan
        return plan

    def _representative_split(self, layout: Layout) -> tuple[int, ...] | None:
        """The representative's split (``_representative``), None when there is none."""
        pp = layout.pp
        if (pp, layout.vp) not in self._splits:  # one per (pp, vp): the filter sees many layouts
            if self._layers and len(self._layers) == pp:
                chosen: tuple[int, ...] | None = self._layers
            elif self._split is not None:
                chosen = self._split(self._num_layers, pp, layout.vp)
            else:
                chosen = even_layers(self._num_layers, pp, layout.vp)
            self._splits[pp, layout.vp] = chosen
        return self._splits[pp, layout.vp]

    def _passes(self, layout: Layout, rules: Sequence[Rule], plans: dict[object, Plan] | None = None) -> bool:
        """``rules`` accept ``layout``'s representative (a refusal is counted)."""
        refusal = self._refusal(layout, rules, plans)
        if refusal:
            self.refused[refusal] += 1
        return refusal is None

    def _refusal(
        self, layout: Layout, rules: Sequence[Rule], plans: dict[object, Plan] | None = None
    ) -> str | None:
        """The first of ``rules`` refusing ``layout``'s representative (no representative: "")."""
        representative = self._representative(layout, plans)
        if representative is None:
            return ""
        draft = Draft(representative, self._ctx.precision)
        if building_fixes():  # the filter reads the verdict, not the repairs
            with verdict_only():
                return self._refusal(layout, rules, plans)
        for i, rule in enumerate(rules):
            refusal = rule(self._ctx, draft)
            if refusal is not None:
                if i and rules is self._layout_rules:  # ask the refusing rule first next time
                    self._layout_rules.insert(0, self._layout_rules.pop(i))
                return refusal.rule
        return None

    def rules_base(self, layout: Layout) -> int:
        """An id of ``layout`` less LAYOUT_RULES_IGNORE and its rank order: with the order, the
        key its LAYOUT_RULES verdict is remembered by (the same for every layout of a family
        but for the order, so a caller asking about many orders finds it once)."""
        return self._rules_bases.setdefault(plan_key(layout, _RULES_BASE_IGNORE), len(self._rules_bases))

    def has_split(self, layout: Layout) -> bool:
        """``layout`` has a representative split (which reads its pp and vp only)."""
        return self._representative_split(layout) is not None

    def layout_passes(self, asked: Asked, base: int) -> bool:
        """The LAYOUT_RULES accept the ``asked`` layout (its representative); their verdict is
        remembered per layout less LAYOUT_RULES_IGNORE (``base``: ``rules_base`` of the layout),
        each refusal counted as if asked."""
        return self.has_split(asked.family) and self.layout_verdict(asked, base)

    def layout_verdict(self, asked: Asked, base: int) -> bool:
        """``layout_passes`` of a layout that has a representative split, for a caller that
        keeps one memo per family and has asked ``family_passes`` (``AnyFramework``)."""
        refusal = self.zero_refusal(asked.family, base, asked.family_plans)
        key = (base, asked.order)
        if refusal is None and key in self._layout_verdicts:
            refusal = self._layout_verdicts[key]
        elif refusal is None:
            refusal = self._refusal(asked.layout, self._layout_rules, asked.plans)
            self._layout_verdicts[key] = refusal
        if refusal:
            self.refused[refusal] += 1
        return refusal is None

    def zero_refusal(self, family: Layout, base: int, plans: dict[object, Plan] | None = None) -> str | None:
        """The ZERO_RULES refusal of ``family`` (with its ZeRO stage; it has a representative
        split), if any: the same for every rank order and slice shape, remembered per ``base``
        (``rules_base``); ``plans``: the family's representatives by split."""
        if base not in self._zero_verdicts:
            found = self._refusal(family, self._zero_rules, plans) if self._zero_rules else None
            self._zero_verdicts[base] = found
        return self._zero_verdicts[base]

    def zero_passes(
        self, family: Layout, key: tuple[object, ...] | None = None, plans: dict[object, Plan] | None = None
    ) -> bool:
        """Whether ``family`` with its ZeRO stage may have a layout that passes: its family rules
        and ZERO_RULES accept it and it has a representative split; False means every rank order
        and slice shape of it fails (a ZERO_RULES refusal is counted). The ZERO_RULES are asked
        first: remembered per family less what they do not read, they spare most families' family
        rules. ``key`` and ``plans`` as in ``family_passes`` (``plans``: representatives with this
        ZeRO stage)."""
        if not self.has_split(family):
            return False
        refusal = self.zero_refusal(family, self.rules_base(family), plans)
        if refusal:
            self.refused[refusal] += 1
            return False
        return self.family_passes(family, key, plans)

    def family_passes(
        self, family: Layout, key: tuple[object, ...] | None = None, plans: dict[object, Plan] | None = None
    ) -> bool:
        """Whether the family rules accept ``family`` (any ZeRO stage and rank order: those
        rules do not read them); False means every layout of the family fails. ``key``: the
        family's ``plan_key`` over all but LAYOUT_FIELDS, when the caller has it; ``plans``:
        the family's representatives built so far, by split (frameworks share them)."""
        if key is None:
            key = plan_key(family, LAYOUT_FIELDS)
        verdict = self._families.get(key)
        if verdict is None:
            stateless = plan_key(family, STATELESS_FIELDS)
            plain = self._families.get(stateless)
            if plain is None:
                plain = self._families[stateless] = self._passes(family, self._family_rules, plans)
            verdict = self._families[key] = plain and self._state_passes(family, plans)
        return verdict

    def _state_passes(self, family: Layout, plans: dict[object, Plan] | None = None) -> bool:
        """The state rules accept ``family``'s representative: their verdict remembered by what
        they read (``_state_key``), a refusal counted each time a family is asked (as if they
        ran: the counts, and so ``reason``, are those of asking every family)."""
        key = _state_key(family)
        if key in self._state_refusals:
            refusal = self._state_refusals[key]
        else:
            refusal = self._state_refusals[key] = self._refusal(family, self._state_rules, plans)
        if refusal:
            self.refused[refusal] += 1
        return refusal is None

    def __call__(self, layout: Layout) -> bool:
        verdict = self._verdicts.get(layout)
        if verdict is None:
            asked = Asked(layout, layout.order, layout)
            verdict = self.family_passes(layout) and self.layout_passes(asked, self.rules_base(layout))
            self._verdicts[layout] = verdict
        return verdict

    def limits_for(self, layout: Layout, plans: dict[object, Plan] | None = None) -> SearchLimits:
        """``limits`` for ``layout`` (which the filter passes), less the recompute modes the rules
        refuse on it: the representative is checked with each mode where the layout's MoE
        software state is one whose rules read the recompute mode (the EP overlap and CUDA
        graphs: megatron-core refuses full recompute under both, rules/moe_state.py); a
        scenario's fixed mode is the representative's already."""
        if self._modes_free(layout):
            return self.limits
        key = _state_key(layout)  # what the state rules read (with the mode, which varies here)
        found = self._mode_limits.get(key)
        if found is None:
            modes = self.limits.recompute_modes or tuple(Recompute)
            kept = tuple(m for m in modes if m is Recompute.NONE or self._passes_mode(layout, m, plans))
            found = self.limits if kept == modes else replace(self.limits, recompute_modes=kept)
            self._mode_limits[key] = found
        return found

    def _modes_free(self, family: Layout) -> bool:
        """No rule's verdict on ``family``'s layouts depends on the recompute mode (``limits_for``
        is ``limits``): the scenario fixes the mode, or the MoE software state is one whose rules
        do not read it (reads the family's fields only)."""
        return self._recompute is not None or not (
            family.moe_overlap or family.cuda_graphs is not CudaGraphs.NONE
        )

    def limits_of(self, asked: Asked) -> SearchLimits:
        """``limits_for`` the ``asked`` layout (built only when its state's rules read the mode)."""
        return self.limits if self._modes_free(asked.family) else self.limits_for(asked.layout, asked.plans)

    def state_holds(self, a: Layout, b: Layout) -> bool:
        """Where this framework runs family ``b``, it runs family ``a`` (the same but its MoE
        software state) too, under per-stage limits that hold ``b``'s (the state rules are
        family rules: solver/states.py)."""
        if not self.family_passes(b):
            return True
        if not self.family_passes(a):
            return False
        return holds(self.limits_for(a), self.limits_for(b))

    def _passes_mode(self, layout: Layout, mode: Recompute, plans: dict[object, Plan] | None) -> bool:
        """Every rule accepts ``layout``'s representative run under ``mode`` on every stage."""
        representative = self._representative(layout, plans)
        if representative is None:
            return False
        draft = Draft(representative.with_recompute(mode), self._ctx.precision)
        with verdict_only():  # the state rules (the others were asked of the representative)
            return first_refusal(self._ctx, draft, self._mode_rules) is None

    def reason(self) -> str:
        """Why nothing passed: the rules that refused, most frequent first."""
        if not self.refused:
            return f"{self.name} can run none of the layouts"
        rules = [rule for rule, _ in self.refused.most_common(2)]
        return f"{self.name} refused every layout, e.g.: " + "; ".join(rules)


class AnyFramework:
    """The union of ``filters``: a layout passes when some framework accepts it, and its
    per-stage choices are those of the frameworks that do (``limits``: the distinct SearchLimits
    of the accepting frameworks, less those another accepting one holds); the solver searches
    each layout under each, so the search is exact over the union of the frameworks' own
    searches. The frameworks are asked in groups of equal limits (so equal representatives), the
    widest first; a group another accepting group holds is not asked (it would add nothing), nor
    a framework whose rules include a refusing one's of its group (NeMo's include Megatron's): on
    most layouts one framework's rules decide. ``uneven``: the search allows uneven stages (``holds``)."""

    def __init__(self, filters: list[FrameworkFilter], uneven: bool = True) -> None:
        self.filters = filters
        self.name = " or ".join(f.name for f in filters)
        groups: dict[SearchLimits, list[FrameworkFilter]] = {}
        for f in filters:
            groups.setdefault(f.limits, []).append(f)
        limits = list(groups)
        # the widest first: a group is asked after every group that holds it
        width = {lim: sum(holds(lim, other, uneven) for other in limits) for lim in limits}
        self._groups = [(lim, groups[lim]) for lim in sorted(limits, key=lambda lim: -width[lim])]
        self._held_by = {lim: [w for w in limits if w != lim and holds(w, lim, uneven)] for lim in limits}
        self._limits: dict[tuple[int, Order], tuple[SearchLimits, ...]] = {}  # by (family id, order)
        self._family_ids: dict[tuple[object, ...], int] = {}  # a layout less its order -> an id
        self._zeros: dict[tuple[object, ...], bool] = {}  # zero_passes by family (less its order)
        self._families: dict[tuple[object, ...], bool] = {}  # family_passes by family

    @property
    def refused(self) -> Counter[str]:
        """Each framework's refusals, named ``framework: rule``."""
        total: Counter[str] = Counter()
        for f in self.filters:
            total.update({f"{f.name}: {rule}": n for rule, n in f.refused.items()})
        return total

    def limits(self, layout: Layout) -> tuple[SearchLimits, ...]:
        """The per-stage limits of the frameworks that accept ``layout``, less those held by
        another accepting group's (() : none accepts)."""
        return self.order_limits(layout, layout)(layout.order)

    def order_limits(
        self, family: Layout, layout: Layout | None = None
    ) -> Callable[[Order], tuple[SearchLimits, ...]]:
        """``limits`` of ``family``'s layouts by rank order (``limits(replace(family,
        order=o))`` for order ``o``), for a caller that asks about many orders of one family
        (solver/placement.py): the family's keys and each framework's family verdict are found
        once, and a layout is built only where a rule must run. ``layout``: the family's own
        layout, when the caller has it. Each layout is asked once (remembered by the family's
        id and the order), so every framework's refusals count as before."""
        fid = self._family_ids.setdefault(plan_key(family, _ORDER), len(self._family_ids))
        known: dict[int, int] = {}  # framework -> rules_base (-1: its family rules refuse)
        family_key: list[tuple[object, ...]] = []
        plans: dict[object, Plan] = {}  # the family's representatives, by split
        memo = self._limits

        def limits(order: Order) -> tuple[SearchLimits, ...]:
            found = memo.get((fid, order))
            if found is None:
                own = layout if layout is not None and layout.order == order else None
                asked = Asked(family, order, own, plans)
                if not family_key:
                    family_key.append(plan_key(family, LAYOUT_FIELDS))
                found = memo[fid, order] = self._accepted(asked, family_key[0], known, plans)
            return found

        return limits

    def _accepted(
        self, asked: Asked, key: tuple[object, ...], known: dict[int, int], plans: dict[object, Plan]
    ) -> tuple[SearchLimits, ...]:
        """``limits`` of a layout not asked before. ``key``: its family's key over all but
        LAYOUT_FIELDS; ``known``: each framework's ``rules_base`` for the family, -1 where its
        family rules refuse it or it has no representative split, filled as they are found (a
        rule that runs runs ``verdict_only``: FrameworkFilter._refusal); ``plans``: the family's
        representatives (those of the family rules)."""
        accepted: list[SearchLimits] = []
        for lim, group in self._groups:
            if accepted and any(w in accepted for w in self._held_by[lim]):
                continue
            refused: list[frozenset[Rule]] = []  # a framework with these rules and more refuses too
            for f in group:
                if refused and any(r <= f.rule_set for r in refused):
                    continue
                base = known.get(id(f))
                if base is None:
                    family = asked.family
                    passes = f.family_passes(family, key, plans) and f.has_split(family)
                    base = known[id(f)] = f.rules_base(family) if passes else -1
                if base >= 0 and f.layout_verdict(asked, base):
                    accepted.append(f.limits_of(asked))
                    break
                refused.append(f.rule_set)
        return tuple(accepted)

    def __call__(self, layout: Layout) -> bool:
        return bool(self.limits(layout))

    def state_holds(self, a: Layout, b: Layout) -> bool:
        """Every framework that runs family ``b`` runs ``a`` under limits that hold ``b``'s
        (FrameworkFilter.state_holds)."""
        return all(f.state_holds(a, b) for f in self.filters)

    def family_passes(self, family: Layout) -> bool:
        """Whether some framework's family rules accept ``family`` (FrameworkFilter.family_passes),
        remembered by family (each framework remembers its own, so asking again counts no refusal)."""
        key = plan_key(family, LAYOUT_FIELDS)
        found = self._families.get(key)
        if found is None:
            plans = dict[object, Plan]()
            found = self._families[key] = any(f.family_passes(family, key, plans) for f in self.filters)
        return found

    def zero_passes(self, family: Layout) -> bool:
        """Whether some framework may run a layout of ``family`` with its ZeRO stage
        (FrameworkFilter.zero_passes; the solver's ``Options.zero_filter``), remembered per family
        less its order; asked as ``limits`` asks: a framework whose rules include a refusing one's
        of its group is not asked."""
        fid = plan_key(family, _ORDER)
        found = self._zeros.get(fid)
        if found is None:
            found = self._zeros[fid] = self._zero_passes(family)
        return found

    def _zero_passes(self, family: Layout) -> bool:
        key, plans = plan_key(family, LAYOUT_FIELDS), dict[object, Plan]()
        for _, group in self._groups:
            refused: list[frozenset[Rule]] = []
            for f in group:
                if refused and any(r <= f.rule_set for r in refused):
                    continue
                if f.zero_passes(family, key, plans):
                    return True
                refused.append(f.rule_set)
        return False

    def reason(self) -> str:
        """Why nothing passed: each framework's most frequent refusal (one whose rules include
        another's of its group, never asked, says so)."""
        out = []
        for f in self.filters:
            base = next(
                (g for g in self.filters if g is not f and g.limits == f.limits and g.rule_set <= f.rule_set),
                None,
            )
            if not f.refused and base is not None:
                out.append(f"{f.name} refused what {base.name} refused (its rules include {base.name}'s)")
            else:
                out.append(f.reason())
        return "; ".join(out)
