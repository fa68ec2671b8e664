"""Pipeline parallel: point-to-point traffic between stages and the 1F1B schedule's step time.

Uneven stages under 1F1B take sum_s t_s + (m - 1) * max_s t_s (the slowest stage paces the
steady state; each other stage adds its fill/drain once). With v interleaved chunks per rank the
fill/drain shrinks by v (Narayanan et al. 2021, arXiv:2104.04473 Sec. 2.2.2):
    pipeline_s = m * max_s t_s + (sum_s t_s - max_s t_s) / v
which for equal stages is (m + (p - 1)/v) * t, the paper's bubble (p - 1)/(v m).
"""

from __future__ import annotations

from paraplan.cost.comm import group_span, p2p_s
from paraplan.cost.compute import ACTIVATION_BYTES, tokens_per_device
from paraplan.cost.plan import Axis, Job, Plan
from paraplan.hardware import Cluster, Tier

__all__ = ["pipeline_s", "bubble_s", "pipeline_lower_bound_s", "p2p_per_micro_batch_s",
           "in_flight_micro_batches"]


def pipeline_s(stage_s: list[float], num_micro_batches: int, vp: int) -> float:
    """Formula: m * max(t) + (sum(t) - max(t)) / v. Units: seconds."""
    slowest = max(stage_s)
    return num_micro_batches * slowest + bubble_s(stage_s, vp)


def pipeline_lower_bound_s(total_stage_s: float, pp: int, vp: int, num_micro_batches: int) -> float:
    """Least pipeline time of stages whose times sum to ``total_stage_s``.

    Formula: m * T/p + T * (1 - 1/p) / v. pipeline_s = m*max + (sum - max)/v grows with max
    (m >= 1 >= 1/v), and max >= sum/p, so the balanced split is the bound.
    """
    return num_micro_batches * total_stage_s / pp + total_stage_s * (1 - 1 / pp) / vp


def bubble_s(stage_s: list[float], vp: int) -> float:
    """Formula: (sum(t) - max(t)) / v."""
    return (sum(stage_s) - max(stage_s)) / vp


def p2p_per_micro_batch_s(hidden: int, plan: Plan, job: Job, cluster: Cluster,
                          tier: Tier | None = None) -> float:
    """Exposed activation send forward + gradient send backward per micro-batch per stage.

    Formula: 2 * (alpha + n*h*2 B / B_tier), n*h divided by tp under SP (scattered send).
    ``tier``: the outermost tier the pipeline group spans, when the caller has it.
    Assumes: the extra (v-1) sends of interleaving overlap with compute (Megatron overlap_p2p_comm).
    """
    if plan.pp == 1:
        return 0.0
    tier = tier or group_span(cluster, plan, Axis.PP).outermost
    n_bytes = tokens_per_device(plan, job) * hidden * ACTIVATION_BYTES
    if plan.sequence_parallel:
        n_bytes /= plan.tp
    return 2 * p2p_s(tier, n_bytes)


def in_flight_micro_batches(stage: int, plan: Plan, num_micro_batches: int) -> float:
    """Micro-batches whose activations stage ``stage`` holds at its peak, in stage-units.

    Formula: min(m, p - s) under 1F1B; times (1 + (p-1)/(p v)) with interleaving
    (Korthikanti et al. 2022 Sec. 4.2.3).
    """
    held = min(num_micro_batches, plan.pp - stage)
    if plan.vp > 1:
        held *= 1 + (plan.pp - 1) / (plan.pp * plan.vp)
    return held
