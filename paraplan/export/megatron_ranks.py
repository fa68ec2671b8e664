"""Megatron-LM's rank groups of a plan: which ranks form each tp/cp/dp/pp group, and each expert
group under expert parallelism (moved out of paraplan/export/megatron.py unchanged)."""

from __future__ import annotations

from math import prod

from paraplan.cost import Axis, Plan
from paraplan.result import PlanOut

__all__ = ["rank_groups", "expert_rank_groups"]


def rank_groups(plan: PlanOut | Plan) -> dict[str, list[list[int]]]:
    """Ranks of every tp/cp/dp/pp group under the plan's order (innermost axis varies fastest).

    Rank = sum over axes of coordinate x stride, stride = product of the degrees ordered inside.
    Groups are listed by their smallest rank.
    """
    order = [str(a) for a in plan.order]
    degree = {a: int(getattr(plan, a)) for a in order}
    stride = {a: prod(degree[b] for b in order[:i]) for i, a in enumerate(order)}
    world = prod(degree.values())
    groups: dict[str, list[list[int]]] = {}
    for a in order:
        bases = sorted({r - (r // stride[a] % degree[a]) * stride[a] for r in range(world)})
        groups[a] = [[b + k * stride[a] for k in range(degree[a])] for b in bases]
    return groups


def expert_rank_groups(plan: Plan) -> list[list[int]]:
    """Ranks of every expert-parallel group: the innermost ep ranks of each dp x cp group (the
    cost model's EP group, cost/ep.py), listed by their smallest rank."""
    strides = {a: prod(plan.degree(b) for b in plan.order[:i]) for i, a in enumerate(plan.order)}
    cp_inner = plan.order.index(Axis.CP) < plan.order.index(Axis.DP)
    inner, outer = (Axis.CP, Axis.DP) if cp_inner else (Axis.DP, Axis.CP)
    d1 = plan.degree(inner)
    if plan.ep <= d1:
        axes = [(strides[inner], plan.ep)]
    else:
        axes = [(strides[inner], d1), (strides[outer], plan.ep // d1)]
    offsets = [0]
    for stride, degree in axes:
        offsets = [o + k * stride for o in offsets for k in range(degree)]
    seen: set[int] = set()
    out: list[list[int]] = []
    for rank in range(plan.num_devices):  # the smallest rank not yet seen is a group's first
        if rank not in seen:
            group = sorted(rank + o for o in offsets)
            seen.update(group)
            out.append(group)
    return out
