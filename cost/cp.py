"""Context parallel: ring exchange of K/V chunks, overlapped with attention compute.

Each attention layer passes K and V (n * 2 * kv_dim elements per rank) around the cp ring in
cp-1 steps forward, and K, V plus their gradients backward (Liu et al. 2023, Ring Attention,
arXiv:2310.01889; Megatron-Core context parallel with causal load balancing: each rank holds
2 chunks of s/(2cp) tokens, so every rank does equal work). Exposed = max(0, comm - attention).
"""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.cost.comm import GroupSpan, group_span, p2p_s
from paraplan.cost.compute import (
    ACTIVATION_BYTES,
    BACKWARD_ATTENTION_FACTOR,
    LayerTime,
    tokens_per_device,
)
from paraplan.cost.plan import Axis, Job, Plan
from paraplan.hardware import Cluster

__all__ = ["CPComm", "cp_layer_comm"]


@dataclass(frozen=True, slots=True)
class CPComm:
    forward_s: float
    backward_s: float
    exposed_forward_s: float
    exposed_backward_s: float


def cp_layer_comm(kv_dim: int, attention: LayerTime, plan: Plan, job: Job,
                  cluster: Cluster, span: GroupSpan | None = None) -> CPComm:
    """Formula: (cp-1) * (alpha + n*2*kv_dim*2 B / B_tier) forward, twice that backward."""
    if plan.cp == 1:
        return CPComm(0.0, 0.0, 0.0, 0.0)
    tier = (span or group_span(cluster, plan, Axis.CP)).outermost
    chunk_bytes = tokens_per_device(plan, job) * 2 * kv_dim / plan.tp * ACTIVATION_BYTES
    fwd = (plan.cp - 1) * p2p_s(tier, chunk_bytes)
    bwd = 2 * fwd
    return CPComm(
        fwd, bwd,
        max(0.0, fwd - attention.attention_s),
        max(0.0, bwd - BACKWARD_ATTENTION_FACTOR * attention.attention_s),
    )
