"""Pipeline parallel: point-to-point traffic between stages and the 1F1B schedule's step time.

Uneven stages under 1F1B take sum_s t_s + (m - 1) * max_s t_s (the slowest stage paces the
steady state; each other stage adds its fill/drain once). With v interleaved chunks per rank the
fill/drain shrinks by v (Narayanan et al. 2021, arXiv:2104.04473 Sec. 2.2.2):
    pipeline_s = m * max_s t_s + (sum_s t_s - max_s t_s) / v
which for equal stages is (m + (p - 1)/v) * t, the paper's bubble (p - 1)/(v m).

Unequal chunks (Megatron's uneven virtual pipeline: --account-for-embedding/loss-in-pipeline-split,
--decoder-first/last-pipeline-num-layers, --pipeline-model-parallel-layout; plan.layers_per_chunk):
rank s runs chunks c = 0..v-1 holding n[s][c] layers, each chunk's time being its layers' time
plus 1/v of the stage's fixed parts (embedding, head, p2p), so a rank's time per micro-batch is
    t_s = sum_c t[s][c] = (sum_c n[s][c]) * t_layer + fixed_s,
the stage time of its layer total, and pipeline_s keeps the formula above with those t_s.
Derivation: every rank runs m forward and m backward passes of each chunk, m * t_s busy in all;
the fill and drain cross each other rank once per virtual stage hop, which the formula charges
at that rank's mean chunk time t_s / v (exact when a rank's chunks are equal).
Assumes: the hop through a short chunk costs the rank's mean chunk. Checked against an event
simulation of Megatron's interleaved order (pipeline_parallel/schedules.py,
forward_backward_pipelining_with_interleaving, micro-batch group = pp) in
tests/cost/test_schedule.py: equal chunks match exactly; 126 layers on pp 8 x vp 8 with the
embedding and loss slots (chunks of 2 layers, the first and last of 1) come out 2.0% above the
simulation at m = 8 micro-batches and 0.1% at m = 192 (the simulated schedule hides part of the
two short hops).
"""

from __future__ import annotations

from dataclasses import replace

from paraplan.cost.comm import group_span, p2p_s
from paraplan.cost.compute import ACTIVATION_BYTES, tokens_per_device
from paraplan.cost.plan import Axis, Job, Layout
from paraplan.cost.pp_schedule import held_stage_units, hides_ep_comm, hides_p2p
from paraplan.hardware import Cluster, Tier

__all__ = [
    "pipeline_s",
    "bubble_s",
    "pipeline_lower_bound_s",
    "p2p_per_micro_batch_s",
    "in_flight_micro_batches",
    "stage_links",
    "stage_p2p_s",
]


def pipeline_s(stage_s: list[float], num_micro_batches: int, vp: int) -> float:
    """Formula: m * max(t) + (sum(t) - max(t)) / v, t_s = the stage's time per micro-batch over
    all its chunks (equal or not; module docstring). Units: seconds."""
    slowest = max(stage_s)
    return num_micro_batches * slowest + bubble_s(stage_s, vp)


def pipeline_lower_bound_s(
    total_stage_s: float, pp: int, vp: int, num_micro_batches: int, weight: float | None = None
) -> float:
    """Least pipeline time of stages whose times sum to ``total_stage_s``.

    Formula: m * T/p + T * (1 - 1/p) * w, w = 1/v or ``weight`` (the schedule's bubble weight, or
    a lower bound on it). pipeline_s = m*max + (sum - max)*w grows with max (m >= 1 >= w), and
    max >= sum/p, so the balanced split is the bound.
    """
    w = 1.0 / vp if weight is None else weight
    return num_micro_batches * total_stage_s / pp + total_stage_s * (1 - 1 / pp) * w


def bubble_s(stage_s: list[float], vp: int, weight: float | None = None) -> float:
    """Formula: (sum(t) - max(t)) / v, or (sum(t) - max(t)) x ``weight``, the schedule's
    (cost/pp_schedule.py bubble_weight; 1/v for 1F1B and interleaved)."""
    return (sum(stage_s) - max(stage_s)) * (1.0 / vp if weight is None else weight)


def p2p_per_micro_batch_s(
    hidden: int, plan: Layout, job: Job, cluster: Cluster, tier: Tier | None = None
) -> float:
    """Exposed activation send forward + gradient send backward per micro-batch per stage.

    Formula: 2 * (alpha + n*h*2 B / B_tier), n*h divided by tp under SP (scattered send).
    ``tier``: the outermost tier the pipeline group spans, when the caller has it.
    Assumes: the extra (v-1) sends of interleaving overlap with compute (Megatron overlap_p2p_comm).
    None under DualPipe / DualPipeV (pp_schedule.hides_p2p).
    """
    if plan.pp == 1 or hides_p2p(plan.pp_schedule):
        return 0.0
    tier = tier or group_span(cluster, plan, Axis.PP).outermost
    return 2 * p2p_s(tier, _p2p_bytes(hidden, plan, job))


def _p2p_bytes(hidden: int, plan: Layout, job: Job) -> float:
    n_bytes = tokens_per_device(plan, job) * hidden * ACTIVATION_BYTES
    return n_bytes / plan.tp if plan.sequence_parallel else n_bytes


def stage_links(plan: Layout, cluster: Cluster) -> list[Tier]:
    """Pooled cluster: the tier between stage s and s + 1, for s = 0..pp-2.

    At a pool boundary it is ``cluster.pool_link``; inside pool i it is the outermost tier of the
    PP group of that pool's n_i stages (what ``p2p_per_micro_batch_s`` uses on the pool alone)."""
    pools = plan.stage_pools
    links: list[Tier] = []
    for s in range(plan.pp - 1):
        a, b = pools[s], pools[s + 1]
        if a != b:
            assert cluster.pool_link is not None
            links.append(cluster.pool_link)
        else:
            local = replace(plan.layout, pp=pools.count(a), stage_pools=())
            links.append(group_span(cluster.pools[a], local, Axis.PP).outermost)
    return links


def stage_p2p_s(hidden: int, plan: Layout, job: Job, cluster: Cluster) -> tuple[float, ...]:
    """Pooled cluster: each stage's exposed p2p per micro-batch.

    Formula: 2 * (alpha + n*h*2 B / B) on the slower of the stage's links to its neighbours
    (stage_links); as p2p_per_micro_batch_s when every link is the same tier.
    Assumes: a stage at a pool boundary pays the inter-pool link for both of its sends."""
    if plan.pp == 1:
        return (0.0,)
    if hides_p2p(plan.pp_schedule):
        return (0.0,) * plan.pp
    n_bytes = _p2p_bytes(hidden, plan, job)
    link_s = [2 * p2p_s(t, n_bytes) for t in stage_links(plan, cluster)]
    return tuple(max(link_s[max(0, s - 1) : s + 1]) for s in range(plan.pp))


def in_flight_micro_batches(stage: int, plan: Layout, num_micro_batches: int) -> float:
    """Micro-batches whose activations stage ``stage`` holds at its peak, in stage-units.

    Formula: min(m, p - s) under 1F1B and ZB1P, min(m, p + 1) under DualPipe, min(m, p + 1/2)
    under DualPipeV (cost/pp_schedule.py held_stage_units, which already counts the pair's
    extra micro-batch); times (1 + (p-1)/(p v)) with interleaving
    (Korthikanti et al. 2022 Sec. 4.2.3); plus 1/v under Megatron's 1F1B EP overlap
    (``plan.moe_overlap`` with ep > 1) and pp > 1, at most m: it runs one extra micro-batch's
    forward (one chunk) before the steady state so that each merged step's forward and backward
    are independent (megatron-core 0.19.2 pipeline_parallel/schedules.py
    ``get_pp_rank_microbatches``: num_warmup_microbatches + 1 "when enabling
    overlap_moe_expert_parallel_comm"). Without pipelining nothing is added: the merged step
    runs the next micro-batch's forward layer by layer while the current one's backward frees
    its layers in the opposite order (``combined_1f1b_schedule_for_no_pipelining``), so one
    micro-batch's activations stay live (a layer more at most, not counted).
    """
    if hides_ep_comm(plan.pp_schedule):  # DualPipe / DualPipeV: the table's p + 1
        return held_stage_units(plan.pp_schedule, stage, plan.pp, plan.vp, num_micro_batches)
    held = held_stage_units(plan.pp_schedule, stage, plan.pp, plan.vp, num_micro_batches)
    if plan.vp > 1:
        held *= 1 + (plan.pp - 1) / (plan.pp * plan.vp)
    if plan.moe_overlap and plan.ep > 1 and plan.pp > 1:
        held = min(float(num_micro_batches), held + 1.0 / plan.vp)
    return held
