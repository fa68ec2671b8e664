"""Collectives of a serving step: decode-sized messages, where latency rules (the seed's
n alpha + Q / B). TP all-reduce: the fastest of NCCL's ring (cost/comm.py, Simple protocol), its
LL form, and the engines' one-shot / two-shot kernels inside the NVLink domain; EP dispatch and
combine with DeepEP-style kernels. Bandwidths and latencies are the cluster's tiers
(hardware/data/catalog.yaml); cost/serving_step.py calls these per layer.
"""

from __future__ import annotations

from paraplan.cost.comm import GroupSpan, SubAxis, allreduce_s, span_of
from paraplan.cost.memo import IdentityMemo
from paraplan.hardware import Cluster

__all__ = [
    "LL_BASE_S",
    "PEER_ALLREDUCE_TIERS",
    "LL_STEP_S",
    "LL_STEP_NETWORK_S",
    "LL_BANDWIDTH_FRACTION",
    "ll_ring_allreduce_s",
    "oneshot_allreduce_s",
    "ep_alltoall_s",
]

# NCCL's low-latency (LL) protocol, which it picks for decode-sized messages: base latency 6.6 us
# per ring collective and per-step hardware latency by link kind, at half the link bandwidth
# (hardware.json nccl_cost_model: base_latency_us_master Ring LL 6.6; per_step_hw_latency_us_master
# Ring LL NVLink 0.6, PCIe 1.0, Network 2.7; protocols.LL "caps at ~50% of link bw"; S3).
LL_BASE_S = 6.6e-6
LL_STEP_S = {"nvlink": 0.6e-6, "pcie": 1.0e-6}
LL_STEP_NETWORK_S = 2.7e-6
LL_BANDWIDTH_FRACTION = 0.5


PEER_ALLREDUCE_TIERS = frozenset({"nvlink", "xgmi"})
"""Scale-up tiers on which the engines run their own one-shot / two-shot all-reduce kernels
(every rank reads its peers' buffers over the GPU fabric). Over PCIe they fall back to NCCL's
rings: vLLM disables its custom all-reduce on more than two PCIe-only GPUs
(vllm/distributed/device_communicators/custom_all_reduce.py, "not supported on more than two
PCIe-only GPUs"), and TensorRT-LLM's all-reduce plugin takes NCCL where the GPUs have no NVLink
(cpp/tensorrt_llm/plugins/ncclPlugin/allreducePlugin.cpp, its NVLink / P2P check). Both cited
from memory of those files, not re-read here. ROCm's vLLM runs its custom kernel over xGMI."""

_SPANS: IdentityMemo[GroupSpan] = IdentityMemo(1024)
"""_span's memo, by the cluster's identity and the group (cost/memo.py)."""


def _span(cluster: Cluster, group: int) -> GroupSpan:
    """The tiers ``group`` consecutive ranks span (cost/comm.py span_of), once per cluster and
    group: a serving search asks for the same few groups in every step it costs."""
    return _SPANS.get(cluster, group, lambda: span_of(cluster, [SubAxis(1, group)]))


def _ll_step_s(tier_name: str) -> float:
    return LL_STEP_S.get(tier_name, LL_STEP_NETWORK_S)


def ll_ring_allreduce_s(cluster: Cluster, group: int, n_bytes: float) -> float:
    """NCCL ring all-reduce under the LL protocol over ``group`` consecutive ranks, the
    hierarchical form of cost/comm.py with LL's latencies and half bandwidth: base + sum over
    tiers 2 (f - 1) (step + n / (f M B_LL)). Units: seconds."""
    span = _span(cluster, group)
    total, inner = LL_BASE_S, 1
    for tier, f in zip(span.tiers, span.fan_in, strict=True):
        if f > 1:
            bw = tier.effective_bytes_per_s * LL_BANDWIDTH_FRACTION
            total += 2 * (f - 1) * _ll_step_s(tier.name) + 2.0 * n_bytes * (f - 1) / (f * inner) / bw
        inner *= f
    return total


def oneshot_allreduce_s(cluster: Cluster, group: int, n_bytes: float) -> float:
    """All-reduce of ``n_bytes`` over ``group`` consecutive ranks: the fastest of NCCL's ring
    (cost/comm.py, Simple protocol) and its LL form (``ll_ring_allreduce_s``), and inside the
    scale-up domain the engines' one-shot (2 alpha + (p - 1) n / B) and two-shot
    (4 alpha + 2 (p - 1) / p n / B) kernels (module docstring). Units: seconds."""
    if group <= 1:
        return 0.0
    ring = min(
        allreduce_s(_span(cluster, group), n_bytes),
        ll_ring_allreduce_s(cluster, group, n_bytes),
    )
    inner = cluster.tiers[0]
    if group > inner.domain_devices or inner.name not in PEER_ALLREDUCE_TIERS:
        return ring
    bw = inner.effective_bytes_per_s
    one_shot = 2.0 * inner.alpha_s + (group - 1) * n_bytes / bw
    two_shot = 4.0 * inner.alpha_s + 2.0 * (group - 1) / group * n_bytes / bw
    return min(ring, one_shot, two_shot)


def ep_alltoall_s(cluster: Cluster, group: int, n_bytes: float) -> float:
    """Dispatch (or combine) of ``n_bytes`` per rank over an EP group of ``group`` consecutive
    ranks with the serving engines' all-to-all kernels (DeepEP low-latency / NVSHMEM-style: every
    peer written at once, so one latency of the outermost tier crossed, not one per peer as
    NCCL's paired sends of cost/comm.py ``alltoall_s``): alpha_outer + max over tiers of
    n r_i / p / B_i, r_i the peers first reached at tier i. Source: DeepEP README (low-latency
    kernels: "RDMA-only", all ranks in one kernel launch). Units: seconds."""
    if group <= 1:
        return 0.0
    span = _span(cluster, group)
    slowest, inner = 0.0, 1
    for tier, f in zip(span.tiers, span.fan_in, strict=True):
        if f > 1:
            peers = inner * f - inner
            slowest = max(slowest, n_bytes * peers / group / tier.effective_bytes_per_s)
        inner *= f
    return span.outermost.alpha_s + slowest
