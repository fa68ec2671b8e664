"""Which plans count as different in a top-K list.

Two plans differ in what matters when they differ in at least one degree or mode: dp, tp, pp,
cp, ep, etp (expert tensor parallel, as run), vp, micro_batch, the set of recompute modes used,
cp_comm, sequence_parallel, or (mixed-GPU clusters) the set of pools used. Plans equal in all of
these differ only in the rank order, the ZeRO stage, the layer split or which pool holds which
stage; such a runner-up within ``DUPLICATE_REL`` of the step time of a plan already listed is
a near-duplicate and is skipped in favour of the next distinct plan.
"""

from __future__ import annotations

from collections.abc import Sequence

from paraplan.cost import Layout, Plan
from paraplan.cost.pp_schedule import resolved_schedule

__all__ = ["DUPLICATE_REL", "distinct_key", "layout_key", "is_near_duplicate"]

DUPLICATE_REL = 0.005  # 0.5%: the explanation's "ties within 0.5%", far inside the model's band


def layout_key(plan: Layout) -> tuple[object, ...]:
    """The degrees and modes a layout fixes before the layer split and recompute are chosen."""
    return (
        plan.dp,
        plan.tp,
        plan.pp,
        plan.cp,
        plan.ep,
        plan.expert_tp,
        plan.vp,
        plan.micro_batch,
        str(plan.cp_comm),
        plan.sequence_parallel,
        frozenset(plan.stage_pools),
        plan.torus_shape,
        str(resolved_schedule(plan.pp_schedule, plan.vp)),
    )


def distinct_key(plan: Plan) -> tuple[object, ...]:
    """``layout_key`` and the set of recompute modes: plans with equal keys are alike."""
    return layout_key(plan) + (frozenset(str(r) for r in plan.recompute),)


def is_near_duplicate(
    plan: Plan, step_s: float, listed: Sequence[tuple[Plan, float]], rel: float = DUPLICATE_REL
) -> bool:
    """``plan`` (step ``step_s``) has the key of a listed (plan, step) within ``rel`` of it."""
    key = distinct_key(plan)
    return any(distinct_key(p) == key and abs(step_s - s) <= rel * s for p, s in listed)
