"""MoE token dispatch and combine: the time of one of each, one MoE layer, one micro-batch.

A rank routes ``tokens`` tokens (before top-k) of ``hidden`` elements to the experts of its
expert-parallel (EP) group of P ranks: g ranks per scale-up (NVLink) domain, N = P / g nodes
(the span's fan-in at the first tier and beyond it). Per dispatcher (Megatron
``--moe-token-dispatcher-type`` / ``--moe-flex-dispatcher-backend``; cost/plan.py MoEDispatcher):

- ``alltoall`` (NCCL all-to-all): every top-k copy goes to its expert's rank, k (N-1)/N remote
  copies per token, in BF16; the pairwise all-to-all of cost/comm.py (``alltoall_s``), whose
  scale-out tier is one NIC per GPU: NCCL's all-to-all cannot aggregate several NICs
  (nccl-tests #267; hardware.json S25).
- ``allgather`` (Megatron MoEAllGatherTokenDispatcher): all-gather of every rank's tokens over
  the EP group, each rank keeps its experts' copies; combine is the reduce-scatter of the same
  buffer (cost/comm.py hierarchical forms). Every token reaches all N-1 other nodes.
- ``deepep`` / ``hybridep`` (DeepEP normal kernels; NVIDIA HybridEP): a token crosses the network
  once per distinct destination node, to the rank of the same local index there, which forwards
  it over NVLink to the destination ranks (DeepEP README, "asymmetric-domain bandwidth
  forwarding"; DeepSeek-V3 report arXiv:2412.19437 Sec. 3.2.2). Dispatch in FP8 (1x128 blocks
  with FP32 scales, DeepEP's format) when the job runs blockwise FP8; BF16 otherwise (Megatron's
  MXFP8 recipe still dispatches BF16: the issue-22 MoE survey); combine in BF16. The link
  fractions and fixed time are fitted per (dispatcher, generation) in hardware/data/dispatch.yaml.

Forward = dispatch + combine; backward mirrors them (cost/ep.py). The busiest rank receives
``imbalance`` times the mean routed load, and its receive links pace the call.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb, prod

from paraplan.cost.comm import GroupSpan, allgather_s, alltoall_s, reduce_scatter_s
from paraplan.cost.compute import ACTIVATION_BYTES
from paraplan.cost.plan import MoEDispatcher, Precision
from paraplan.hardware import Accelerator, Cluster
from paraplan.hardware.dispatch import DispatcherParams, dispatcher_params, sm_count

__all__ = [
    "DispatchTime",
    "FP8_BLOCK_ELEMS",
    "FP8_SCALE_BYTES",
    "expected_distinct",
    "nodes_hit",
    "remote_copies_per_token",
    "token_bytes",
    "dispatch_time",
    "dispatcher_sm_fraction",
    "check_dispatcher",
]

FP8_BLOCK_ELEMS = 128  # elements per FP32 scale in DeepEP's FP8 dispatch (1x128 blocks; DeepEP README)
FP8_SCALE_BYTES = 4  # one FP32 scale per block; DeepEP tests: fp8 bytes = bf16 bytes * (1 + 4/128) / 2
DEDUPLICATING = (MoEDispatcher.DEEPEP, MoEDispatcher.HYBRIDEP)


@dataclass(frozen=True, slots=True)
class DispatchTime:
    """One dispatch and one combine of one MoE layer, one micro-batch. Units: seconds."""

    dispatch_s: float
    combine_s: float
    fixed_s: float = 0.0  # the part of each call independent of the bytes (in both figures)


def expected_distinct(groups: int, top_k: int, per_group: int | None = None) -> float:
    """Expected number of distinct groups (nodes, ranks) a token's top-k experts fall in.

    Formula: uniform routing over G equal groups, G (1 - (1 - 1/G)^k) (experts drawn
    independently); with e experts per group and k distinct experts of the G e,
    G (1 - C(G e - e, k) / C(G e, k)) (the exact hypergeometric count).
    Source: the issue-22 MoE survey, effect 2 (the first form). Units: groups.
    """
    if groups <= 1:
        return float(groups)
    if per_group is None or per_group * groups < top_k:
        return groups * (1.0 - (1.0 - 1.0 / groups) ** top_k)
    experts = groups * per_group
    return groups * (1.0 - comb(experts - per_group, top_k) / comb(experts, top_k))


def nodes_hit(
    top_k: int, num_nodes: int, node_limit: int | None = None, num_experts: int | None = None
) -> float:
    """Expected distinct nodes (the sender's own included) a token's experts sit on.

    Formula: expected_distinct(N, k, E/N) under uniform routing; under node-limited routing
    (each token to at most M nodes, DeepSeek-V3 Sec. 2.1.2: M = 4) min(M, that): the M nodes are
    chosen for holding the token's best experts, so each is hit (a Monte Carlo of DeepEP's
    test router, 8 nodes, M = 4: 3.98 nodes per token).
    Assumes: uniform routing; trained routers concentrate (DeepSeek-V3 averages about 2.5 nodes,
    the issue-22 MoE survey), so this is an upper estimate for them. Units: nodes.
    """
    per_node = num_experts // num_nodes if num_experts and num_experts % num_nodes == 0 else None
    hit = expected_distinct(num_nodes, top_k, per_node)
    return hit if node_limit is None else min(float(node_limit), hit)


def remote_copies_per_token(
    dispatcher: MoEDispatcher,
    top_k: int,
    num_nodes: int,
    node_limit: int | None = None,
    num_experts: int | None = None,
) -> float:
    """Copies of one routed token that leave its node.

    Formula: alltoall k (N-1)/N; allgather N-1 (every other node gets every token);
    deepep/hybridep nodes_hit * (N-1)/N, i.e. (N-1)(1 - (1-1/N)^k) under uniform routing
    (the sender's node is one of the N, equally likely). Top-8 over 2 nodes: 4.0 -> 1.0; over
    4 nodes: 6.0 -> 2.7.
    Source: the issue-22 MoE survey, effect 2. Units: token copies.
    """
    if num_nodes <= 1:
        return 0.0
    if dispatcher is MoEDispatcher.ALLTOALL:
        return top_k * (num_nodes - 1) / num_nodes
    if dispatcher is MoEDispatcher.ALLGATHER:
        return float(num_nodes - 1)
    return nodes_hit(top_k, num_nodes, node_limit, num_experts) * (num_nodes - 1) / num_nodes


def token_bytes(dispatcher: MoEDispatcher, hidden: int, precision: Precision) -> tuple[float, float]:
    """Bytes of one token copy on the wire: (dispatch, combine).

    Formula: FP8 dispatch h (1 + 4/128) (1 B per element plus an FP32 scale per 128, DeepEP's
    blockwise format) for deepep/hybridep under blockwise FP8; 2 h otherwise; combine 2 h.
    Source: DeepEP README (FP8 dispatch, BF16 combine); the issue-22 MoE survey (blockwise
    FP8 dispatches FP8; Megatron's MXFP8 recipe still dispatches BF16). Units: bytes.
    Assumes: NCCL all-to-all and all-gather dispatch BF16 under every recipe; per-tensor FP8
    and NVFP4 quantise after the dispatch (inside the expert GEMMs).
    """
    bf16 = float(hidden * ACTIVATION_BYTES)
    if dispatcher in DEDUPLICATING and precision is Precision.FP8_BLOCKWISE:
        return hidden * (1.0 + FP8_SCALE_BYTES / FP8_BLOCK_ELEMS), bf16
    return bf16, bf16


def dispatch_time(
    dispatcher: MoEDispatcher,
    tokens: float,
    hidden: int,
    top_k: int,
    span: GroupSpan,
    cluster: Cluster,
    precision: Precision,
    imbalance: float = 1.0,
    *,
    num_experts: int | None = None,
    node_limit: int | None = None,
) -> DispatchTime:
    """Time of one dispatch and one combine of one MoE layer, one micro-batch, on the busiest rank.

    ``tokens``: tokens one rank routes (before top-k); ``span``: the EP group's tiers;
    ``num_experts``: routed experts (exact distinct counts; None: the independent-draw form);
    ``node_limit``: node-limited routing's M (None: unlimited).

    Formula, with b the bytes of a copy (token_bytes) and u = imbalance:
      alltoall:  alltoall_s(span, tokens * k * u * 2h) for each of dispatch and combine;
      allgather: allgather_s(span, n) and reduce_scatter_s(span, n), n = tokens * P * 2h;
      deepep / hybridep: t = fixed + max(t_up, t_out), with
        t_up  = tokens * u * D * (g-1)/g * b / (f_up * B_up)      (NVLink: the copies a rank
                receives, one per distinct destination rank, D = expected_distinct over the P
                ranks, or over the M g ranks of the chosen nodes; all but the forwarder's own
                arrive over NVLink),
        t_out = sum over scale-out tiers i of tokens * u * R_i * b / (f_out * B_i)  (R = remote
                copies per token, split over the tiers by where the distinct nodes first sit;
                the tiers share the GPU's one NIC, so they add),
      B the catalog's per-GPU line rates, f_up / f_out / fixed from hardware/data/dispatch.yaml;
      the combine's t_up at its own f_up where a part was measured apart: DeepEP's combine in
      the multi-node NVLink domain of GB200 NVL72 reaches ~190 GB/s at EP32 with 24 SMs against
      ~400 GB/s dispatch (Megatron-LM DeepSeek-V3 GB200 guide, eb0783b6d3), 127-207 GB/s at 24
      ranks (HybridEP README at 94a9f8f, its DeepEP column), where on an 8-GPU B200 board it
      runs near its dispatch (302 against 348 GB/s, the same README).
    Source: DeepEP normal kernels (RDMA to the same-index rank, NVLink forwarding, pipelined:
    the slower domain paces the call); the fit and its cells in hardware/data/dispatch.yaml.
    Units: seconds.
    Assumes: uniform routing (nodes_hit); the NVLink and network stages overlap fully; the
    fixed time is paid by each call (HybridEP's metadata preprocessing, the count exchange and
    host wait of DeepEP's normal mode). ``cluster`` is the one that hosts the EP group (a pool
    of a pooled cluster).
    """
    if tokens <= 0 or span.size <= 1:
        return DispatchTime(0.0, 0.0)
    bf16 = hidden * ACTIVATION_BYTES
    if dispatcher is MoEDispatcher.ALLTOALL:
        one = alltoall_s(span, tokens * top_k * imbalance * bf16)
        return DispatchTime(one, one)
    if dispatcher is MoEDispatcher.ALLGATHER:
        gathered = tokens * span.size * bf16
        return DispatchTime(allgather_s(span, gathered), reduce_scatter_s(span, gathered))
    if span.torus is not None:
        raise ValueError(
            f"moe_dispatcher={dispatcher.value!r} runs on NVIDIA GPUs (NVLink + RDMA); "
            f"{cluster.name} is a TPU slice: use alltoall or allgather"
        )
    params = dispatcher_params(dispatcher.value, cluster.accelerator.generation)
    dispatch_b, combine_b = token_bytes(dispatcher, hidden, precision)
    up_combine = params.combine_scale_up_on(cluster.accelerator.key)
    route = (dispatcher, params, span, top_k, node_limit, num_experts)
    scale = tokens * imbalance
    return DispatchTime(
        params.fixed_s + scale * dispatch_b * _seconds_per_copy_byte(*route, params.scale_up),
        params.fixed_s + scale * combine_b * _seconds_per_copy_byte(*route, up_combine),
        params.fixed_s,
    )


def _seconds_per_copy_byte(
    dispatcher: MoEDispatcher,
    params: DispatcherParams,
    span: GroupSpan,
    top_k: int,
    node_limit: int | None,
    num_experts: int | None,
    scale_up: float,
) -> float:
    """max(t_up, t_out) of dispatch_time per routed token and byte of a copy, the NVLink stage
    at ``scale_up`` of its line rate."""
    g = span.fan_in[0]
    outer = list(zip(span.tiers[1:], span.fan_in[1:], strict=True))
    num_nodes = prod(f for _, f in outer)
    chosen = num_nodes if node_limit is None else min(node_limit, num_nodes)
    per_rank = num_experts // span.size if num_experts and num_experts % span.size == 0 else None
    ranks = expected_distinct(chosen * g, top_k, per_rank)
    up = span.tiers[0]
    t_up = ranks * (g - 1) / g / (scale_up * up.per_gpu_bytes_per_s) if g > 1 else 0.0
    remote = remote_copies_per_token(dispatcher, top_k, num_nodes, node_limit, num_experts)
    t_out, inner = 0.0, 1
    for tier, f in outer:
        if f > 1 and num_nodes > 1:
            share = (inner * f - inner) / (num_nodes - 1)  # distinct remote nodes first reached here
            rate = (
                tier.effective_bytes_per_s
                if params.scale_out is None
                else params.scale_out * tier.per_gpu_bytes_per_s
            )
            t_out += remote * share / rate
        inner *= f
    return max(t_up, t_out)


def dispatcher_sm_fraction(dispatcher: MoEDispatcher, accelerator: Accelerator) -> float:
    """Fraction of the accelerator's SMs the dispatcher's kernels hold while they run.

    Formula: sms / SM count: DeepEP 20 of 132 on Hopper (DeepSeek-V3 arXiv:2412.19437
    Sec. 3.2.2; DeepEP's default), 24 on GB200 and 16 on B200; HybridEP 8 on Hopper, 32 on
    GB200, 16 on B200 (the SM counts of the measured tables; hardware/data/dispatch.yaml).
    Source: the issue-22 MoE survey ("DeepEP/HybridEP take 16-32 SMs"). Units: fraction.
    Assumes: NCCL's all-to-all and all-gather kernels (one CTA per channel) are not charged:
    0 for alltoall and allgather (no in-repo source for their channel count in training).
    """
    if dispatcher not in DEDUPLICATING:
        return 0.0
    params = dispatcher_params(dispatcher.value, accelerator.generation)
    return params.sms_on(accelerator.key) / sm_count(accelerator.key)


def check_dispatcher(dispatcher: MoEDispatcher, cluster: Cluster) -> None:
    """ValueError naming ``plan.moe_dispatcher`` when DeepEP / HybridEP cannot run on ``cluster``
    (a TPU slice, or a generation with no fitted parameters: hardware/data/dispatch.yaml)."""
    if dispatcher not in DEDUPLICATING:
        return
    for pool in cluster.pools or (cluster,):
        if pool.torus is not None or pool.accelerator.is_tpu:
            raise ValueError(
                f"plan.moe_dispatcher={dispatcher.value} runs on NVIDIA GPUs (NVLink + RDMA); "
                f"{pool.name} is a TPU slice: use alltoall or allgather"
            )
        try:
            dispatcher_params(dispatcher.value, pool.accelerator.generation)
        except ValueError as e:
            raise ValueError(f"plan.{e}") from None
