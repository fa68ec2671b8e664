"""Context parallel: K/V exchange between the cp ranks of each attention layer, two variants.

Causal load balance (Megatron-Core): each rank holds 2 chunks of s/(2cp) tokens, so every rank
does equal attention work; activations are divided by cp (n = micro_batch * seq_len / cp tokens
per rank, compute.tokens_per_device). ``plan.cp_comm`` picks the exchange (Megatron
``--cp-comm-type``, docs/frameworks.md Sec. 2.2):

- ``p2p`` (ring; Liu et al. 2023, Ring Attention, arXiv:2310.01889; Megatron-Core/TE
  ``AttnFuncWithCPAndKVP2P``): K and V (n * 2 * kv_dim elements per rank) pass around the cp ring
  in cp - 1 hops forward, and K, V plus their gradients backward. The attention runs as cp
  kernels, one per ring step over the chunk already held (compute.attention_shape; with causal
  load balancing each step is 1/cp of the rank's attention work); hop i + 1 is in flight while
  step i computes, so each of the cp - 1 hops is exposed by max(0, hop - step): at short
  sequences the chunks are too small to hide the hops (a sum of per-hop maxima, not one max of
  totals, which would let a long step hide a short one's hop).
- ``all_gather`` (Llama 3: Dubey et al. 2024, arXiv:2407.21783 Sec. 3.3.2; Megatron/TE
  ``allgather``): all-gather the K/V of the whole sequence before attention, compute each local
  Q chunk against it, and in backward all-gather K/V again and reduce-scatter dK/dV. Collective
  algorithms (hierarchical, comm.allgather_s) instead of cp - 1 dependent p2p steps, but not
  overlapped with attention, and the gathered K/V of the whole sequence is a transient buffer.

Layer kinds (conservative): a sliding-window or chunked attention layer exchanges the same K/V
as a full one (the ring is not assumed to skip the hops whose keys lie beyond the window: with
causal load balancing every rank holds chunks from both ends of the sequence), while its
per-step attention is smaller, so less of each hop hides. Not checked here: which CP exchanges
a framework accepts for windowed attention (Transformer Engine's CP has restricted sliding
windows to some exchange types; the framework rules must say). Mamba layers have no K/V exchange: cp > 1 is
refused for them (cost.plan.check_layer_kinds); vision layers are not split by cp.
"""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.cost.comm import GroupSpan, allgather_s, group_span, p2p_s, reduce_scatter_s
from paraplan.cost.compute import (
    ACTIVATION_BYTES,
    BACKWARD_ATTENTION_FACTOR,
    LayerTime,
    tokens_per_device,
)
from paraplan.cost.plan import Axis, CPComm, Job, Layout
from paraplan.hardware import Cluster

__all__ = ["CPComm", "CPCost", "cp_layer_comm", "kv_chunk_bytes"]


@dataclass(frozen=True, slots=True)
class CPCost:
    """K/V exchange of one attention layer, one micro-batch. Units: seconds, bytes."""

    forward_s: float
    backward_s: float
    exposed_forward_s: float
    exposed_backward_s: float
    working_bytes: float = 0.0  # transient buffer while the layer runs (all-gathered K/V)


def kv_chunk_bytes(kv_dim: int, plan: Layout, job: Job) -> float:
    """K and V of one rank's tokens: n * 2 * kv_dim / tp * 2 B (heads sharded by TP)."""
    return tokens_per_device(plan, job) * 2 * kv_dim / plan.tp * ACTIVATION_BYTES


def cp_layer_comm(
    kv_dim: int, attention: LayerTime, plan: Layout, job: Job, cluster: Cluster, span: GroupSpan | None = None
) -> CPCost:
    """K/V exchange of one attention layer under ``plan.cp_comm``.

    Formula (c = kv_chunk_bytes, cp ranks):
      p2p:        hop = alpha + c / B_tier, fwd = (cp-1) * hop, bwd = 2 fwd (K, V, dK, dV);
                  exposed_fwd = (cp-1) * max(0, hop - attn_fwd / cp),
                  exposed_bwd = (cp-1) * max(0, 2 hop - attn_bwd / cp)
      all_gather: fwd = allgather(cp * c), bwd = allgather(cp * c) + reduce_scatter(cp * c),
                  all exposed; working buffer cp * c.
    Source: module docstring. Units: seconds, bytes.
    Assumes: the p2p ring's tier is the group's outermost (its slowest hop paces every step).
    """
    if plan.cp == 1:
        return CPCost(0.0, 0.0, 0.0, 0.0)
    span = span or group_span(cluster, plan, Axis.CP)
    chunk_bytes = kv_chunk_bytes(kv_dim, plan, job)
    if plan.cp_comm is CPComm.ALL_GATHER:
        full_bytes = plan.cp * chunk_bytes
        fwd = allgather_s(span, full_bytes)
        bwd = fwd + reduce_scatter_s(span, full_bytes)
        return CPCost(fwd, bwd, fwd, bwd, working_bytes=full_bytes)
    hops = plan.cp - 1
    hop = p2p_s(span.outermost, chunk_bytes)
    step_fwd = attention.attention_s / plan.cp
    step_bwd = BACKWARD_ATTENTION_FACTOR * step_fwd
    return CPCost(
        hops * hop,
        2 * hops * hop,
        hops * max(0.0, hop - step_fwd),
        hops * max(0.0, 2 * hop - step_bwd),
    )
