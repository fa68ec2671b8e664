"""The nearest plan a framework can express: ``enforce`` turns the first refusal of a
framework's rules (paraplan.rules) into an ExportError naming the nearest plan the framework can
run and its modelled step time. Scoring the repairs needs the Result and the cost model, so this
half of the rules lives in the front door."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import NamedTuple

from paraplan.cost import Recompute
from paraplan.errors import ExportError
from paraplan.export.context import ExportContext, plan_summary
from paraplan.export.registry import EXPORTERS, TRACE
from paraplan.result import Result
from paraplan.rules import Draft, Refusal, Rule, first_refusal

MAX_REPAIR_DEPTH = 3  # rule repairs chained when searching the nearest expressible plan

__all__ = ["enforce", "MAX_REPAIR_DEPTH"]


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
            again = first_refusal(ctx.rule_context, draft, rules)
            if again is None:
                found.append(_Candidate(changes, draft, scored))
            else:
                following += [(changes + (f.change,), f.draft) for f in again.fixes]
        if found:
            return found + _memory_rescue(ctx, found, rules)
        frontier = following
    return []


def _memory_rescue(ctx: ExportContext, found: list[_Candidate], rules: Sequence[Rule]) -> list[_Candidate]:
    """When no candidate fits memory, the same candidates with full recompute on every stage."""
    if any(c.result.predicted.fits_memory for c in found):
        return []
    rescued = []
    for c in found:
        plan = c.draft.plan
        if set(plan.recompute) == {Recompute.FULL}:
            continue
        draft = replace(c.draft, plan=plan.with_recompute(Recompute.FULL))
        scored = ctx.score(draft)
        if scored is not None and first_refusal(ctx.rule_context, draft, rules) is None:
            rescued.append(_Candidate(c.changes + ("recompute -> full to fit memory",), draft, scored))
    return rescued


def _nearest_text(ctx: ExportContext, framework: str, candidates: list[_Candidate]) -> str:
    if not candidates:
        return (
            f"no plan within {MAX_REPAIR_DEPTH} changes of this one is both valid and "
            f"expressible in {framework}; re-plan with that rule in mind or choose another "
            f"target ({', '.join(n for n in EXPORTERS if n != TRACE)})"
        )
    best = min(
        candidates,
        key=lambda c: (not c.result.predicted.fits_memory, len(c.changes), c.result.predicted.step_time_s),
    )
    new_s = best.result.predicted.step_time_s
    delta = (new_s / ctx.step_time_s - 1) * 100
    fits = "" if best.result.predicted.fits_memory else "; it does NOT fit in memory"
    precision = f" precision={best.draft.precision.value}" if best.draft.precision != ctx.precision else ""
    return (
        f"nearest plan {framework} can express: {plan_summary(best.draft.plan)}{precision} "
        f"({'; '.join(best.changes)}): modelled step time {new_s:.4g} s vs "
        f"{ctx.step_time_s:.4g} s for the original ({delta:+.1f}%){fits}"
    )


def enforce(ctx: ExportContext, framework: str, rules: Sequence[Rule]) -> None:
    """Raise ExportError if any rule refuses the context's plan, naming the nearest valid plan."""
    draft = Draft(ctx.plan, ctx.precision)
    refusal = first_refusal(ctx.rule_context, draft, rules)
    if refusal is None:
        return
    nearest = _nearest_text(ctx, framework, _expressible(ctx, refusal, rules))
    raise ExportError(f"{framework} cannot express this plan: {refusal.rule}. {nearest}.")
