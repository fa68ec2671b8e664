"""What every framework rule works on: the model, job and cluster a plan is checked against
(``RuleContext``), the draft plan, and what a rule answers (``Refusal`` with its ``Fix``es).

A rule is a pure function of (context, draft): it never scores or renders a plan. Scoring the
repairs (the nearest plan a framework can express) is the front door's job
(paraplan/export/rules.py ``enforce``); the solver's layout filter (rules/filter.py) only asks
whether a rule refuses."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import NamedTuple

from paraplan.cost import Axis, Job, Plan, Precision, Recompute
from paraplan.graph import ModelSpec
from paraplan.hardware import Cluster

__all__ = [
    "RuleContext",
    "Draft",
    "Fix",
    "Refusal",
    "Rule",
    "SearchLimits",
    "TargetRules",
    "repair",
    "order_fixes",
    "recompute_fixes",
    "micro_batch_repairs",
    "first_refusal",
    "verdict_only",
    "building_fixes",
    "holds",
]

_VERDICT_ONLY: ContextVar[bool] = ContextVar("verdict_only", default=False)


@contextmanager
def verdict_only() -> Iterator[None]:
    """Within: the repair helpers below build no fixes (a refusal carries none). For callers
    that only ask whether a rule refuses (the solver's layout filter, rules/filter.py); no
    rule's verdict reads its fixes, so the verdicts are the same."""
    token = _VERDICT_ONLY.set(True)
    try:
        yield
    finally:
        _VERDICT_ONLY.reset(token)


def building_fixes() -> bool:
    """False within ``verdict_only``: a helper that only builds repairs may return none."""
    return not _VERDICT_ONLY.get()


@dataclass(frozen=True, slots=True)
class RuleContext:
    """What a framework rule may read: the model, the training job and the cluster, and the
    model preset the scenario names (None for an explicit or Hugging Face model)."""

    spec: ModelSpec
    job: Job
    cluster: Cluster
    model_preset: str | None = None

    @property
    def precision(self) -> Precision:
        """The job's precision."""
        return self.job.precision


@dataclass(frozen=True, slots=True)
class Draft:
    """A plan under consideration, with the job precision it would run at."""

    plan: Plan
    precision: Precision


@dataclass(frozen=True, slots=True)
class Fix:
    """One way to repair a refused plan: what changes, and the resulting draft."""

    change: str
    draft: Draft


@dataclass(frozen=True, slots=True)
class Refusal:
    """A rule the target's framework would break: the rule with its values, and repairs."""

    rule: str
    fixes: tuple[Fix, ...] = ()


Rule = Callable[[RuleContext, Draft], Refusal | None]
"""A framework rule: None when the draft passes, else the Refusal naming values and rule."""


@dataclass(frozen=True, slots=True)
class SearchLimits:
    """What solver.target needs beyond a target's RULES, which are checked on each layout with
    an even split and one recompute mode: how the per-stage choices the CP-SAT model makes may
    vary. ``even_stages``: every stage holds the same number of layers; ``recompute_modes``: the
    modes the framework has (None: all); ``stage_split(layers, pp, vp)``: the one split the
    framework builds itself (None: it cannot), when it takes no layer counts;
    ``partial_recompute``: full recompute of N layers per chunk (Plan.recompute_layers)."""

    uniform_recompute: bool = True
    even_stages: bool = False
    recompute_modes: tuple[Recompute, ...] | None = None
    stage_split: Callable[[int, int, int], tuple[int, ...] | None] | None = None
    partial_recompute: bool = False  # the framework recomputes a number of layers per stage


class TargetRules(NamedTuple):
    """A framework's ``RULES``, ``SEARCH``, ``MODEL_RULES`` (those of RULES that read only
    the model and job, so one check decides), ``LAYOUT_RULES`` (those that read the ZeRO
    stage or the rank order; the rest give one verdict per layout family) and ``ZERO_RULES``
    (those of LAYOUT_RULES that read neither the rank order nor the slice shape: one verdict per
    family with its ZeRO stage)."""

    rules: tuple[Rule, ...]
    search: SearchLimits
    model_rules: tuple[Rule, ...]
    layout_rules: tuple[Rule, ...] = ()
    zero_rules: tuple[Rule, ...] = ()

    @property
    def family_rules(self) -> tuple[Rule, ...]:
        """The RULES that are neither model nor layout rules: one verdict per layout family
        (degrees, ep, micro-batch, vp, SP, K/V exchange), whatever its ZeRO stage and rank order."""
        return tuple(r for r in self.rules if r not in self.model_rules and r not in self.layout_rules)


def repair(change: str, draft: Draft, plan: Plan | None) -> tuple[Fix, ...]:
    """A one-element fix tuple when ``plan`` exists (helpers return None for impossible ones).
    A chunk layout the change no longer fits (other pp, vp or split) falls back to the default
    one of the new split (cost.plan.default_chunks)."""
    if plan is None or _VERDICT_ONLY.get():
        return ()
    rows = plan.layers_per_chunk
    if rows and (
        len(rows) != plan.pp
        or any(len(r) != plan.vp for r in rows)
        or tuple(sum(r) for r in rows) != tuple(plan.layers_per_stage)
    ):
        plan = replace(plan, layers_per_chunk=())
    return (Fix(change, replace(draft, plan=plan)),)


def order_fixes(draft: Draft, orders: Iterable[tuple[str, Sequence[Axis]]]) -> tuple[Fix, ...]:
    """Repairs that move the plan onto each of a framework's supported rank orders."""
    if _VERDICT_ONLY.get():
        return ()
    fixes: list[Fix] = []
    for name, order in orders:
        full = tuple(order) + tuple(a for a in draft.plan.order if a not in order)
        fixes += repair(f"order -> {name}", draft, replace(draft.plan, order=full))
    return tuple(fixes)


def recompute_fixes(draft: Draft, modes: Iterable[Recompute] | None = None) -> tuple[Fix, ...]:
    """Repairs that use one recompute mode on every stage (default: each mode the plan uses)."""
    if _VERDICT_ONLY.get():
        return ()
    plan = draft.plan
    chosen = list(dict.fromkeys(modes if modes is not None else plan.recompute))
    return tuple(
        Fix(
            f"recompute -> {mode.value} on every stage",
            replace(draft, plan=plan.with_recompute(mode)),
        )
        for mode in chosen
    )


def micro_batch_repairs(
    draft: Draft, global_batch: int, also: Callable[[int], bool] = lambda n: True
) -> tuple[Fix, ...]:
    """The largest smaller micro-batch that divides global_batch / dp (and passes ``also``,
    given the resulting micro-batch count)."""
    if _VERDICT_ONLY.get():
        return ()
    p = draft.plan
    for mb in range(p.micro_batch - 1, 0, -1):
        if global_batch % (mb * p.dp) == 0 and also(global_batch // (mb * p.dp)):
            return repair(f"micro_batch -> {mb}", draft, replace(p, micro_batch=mb))
    return ()


def first_refusal(ctx: RuleContext, draft: Draft, rules: Sequence[Rule]) -> Refusal | None:
    """The first rule that refuses ``draft``, or None when all pass."""
    for rule in rules:
        refusal = rule(ctx, draft)
        if refusal is not None:
            return refusal
    return None


def holds(wide: SearchLimits, narrow: SearchLimits, uneven: bool = True) -> bool:
    """Every per-stage choice ``narrow`` allows, ``wide`` allows too, on any layout of a search
    that allows uneven stages (``uneven``) or not: a free split (no framework split, uneven
    stages where the search allows them) holds every split but, in an even-only search, a
    framework's own split; else the same split rule; one recompute mode for every stage only if
    ``narrow`` has it too; at least ``narrow``'s modes; partial recompute if ``narrow`` has it."""
    free = wide.stage_split is None and not wide.even_stages
    split_held = (free and (uneven or narrow.stage_split is None)) or (
        wide.stage_split,
        wide.even_stages,
    ) == (narrow.stage_split, narrow.even_stages)
    wide_modes, narrow_modes = wide.recompute_modes, narrow.recompute_modes
    return (
        split_held
        and (narrow.uniform_recompute or not wide.uniform_recompute)
        and (wide_modes is None or (narrow_modes is not None and set(narrow_modes) <= set(wide_modes)))
        and (wide.partial_recompute or not narrow.partial_recompute)
    )
