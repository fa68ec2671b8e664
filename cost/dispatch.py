"""MoE token dispatch and combine of one MoE layer, one micro-batch, per dispatcher.

Interim form (the dispatcher microbenchmark fit replaces it): ``alltoall`` is comm.alltoall_s of
every top-k copy; ``deepep`` / ``hybridep`` send a token once per distinct destination node,
(N-1)(1-(1-1/N)^k) remote copies per token over N nodes under uniform routing instead of
k(N-1)/N (DeepEP, github deepseek-ai/DeepEP README; docs moe_physics.md Sec. 2), and forward it
over NVLink inside the node; ``allgather`` all-gathers the tokens over the EP group.
"""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.cost.comm import GroupSpan, allgather_s, alltoall_s
from paraplan.cost.plan import MoEDispatcher, Precision
from paraplan.hardware import Accelerator, Cluster

__all__ = ["DispatchTime", "dispatch_time", "distinct_remote_nodes", "dispatcher_sm_fraction"]

ACTIVATION_BYTES = 2


@dataclass(frozen=True, slots=True)
class DispatchTime:
    """One dispatch and one combine of one MoE layer, one micro-batch. Units: seconds."""

    dispatch_s: float
    combine_s: float


def distinct_remote_nodes(nodes: int, top_k: int) -> float:
    """Expected distinct other nodes among a token's top_k experts, uniform routing:
    (N-1)(1-(1-1/N)^k). Dimensionless."""
    if nodes <= 1:
        return 0.0
    return (nodes - 1) * (1.0 - (1.0 - 1.0 / nodes) ** top_k)


def dispatch_time(
    dispatcher: MoEDispatcher,
    tokens: float,
    hidden: int,
    top_k: int,
    span: GroupSpan,
    cluster: Cluster,
    precision: Precision,
    imbalance: float = 1.0,
) -> DispatchTime:
    """Dispatch + combine of ``tokens`` routed tokens (before top-k) of one rank."""
    del cluster, precision
    if span.size <= 1:
        return DispatchTime(0.0, 0.0)
    copies_bytes = tokens * top_k * imbalance * hidden * ACTIVATION_BYTES
    if dispatcher is MoEDispatcher.ALLGATHER:
        one = allgather_s(span, tokens * hidden * ACTIVATION_BYTES * span.size)
        return DispatchTime(one, one)
    if dispatcher is MoEDispatcher.ALLTOALL or len(span.fan_in) < 2 or span.fan_in[-1] <= 1:
        one = alltoall_s(span, copies_bytes)
        return DispatchTime(one, one)
    inner = span.fan_in[0]
    nodes = span.size // inner
    remote = distinct_remote_nodes(nodes, top_k) * tokens * imbalance * hidden * ACTIVATION_BYTES
    intra = copies_bytes * (inner - 1) / span.size
    outer_tier = span.outermost
    one = max(intra / span.tiers[0].effective_bytes_per_s, remote / outer_tier.effective_bytes_per_s)
    return DispatchTime(one, one)


def dispatcher_sm_fraction(dispatcher: MoEDispatcher, accel: Accelerator) -> float:
    """Share of the SMs the dispatch kernels hold while they run beside compute: 20 of the
    H800's 132 SMs for DeepSeek's DeepEP (arXiv:2412.19437 Sec. 3.2.2), taken for every
    dispatcher (NCCL's all-to-all runs 16-32 channels, one CTA each). Dimensionless."""
    del dispatcher, accel
    return 20 / 132
