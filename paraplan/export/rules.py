"""Framework rules and repairs: a rule refuses a draft plan with the values and the rule it
breaks, and the repairs that would make it expressible; ``enforce`` turns the first refusal into
an ExportError naming the nearest plan the framework can run and its modelled step time.
``SearchLimits`` and ``target_rules`` are what ``solver.target`` takes from an exporter."""
from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from paraplan.cost import Axis, Plan, Precision, Recompute
from paraplan.errors import ExportError
from paraplan.export.context import ExportContext, plan_summary, uniform_recompute
from paraplan.export.registry import EXPORTERS, lookup
from paraplan.result import Result

MAX_REPAIR_DEPTH = 3  # rule repairs chained when searching the nearest expressible plan

__all__ = ["SearchLimits", "TargetRules", "target_rules", "Draft", "Fix", "Refusal", "Rule", "repair",
           "order_fixes", "recompute_fixes", "micro_batch_repairs", "check_dense_model",
           "check_no_expert_parallel", "check_expert_tp_is_tp", "uniform_recompute_rule",
           "first_refusal", "enforce"]


@dataclass(frozen=True, slots=True)
class SearchLimits:
    """What solver.target needs beyond a target's RULES, which are checked on each layout with
    an even split and one recompute mode: how the per-stage choices the CP-SAT model makes may
    vary. ``even_stages``: every stage holds the same number of layers; ``recompute_modes``: the
    modes the framework has (None: all); ``stage_split(layers, pp, vp)``: the one split the
    framework builds itself (None: it cannot), when it takes no layer counts."""

    uniform_recompute: bool = True
    even_stages: bool = False
    recompute_modes: tuple[Recompute, ...] | None = None
    stage_split: Callable[[int, int, int], tuple[int, ...] | None] | None = None


class TargetRules(NamedTuple):
    """What solver.target takes from an exporter module: ``RULES``, ``SEARCH`` and
    ``MODEL_RULES`` (those of RULES that read only the model and job, so one check decides)."""

    rules: tuple[Rule, ...]
    search: SearchLimits
    model_rules: tuple[Rule, ...]


def target_rules(name: str) -> TargetRules:
    """The rules and search limits of target ``name``; ExportError if unknown."""
    _, target = lookup(name)
    module = importlib.import_module(target.module)
    return TargetRules(tuple(module.RULES), module.SEARCH, tuple(module.MODEL_RULES))



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


Rule = Callable[[ExportContext, Draft], Refusal | None]
"""A framework rule: None when the draft passes, else the Refusal naming values and rule."""


def repair(change: str, draft: Draft, plan: Plan | None) -> tuple[Fix, ...]:
    """A one-element fix tuple when ``plan`` exists (helpers return None for impossible ones).
    A chunk layout the change no longer fits (other pp, vp or split) falls back to the default
    one of the new split (cost.plan.default_chunks)."""
    if plan is None:
        return ()
    rows = plan.layers_per_chunk
    if rows and (len(rows) != plan.pp or any(len(r) != plan.vp for r in rows)
                 or tuple(sum(r) for r in rows) != tuple(plan.layers_per_stage)):
        plan = replace(plan, layers_per_chunk=())
    return (Fix(change, replace(draft, plan=plan)),)


def order_fixes(draft: Draft, orders: Iterable[tuple[str, Sequence[Axis]]]) -> tuple[Fix, ...]:
    """Repairs that move the plan onto each of a framework's supported rank orders."""
    fixes: list[Fix] = []
    for name, order in orders:
        full = tuple(order) + tuple(a for a in draft.plan.order if a not in order)
        fixes += repair(f"order -> {name}", draft, replace(draft.plan, order=full))
    return tuple(fixes)


def recompute_fixes(draft: Draft, modes: Iterable[Recompute] | None = None) -> tuple[Fix, ...]:
    """Repairs that use one recompute mode on every stage (default: each mode the plan uses)."""
    plan = draft.plan
    chosen = list(dict.fromkeys(modes if modes is not None else plan.recompute))
    return tuple(
        Fix(f"recompute -> {mode.value} on every stage",
            replace(draft, plan=replace(plan, recompute=(mode,) * plan.pp)))
        for mode in chosen
    )


def micro_batch_repairs(draft: Draft, global_batch: int,
                        also: Callable[[int], bool] = lambda n: True) -> tuple[Fix, ...]:
    """The largest smaller micro-batch that divides global_batch / dp (and passes ``also``,
    given the resulting micro-batch count)."""
    p = draft.plan
    for mb in range(p.micro_batch - 1, 0, -1):
        if global_batch % (mb * p.dp) == 0 and also(global_batch // (mb * p.dp)):
            return repair(f"micro_batch -> {mb}", draft, replace(p, micro_batch=mb))
    return ()


def check_dense_model(ctx: ExportContext, draft: Draft) -> Refusal | None:
    """Expert parallelism needs experts, and num_experts % ep == 0."""
    p, s = draft.plan, ctx.spec
    if p.ep == 1 or (s.is_moe and s.num_experts % p.ep == 0):
        return None
    what = f"{s.name} is dense" if not s.is_moe else f"{s.name} has {s.num_experts} experts"
    return Refusal(f"plan.ep={p.ep} needs a mixture-of-experts model (num_experts % ep == 0) but "
                   f"{what}", repair("ep -> 1", draft, replace(p, ep=1)))


def check_no_expert_parallel(framework_note: str) -> Rule:
    """A rule refusing ep > 1 for targets whose config cannot express expert parallelism."""

    def check_expert_parallel_expressible(ctx: ExportContext, draft: Draft) -> Refusal | None:
        if draft.plan.ep == 1:
            return None
        return Refusal(f"plan.ep={draft.plan.ep}: {framework_note}",
                       repair("ep -> 1", draft, replace(draft.plan, ep=1)))

    return check_expert_parallel_expressible


def check_expert_tp_is_tp(framework_note: str) -> Rule:
    """A rule refusing etp != tp for targets with no separate expert tensor-parallel degree."""

    def check_expert_tp(ctx: ExportContext, draft: Draft) -> Refusal | None:
        p = draft.plan
        if p.expert_tp == p.tp:
            return None
        return Refusal(f"plan.etp={p.etp} with tp={p.tp}: {framework_note}",
                       repair(f"etp -> {p.tp}", draft, replace(p, etp=p.tp)))

    return check_expert_tp


def uniform_recompute_rule(framework_note: str) -> Rule:
    """A rule refusing per-stage recompute for targets whose recompute setting covers every
    stage alike (``framework_note`` says which setting)."""

    def check_recompute_uniform(ctx: ExportContext, draft: Draft) -> Refusal | None:
        if uniform_recompute(draft.plan) is not None:
            return None
        modes = [r.value for r in draft.plan.recompute]
        return Refusal(f"recompute differs per stage ({modes}); {framework_note}",
                       recompute_fixes(draft))

    return check_recompute_uniform


def first_refusal(ctx: ExportContext, draft: Draft, rules: Sequence[Rule]) -> Refusal | None:
    """The first rule that refuses ``draft``, or None when all pass."""
    for rule in rules:
        refusal = rule(ctx, draft)
        if refusal is not None:
            return refusal
    return None


class _Candidate(NamedTuple):
    changes: tuple[str, ...]
    draft: Draft
    result: Result


def _expressible(ctx: ExportContext, refusal: Refusal, rules: Sequence[Rule]) -> list[_Candidate]:
    """Drafts the target can express, reached by chaining at most MAX_REPAIR_DEPTH repairs."""
    frontier = [((f.change,), f.draft) for f in refusal.fixes]
    seen: set[Draft] = set()
    for _ in range(MAX_REPAIR_DEPTH):
        found: list[_Candidate] = []
        following: list[tuple[tuple[str, ...], Draft]] = []
        for changes, draft in frontier:
            if draft in seen:
                continue
            seen.add(draft)
            scored = ctx.score(draft)
            if scored is None:
                continue
            again = first_refusal(ctx, draft, rules)
            if again is None:
                found.append(_Candidate(changes, draft, scored))
            else:
                following += [(changes + (f.change,), f.draft) for f in again.fixes]
        if found:
            return found + _memory_rescue(ctx, found, rules)
        frontier = following
    return []


def _memory_rescue(ctx: ExportContext, found: list[_Candidate],
                   rules: Sequence[Rule]) -> list[_Candidate]:
    """When no candidate fits memory, the same candidates with full recompute on every stage."""
    if any(c.result.predicted.fits_memory for c in found):
        return []
    rescued = []
    for c in found:
        plan = c.draft.plan
        if set(plan.recompute) == {Recompute.FULL}:
            continue
        draft = replace(c.draft, plan=replace(plan, recompute=(Recompute.FULL,) * plan.pp))
        scored = ctx.score(draft)
        if scored is not None and first_refusal(ctx, draft, rules) is None:
            rescued.append(_Candidate(c.changes + ("recompute -> full to fit memory",), draft,
                                      scored))
    return rescued


def _nearest_text(ctx: ExportContext, framework: str, candidates: list[_Candidate]) -> str:
    if not candidates:
        return (f"no plan within {MAX_REPAIR_DEPTH} changes of this one is both valid and "
                f"expressible in {framework}; re-plan with that rule in mind or choose another "
                f"target ({', '.join(n for n in EXPORTERS if n != 'trace')})")
    best = min(candidates, key=lambda c: (not c.result.predicted.fits_memory, len(c.changes),
                                          c.result.predicted.step_time_s))
    new_s = best.result.predicted.step_time_s
    delta = (new_s / ctx.step_time_s - 1) * 100
    fits = "" if best.result.predicted.fits_memory else "; it does NOT fit in memory"
    precision = (f" precision={best.draft.precision.value}"
                 if best.draft.precision != ctx.precision else "")
    return (f"nearest plan {framework} can express: {plan_summary(best.draft.plan)}{precision} "
            f"({'; '.join(best.changes)}): modelled step time {new_s:.4g} s vs "
            f"{ctx.step_time_s:.4g} s for the original ({delta:+.1f}%){fits}")


def enforce(ctx: ExportContext, framework: str, rules: Sequence[Rule]) -> None:
    """Raise ExportError if any rule refuses the context's plan, naming the nearest valid plan."""
    draft = Draft(ctx.plan, ctx.precision)
    refusal = first_refusal(ctx, draft, rules)
    if refusal is None:
        return
    nearest = _nearest_text(ctx, framework, _expressible(ctx, refusal, rules))
    raise ExportError(f"{framework} cannot express this plan: {refusal.rule}. {nearest}.")
