"""Tensor (and sequence) parallel communication of one transformer block.

Megatron TP: per block, one all-reduce of the n*h activations after attention and one after the
MLP in forward, two more in backward; in general one per row-parallel output projection: each
mixer (attention, Mamba: heads sharded, megatron-core ssm/mamba_mixer.py out_proj) and each MLP,
so a hybrid block of one layer has one (``tp_comm``) (Shoeybi et al. 2019, arXiv:1909.08053, Fig. 4). With
sequence parallelism each all-reduce becomes an all-gather + reduce-scatter pair of the same bytes
(Korthikanti et al. 2022 Sec. 4.2.2). Not overlapped with compute (Megatron default).
"""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.cost.comm import GroupSpan, allgather_s, allreduce_s, group_span, reduce_scatter_s
from paraplan.cost.compute import ACTIVATION_BYTES, tokens_per_device
from paraplan.cost.plan import Axis, Job, Layout
from paraplan.hardware import Cluster

__all__ = ["TPComm", "tp_block_comm", "tp_comm"]

COLLECTIVES_PER_BLOCK_FORWARD = 2  # after attention, after MLP


@dataclass(frozen=True, slots=True)
class TPComm:
    forward_s: float
    backward_s: float


def tp_comm(
    hidden: int,
    collectives: float,
    plan: Layout,
    job: Job,
    cluster: Cluster,
    span: GroupSpan | None = None,
    tokens: float | None = None,
) -> TPComm:
    """Formula: collectives x allreduce(n*h*2 B) forward (all-gather + reduce-scatter with SP),
    the same backward, on the TP group's tiers; n = ``tokens`` (default tokens_per_device; a
    vision layer's image tokens). ``collectives``: one per mixer or dense MLP, a MoE layer's from
    ep.moe_tp_collectives."""
    if plan.tp == 1 or not collectives:
        return TPComm(0.0, 0.0)
    span = span or group_span(cluster, plan, Axis.TP)
    n = tokens_per_device(plan, job) if tokens is None else tokens
    n_bytes = n * hidden * ACTIVATION_BYTES
    if plan.sequence_parallel:
        one = allgather_s(span, n_bytes) + reduce_scatter_s(span, n_bytes)
    else:
        one = allreduce_s(span, n_bytes)
    return TPComm(collectives * one, collectives * one)


def tp_block_comm(
    hidden: int,
    plan: Layout,
    job: Job,
    cluster: Cluster,
    mlp_collectives: float = 1.0,
    span: GroupSpan | None = None,
) -> TPComm:
    """Formula: (1 + mlp_collectives) x allreduce(n*h*2 B) forward, the same backward, on the TP
    group's tiers. ``mlp_collectives``: 1 for a dense MLP; a MoE layer's from ep.moe_tp_collectives."""
    if plan.tp == 1:
        return TPComm(0.0, 0.0)
    span = span or group_span(cluster, plan, Axis.TP)
    n_bytes = tokens_per_device(plan, job) * hidden * ACTIVATION_BYTES
    if plan.sequence_parallel:
        one = allgather_s(span, n_bytes) + reduce_scatter_s(span, n_bytes)
    else:
        one = allreduce_s(span, n_bytes)
    fwd = (COLLECTIVES_PER_BLOCK_FORWARD - 1 + mlp_collectives) * one
    return TPComm(fwd, fwd)
