"""Why the winner wins: what binds (memory on a stage, a link tier, the bubble) and what the
runner-up loses, in a few sentences built from cost/ breakdowns."""

from __future__ import annotations

from paraplan.cost import Axis, Breakdown, Plan, group_span
from paraplan.hardware import Cluster
from paraplan.report import gib

__all__ = ["explain", "summary"]

TIGHT_MEMORY = 0.9  # a stage above 90% of device memory is "memory-bound"


def summary(plan: Plan) -> str:
    rec = sorted({r.value for r in plan.recompute})
    return (f"dp={plan.dp} tp={plan.tp} pp={plan.pp} cp={plan.cp} vp={plan.vp} "
            f"mb={plan.micro_batch} zero={plan.zero} recompute={'/'.join(rec)} "
            f"order={'-'.join(plan.order)}")


def _tiers(cluster: Cluster, plan: Plan) -> str:
    parts = []
    for axis in (Axis.TP, Axis.CP, Axis.DP, Axis.PP):
        if plan.degree(axis) > 1:
            parts.append(f"{axis.value} over {group_span(cluster, plan, axis).outermost.name}")
    return ", ".join(parts) or "a single device"


def explain(plan: Plan, b: Breakdown, cluster: Cluster,
            runner_up: tuple[Plan, Breakdown] | None) -> list[str]:
    lines = []
    step = b.step_time_s
    lines.append(
        f"step {step:.3f} s: compute {b.compute_s / step:.0%}, exposed communication "
        f"{b.exposed_comm_s / step:.0%}, pipeline bubble {b.bubble_s / step:.0%}, optimizer "
        f"{b.optimizer_s / step:.0%}"
    )
    s = b.binding_stage
    mem = b.stage_memory[s]
    use = mem.total_bytes / b.memory_capacity_bytes
    if use >= TIGHT_MEMORY:
        lines.append(f"memory binds on stage {s}: {gib(mem.total_bytes)} of "
                     f"{gib(b.memory_capacity_bytes)} ({use:.0%})")
    else:
        lines.append(f"memory does not bind: peak {gib(mem.total_bytes)} on stage {s} "
                     f"({use:.0%} of {gib(b.memory_capacity_bytes)})")
    recomputed = [i for i, r in enumerate(plan.recompute) if r.value != "none"]
    if recomputed:
        lines.append(f"recompute on stage(s) {recomputed}: without it they would not fit")
    lines.append(f"placement: {_tiers(cluster, plan)} (rank order {'-'.join(plan.order)})")
    if len(set(plan.layers_per_stage)) > 1:
        lines.append(f"uneven stages {list(plan.layers_per_stage)} balance the embedding/LM head "
                     "and the in-flight activations")
    if runner_up is not None:
        other, ob = runner_up
        delta = ob.step_time_s - step
        parts = []
        for name, a, o in (("compute", b.compute_s, ob.compute_s),
                           ("exposed comm", b.exposed_comm_s, ob.exposed_comm_s),
                           ("bubble", b.bubble_s, ob.bubble_s),
                           ("optimizer", b.optimizer_s, ob.optimizer_s)):
            if abs(o - a) > 0.005 * step:
                parts.append(f"{name} {o - a:+.3f} s")
        lines.append(f"runner-up {summary(other)}: {ob.step_time_s:.3f} s "
                     f"({delta / step:+.1%}; {', '.join(parts) or 'ties within 0.5%'})")
    return lines
