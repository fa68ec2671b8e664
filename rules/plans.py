"""Plan helpers the rules and the exporters share: the uniform recompute mode, the effective
rank order, and regrouping degrees on the same devices."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import cache
from typing import Any

from paraplan.cost import Axis, Plan, Recompute
from paraplan.cost.plan import chunk_layers, even_split
from paraplan.rules.base import building_fixes

__all__ = ["uniform_recompute", "effective_order", "order_matches", "regroup", "virtual_stage_ranges"]


def uniform_recompute(plan: Plan) -> Recompute | None:
    """The plan's recompute mode when every stage uses the same one, else None."""
    modes = set(plan.recompute)
    return next(iter(modes)) if len(modes) == 1 else None


def effective_order(plan: Plan) -> tuple[Axis, ...]:
    """Rank order without the axes of degree 1 (those do not change any group), innermost first."""
    return tuple(a for a in plan.order if plan.degree(a) > 1)


def order_matches(plan: Plan, framework_order: Sequence[Axis]) -> bool:
    """Whether the plan places ranks as a framework with ``framework_order`` does."""
    active = frozenset(a for a in plan.order if plan.degree(a) > 1)
    return _orders_match(plan.order, tuple(framework_order), active)


@cache
def _orders_match(
    order: tuple[Axis, ...], framework_order: tuple[Axis, ...], active: frozenset[Axis]
) -> bool:
    """``order_matches`` on the orders and the axes of degree > 1 (a layout filter asks it of
    thousands of layouts with a few dozen distinct answers)."""
    return tuple(a for a in order if a in active) == tuple(a for a in framework_order if a in active)


def regroup(plan: Plan, **degrees: int) -> Plan | None:
    """``plan`` with some of tp/pp/cp changed and dp absorbing the difference (same devices).

    Returns None when the device count does not divide or the result is no Plan. A new pp gets
    an even layer split and vp=1; per-stage recompute collapses to the plan's most
    memory-saving mode.
    """
    if not building_fixes():  # only repairs regroup a plan: none are wanted (base.verdict_only)
        return None
    tp, pp, cp = (degrees.get(a, plan.degree(a)) for a in (Axis.TP, Axis.PP, Axis.CP))
    if plan.num_devices % (tp * pp * cp):
        return None
    changes: dict[str, Any] = dict(degrees, dp=plan.num_devices // (tp * pp * cp))
    if pp != plan.pp:
        num_layers = sum(plan.layers_per_stage)
        if num_layers < pp:
            return None
        strongest = max(plan.recompute, key=list(Recompute).index)
        changes.update(
            vp=1,
            layers_per_stage=even_split(num_layers, pp),
            recompute=(strongest,) * pp,
            recompute_layers=(),
        )
    try:
        return replace(plan, **changes)
    except ValueError:  # a plan no framework runs (e.g. etp = the old tp): no such regrouping
        return None


def virtual_stage_ranges(plan: Plan) -> list[range]:
    """The layer positions each virtual stage holds, in virtual-stage order j = c * pp + s (chunk
    c of pp rank s): consecutive runs of ``chunk_layers(plan)[s][c]`` positions, so stage j
    starts where stage j - 1 ends (Megatron's and torch.distributed.pipelining's order)."""
    chunks = chunk_layers(plan)
    out: list[range] = []
    start = 0
    for j in range(plan.pp * plan.vp):
        n = chunks[j % plan.pp][j // plan.pp]
        out.append(range(start, start + n))
        start += n
    return out
