"""Expert parallelism: which ranks share experts, the all-to-all of routed tokens, expert compute.

Megatron-Core semantics (``--expert-model-parallel-size``; docs/frameworks.md Sec. 2.3): the ep
ranks of an expert-parallel group are carved out of the dp x cp ranks (the device count does not
change) and each holds num_experts / ep experts. Expert tensor parallelism (``plan.etp``,
Megatron ``--expert-tensor-parallel-size``) is tp (the default when unset: each expert's width is
sharded like the dense MLP's) or 1 (each TP rank runs whole experts on its own sequence-parallel
tokens: no TP collectives on the routed path, tp times the expert weights). The ranks holding the
same experts, dp*cp/ep * tp/etp of them, form the expert-data-parallel group (Megatron's
expert_DP = world / (ETP x EP x PP), docs/frameworks.md Sec. 2.3): expert gradients are reduced,
and ZeRO shards expert state, over it. Rank layout: the EP group is the innermost ep ranks of the
dp x cp group (Megatron's tp-cp-ep-dp-pp order), so ep divides, or is a multiple of, the inner of
cp and dp.

MoE parallel folding (Megatron-core: the expert grid ETP x EP x expert-DP x PP is laid over the
same ranks as TP x CP x DP x PP, each with its own order): with etp = 1 the EP group may span TP
ranks. paraplan folds when the plan needs it, i.e. etp = 1 < tp and ep does not divide dp*cp
(cost.validity.expert_folded): the EP group is then the innermost ep ranks of tp x cp x dp (whole
inner axes and a divisor of the next; Megatron's expert rank generator puts ep right after
etp = 1), and the expert-DP group the remaining tp*cp*dp/ep ranks. Each rank still dispatches its
own n/tp sequence-parallel tokens and runs num_experts/ep whole experts. Example: Megatron-Bridge
Qwen3-235B-A22B on 256 H100, tp 2 x pp 8 x dp 16 with ep 32 (world % (etp*ep*pp) == 0 forces
etp = 1); the 32-rank EP group spans four DGX nodes.

Per MoE layer and micro-batch, each rank routes its n/tp tokens (n = micro_batch*seq/cp; sequence
parallel shards) as top_k copies of h activations: an all-to-all *dispatch* to the ranks owning the
experts and an all-to-all *combine* back, forward, and the mirror pair backward (Lepikhin et al.
2020, GShard, arXiv:2006.16668 Sec. 3; docs/hardware.md "Expert parallelism"). With tp > 1 the
received copies are all-gathered over TP before the (TP-sharded) experts and reduce-scattered
after (Megatron MoEAlltoAllTokenDispatcher), so the routed path moves top_k times the dense MLP's
TP bytes; with etp = 1 it moves none (each rank dispatches its own n/tp tokens). Not overlapped
with compute (Megatron's default; DeepSeek's DualPipe overlaps it).

Load imbalance: the busiest EP rank receives ``expert_imbalance`` times the mean routed load (the
MaxVio + 1 of Wang et al. 2024, arXiv:2408.15664, at the EP-rank level); its expert compute and
its all-to-all volume scale by it, and so does everyone's step (the slowest rank paces the layer).
DEFAULT_EXPERT_IMBALANCE = 1.6 for dropless (natural) routing is fitted to the four forced-balance
/ dropless pairs of the Megatron-MoE-ModelZoo Qwen3-235B-A22B table on 256 H100 (rows 2049-2056:
step ratios 1.245 / 1.209 / 1.150 / 1.090 at 16K-128K tokens, reproduced within 2.7 points,
benchmarks/moe_pairs.py; the 0.1 grid's value that keeps the largest miss least; 2026-12-02,
after the BF16 expert launches were costed apart, cost/host.py: those BF16 rows' MoE passes
were launch-bound at the FP8 launch cost, which hid part of the imbalance, and 1.7 then left a
5.9-point miss at 16K; 1.7 before that; 1.8 before those rows' ``--recompute-modules
layernorm moe`` was modelled: re-running the MoE layer in backward re-runs its imbalance too);
DODOCO (arXiv:2605.20982) finds the per-expert max/mean intrinsic to
routing (it moves <= 5% with the EP degree), so one value serves every ep;
job.expert_imbalance = 1.0 is perfectly balanced (what the Megatron-Bridge benchmark runs force).
With ep = 1 every expert is local: no imbalance.
"""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.cost.comm import GroupSpan, SubAxis, axis_stride, span_of
from paraplan.cost.compute import (
    ACTIVATION_BYTES,
    GEMM_INPUT_BYTES,
    LayerTime,
    gemm_input_bytes,
    gemm_shape,
    tokens_per_device,
)
from paraplan.cost.compute import gemm_s as gemm_s_of
from paraplan.cost.dispatch import dispatch_time
from paraplan.cost.plan import Axis, Job, Layout, MoEProbs, MoERouting, Precision
from paraplan.cost.pp_schedule import hides_ep_comm
from paraplan.cost.torus import placed_cluster
from paraplan.cost.validity import expert_folded, folded_ep_axes
from paraplan.graph import Experts
from paraplan.hardware import Accelerator, Cluster, Efficiency

__all__ = [
    "DEFAULT_EXPERT_IMBALANCE",
    "EPComm",
    "expert_imbalance",
    "routed_copies_per_device",
    "ep_span",
    "expert_dp_span",
    "expert_shard_degree",
    "ep_layer_comm",
    "expert_forward",
    "moe_tp_collectives",
    "expert_stored_bytes",
    "routed_output_kept_elems",
    "ep_exposed_s",
    "steady_fraction",
    "ep_comm_overlapped",
    "OVERLAP_EFFICIENCY",
    "GROUPED_GEMM_STREAMS",
    "QUANTIZATION_PADDING_ELEMS",
    "padding_elems",
]

DEFAULT_EXPERT_IMBALANCE = 1.6  # busiest EP rank / mean routed load, dropless (module docstring)


@dataclass(frozen=True, slots=True)
class EPComm:
    """All-to-all time of one MoE layer, one micro-batch. Units: seconds."""

    forward_s: float  # dispatch + combine
    backward_s: float  # their mirror pair


def expert_imbalance(plan: Layout, job: Job) -> float:
    """Busiest EP rank's routed load over the mean: job.expert_imbalance, or 1 when ep = 1.

    Unset, it follows job.moe_routing: 1 when force-balanced, DEFAULT_EXPERT_IMBALANCE when
    dropless, and at most the capacity factor when tokens are dropped (an expert never takes more
    than its capacity)."""
    if plan.ep == 1:
        return 1.0
    if job.expert_imbalance is not None:
        return job.expert_imbalance
    if job.moe_routing is MoERouting.FORCE_BALANCED:
        return 1.0
    if job.moe_routing is MoERouting.CAPACITY and job.moe_capacity_factor is not None:
        return min(job.moe_capacity_factor, DEFAULT_EXPERT_IMBALANCE)
    return DEFAULT_EXPERT_IMBALANCE


def routed_copies_per_device(plan: Layout, job: Job, top_k: int) -> float:
    """Routed token copies one device's experts process per micro-batch (busiest rank).

    Formula: n * top_k * imbalance, n = micro_batch * seq_len / cp (after the TP all-gather each
    rank sees its TP group's n tokens and runs 1/tp of every local expert's width).
    """
    return tokens_per_device(plan, job) * top_k * expert_imbalance(plan, job)


def _ep_sub_axes(plan: Layout) -> tuple[list[SubAxis], list[SubAxis]]:
    """Members of the EP group and of the expert-data-parallel group along the cp/dp axes (and
    tp, whose ranks hold the same whole experts when etp = 1 < tp)."""
    if expert_folded(plan):
        return _folded_sub_axes(plan)
    axes = sorted((Axis.CP, Axis.DP), key=plan.order.index)
    (s1, d1), (s2, d2) = ((axis_stride(plan, a), plan.degree(a)) for a in axes)
    ep = plan.ep
    replicas = [SubAxis(axis_stride(plan, Axis.TP), plan.tp)] if plan.expert_tp == 1 and plan.tp > 1 else []
    if ep <= d1:
        return [SubAxis(s1, ep)], replicas + [SubAxis(s1 * ep, d1 // ep), SubAxis(s2, d2)]
    return ([SubAxis(s1, d1), SubAxis(s2, ep // d1)], replicas + [SubAxis(s2 * (ep // d1), d1 * d2 // ep)])


def _folded_sub_axes(plan: Layout) -> tuple[list[SubAxis], list[SubAxis]]:
    """Folded EP (etp = 1, ep over tp ranks; cost.validity.folded_ep_axes): the EP group takes the
    innermost ep ranks of tp x cp x dp, the expert-data-parallel group the rest of them."""
    taken = dict(folded_ep_axes(plan) or [])
    ep_axes, edp_axes = [], []
    for axis in (a for a in plan.order if a != Axis.PP):
        stride, d, k = axis_stride(plan, axis), plan.degree(axis), taken.get(axis, 1)
        if k > 1:
            ep_axes.append(SubAxis(stride, k))
        if d // k > 1:
            edp_axes.append(SubAxis(stride * k, d // k))
    return ep_axes, edp_axes or [SubAxis(1, 1)]


def ep_span(cluster: Cluster, plan: Layout) -> GroupSpan:
    """Tiers the expert-parallel group spans (the innermost ep ranks of dp x cp)."""
    return span_of(placed_cluster(cluster, plan.torus_shape), _ep_sub_axes(plan)[0])


def expert_dp_span(cluster: Cluster, plan: Layout) -> GroupSpan:
    """Tiers the expert-data-parallel group spans (dp*cp/ep ranks holding the same experts)."""
    return span_of(placed_cluster(cluster, plan.torus_shape), _ep_sub_axes(plan)[1])


def expert_shard_degree(plan: Layout) -> int:
    """Ranks that hold the same experts and share their gradient sync and ZeRO shards:
    dp*cp*tp / (ep*etp) (with folding, ep may take tp ranks: docs/frameworks.md Sec. 2.3,
    expert_DP = world / (ETP x EP x PP))."""
    return plan.dp * plan.cp * plan.tp // (plan.ep * plan.expert_tp)


def ep_layer_comm(
    hidden: int, top_k: int, plan: Layout, job: Job, cluster: Cluster, span: GroupSpan | None = None
) -> EPComm:
    """Dispatch + combine of one MoE layer, forward, and their mirror pair backward.

    Formula: dispatch_time(plan.moe_dispatcher, n/tp tokens, h, top_k, EP span) (cost/dispatch.py:
    NCCL all-to-all, all-gather or node-deduplicated DeepEP / HybridEP), the busiest rank's load
    scaled by the imbalance; forward = dispatch + combine - fixed, backward = dispatch + combine -
    2 fixed: the per-call fixed part (DeepEP's count exchange, HybridEP's metadata preprocess) is
    paid once per layer and micro-batch, as Megatron's flex dispatcher computes the routing
    handle in the forward dispatch and the combine and backward reuse it
    (megatron/core/transformer/moe/token_dispatcher.py, MoEFlexTokenDispatcher; DeepEP's cached
    layout). Units: seconds.
    """
    if plan.ep == 1:
        return EPComm(0.0, 0.0)
    tokens = tokens_per_device(plan, job) / plan.tp
    t = dispatch_time(
        plan.moe_dispatcher,
        tokens,
        hidden,
        top_k,
        span or ep_span(cluster, plan),
        cluster,
        job.precision,
        expert_imbalance(plan, job),
    )
    both = t.dispatch_s + t.combine_s
    return EPComm(both - t.fixed_s, both - 2 * t.fixed_s)


OVERLAP_EFFICIENCY = 0.55
"""Share of the overlappable communication (min(comm, partner compute) per pair) actually hidden:
the streams run concurrently for part of each window only (launch order, the dispatch's own
preprocess and the shared SMs). Fitted to the three published overlap on/off pairs of the
calibration file (rows 2074/2076, 2078/2079, 2043/2044; benchmarks/moe_pairs.py: the value on a
0.05 grid that keeps the largest miss least, +0.9 / -6.5 / +5.8 points); the 16-H100
nsys trace measures 36.5% of all communication hidden with the overlap on (moe_physics.md
Sec. 3.1)."""


def ep_comm_overlapped(plan: Layout) -> bool:
    """Whether the plan's all-to-all runs beside another micro-batch's compute: Megatron's 1F1B
    EP overlap (``plan.moe_overlap``) or a schedule whose pairs hide it (cost/pp_schedule.py
    ``hides_ep_comm``: DualPipe, DualPipeV). Either way at most OVERLAP_EFFICIENCY of it hides."""
    return plan.moe_overlap or hides_ep_comm(plan.pp_schedule)


def steady_fraction(plan: Layout, job: Job) -> float:
    """Share of a rank's forward and backward passes that run in the merged steady state of
    Megatron's 1F1B EP overlap (a forward of one micro-batch beside the backward of another).

    Formula: pp = 1: (m - 1) / m (the first forward and the last backward have no partner);
    pp > 1 (interleaved, vp chunks): 1 - w / (m vp), w = (pp - 1) + (vp - 1) pp the average
    warm-up chunks of Megatron's interleaved schedule (get_pipeline_parallel_order: rank r warms
    up 2 (pp - r - 1) + (vp - 1) pp chunks). Dimensionless, in [0, 1]."""
    m = max(1, plan.num_micro_batches(job))
    if plan.pp == 1:
        return (m - 1) / m
    warm = (plan.pp - 1) + (plan.vp - 1) * plan.pp
    return max(0.0, 1.0 - warm / (m * plan.vp))


def ep_exposed_s(
    ep: EPComm,
    attention_f_s: float,
    attention_b_s: float,
    experts_f_s: float,
    experts_b_s: float,
    steady: float,
    sm_fraction: float,
) -> float:
    """Exposed dispatch/combine time of a MoE layer pair under Megatron's 1F1B EP overlap
    (``--overlap-moe-expert-parallel-comm``), one forward and one backward pass.

    The merged forward-backward schedule (megatron/core/models/gpt/fine_grained_callables.py,
    combined_1f1b) pairs each communication of one micro-batch with a compute of the other:
    backward combine || forward attention, forward dispatch || backward experts, backward dispatch
    || forward experts, forward combine || backward attention. Exposed = steady x sum max(0,
    comm_i - eta min(comm_i, compute_j))
    + (1 - steady) x all of it, eta = OVERLAP_EFFICIENCY (steady_fraction: the warm-up and cool-down
    passes have no partner). The hidden part slows the compute beside it: the communication
    kernels hold ``sm_fraction`` of the SMs (DeepSeek-V3 gives 20 of the H800's 132 to them,
    arXiv:2412.19437 Sec. 3.2.2), adding hidden x f / (1 - f). Units: seconds."""
    half_f, half_b = ep.forward_s / 2, ep.backward_s / 2
    pairs = ((half_b, attention_f_s), (half_f, experts_b_s), (half_b, experts_f_s), (half_f, attention_b_s))
    hidden = OVERLAP_EFFICIENCY * sum(min(c, w) for c, w in pairs)
    exposed = ep.forward_s + ep.backward_s - hidden
    slowed = hidden * sm_fraction / (1.0 - sm_fraction)
    return steady * (exposed + slowed) + (1.0 - steady) * (ep.forward_s + ep.backward_s)


def moe_tp_collectives(
    top_k: int, has_shared: bool, plan: Layout, job: Job, routed_width: float = 1.0
) -> float:
    """TP all-gather + reduce-scatter pairs of a MoE layer, in units of the dense MLP's pair
    (n*h bytes): top_k * imbalance * routed_width for the routed copies when etp = tp (none when
    etp = 1), plus one for the shared experts. Zero without TP. ``routed_width``: the routed
    copies' width over h (LatentMoE: latent / hidden; they are gathered after fc1_latent_proj)."""
    if plan.tp == 1:
        return 0.0
    routed = top_k * expert_imbalance(plan, job) * routed_width if plan.expert_tp > 1 else 0.0
    return routed + (1.0 if has_shared else 0.0)


GROUPED_GEMM_STREAMS = 4  # Transformer Engine's multi-stream grouped GEMM (cuBLAS on 4 streams)

# Element-wise work per routed copy and element of d of the quantisation padding under an FP8 /
# FP4 recipe. megatron-core 0.16.1 (and 0.19.2) transformer/moe/experts.py TEGroupedMLP.forward
# pads each local expert's rows to the recipe's alignment before fc1 (Fp8Padding) and unpads
# fc2's output after it (Fp8Unpadding) unless the router already padded the routing map
# (``moe_router_padding_for_quantization``, False by default in transformer_config.py);
# Transformer Engine 2.9 module/fp8_padding.py copies the rows into a new buffer
# (tex.fused_multi_row_padding) unless every expert's count is already a multiple of 16 (32 for
# MXFP8), which random or forced-balanced routing practically never gives. Forward: the pad reads
# and writes d (2 B each), the unpad the same, 8 B; backward the two mirror copies of the
# gradient, 8 B. Entered as 2-byte elements of a forward whose backward the cost model charges
# twice (compute.LayerTime), so forward + backward move the 16 B: (8 + 8) / 3 / 2.
QUANTIZATION_PADDING_ELEMS = (8 + 8) / 3 / 2


def padding_elems(precision: Precision, width: int) -> float:
    """Element-wise elements per routed copy of the quantisation padding: QUANTIZATION_PADDING_ELEMS
    x d under an FP8 / FP4 recipe (the expert GEMMs' inputs quantised: compute.GEMM_INPUT_BYTES),
    none in BF16 / FP16."""
    return QUANTIZATION_PADDING_ELEMS * width if precision in GEMM_INPUT_BYTES else 0.0


def expert_forward(
    experts: Experts, plan: Layout, job: Job, accel: Accelerator, eff: Efficiency
) -> LayerTime:
    """Forward time of the routed experts on the busiest device, one micro-batch.

    Grouped GEMM on the per-expert shape: each of the num_experts/ep local experts runs its
    GEMMs on M = c / local routed copies (c = routed_copies_per_device), at the roofline of that
    shape (compute.gemm_s less its overhead: max(2MNK / (peak * eff), bytes / (HBM * eff_hbm))),
    so few tokens per expert are weight-read bound as DeepGEMM's masked layout shows (815-932
    TFLOPS at 256 rows per group against 1,214-1,346 at 8K, moe_physics.md Sec. 3.4); the
    per-kernel overhead is paid once per GEMM and per GROUPED_GEMM_STREAMS experts beyond the
    first (Transformer Engine's GroupedLinear launches one cuBLAS GEMM per expert over 4 streams,
    so their launch and wave tails overlap 4 at a time). Element-wise (c * (elems + bias) / tp + c * etp / tp
    * padding_elems) * 2 B / (HBM * eff): the permute, activation and unpermute passes, and under
    an FP8 / FP4 recipe the quantisation padding of the rows the device's experts run
    (QUANTIZATION_PADDING_ELEMS). Units: seconds.
    """
    copies = routed_copies_per_device(plan, job, experts.top_k)
    local = max(1, experts.num_experts // plan.ep)
    etp = plan.expert_tp
    per_expert = copies * etp / plan.tp / local  # rows of one local expert's GEMMs
    gemm_s = 0.0
    for g in experts.gemms:
        shape = gemm_shape(g, per_expert, etp)
        gemm_s += local * (gemm_s_of(shape, job.precision, accel, eff) - eff.kernel_overhead_s)
    launches = len(experts.gemms) * (1.0 + (local - 1) / GROUPED_GEMM_STREAMS)
    gemm_s += eff.kernel_overhead_s * launches
    # the padding copies the rows a device's experts run: c * etp / tp of width d (fc1's input)
    padded = per_expert * local * padding_elems(job.precision, experts.gemms[0].in_dim)
    elementwise_s = (
        (copies * (experts.mem_bound_elems + experts.bias_pass_elems) / plan.tp + padded)
        * ACTIVATION_BYTES
        / (accel.hbm_bytes_per_s * eff.hbm)
    )
    return LayerTime(gemm_s, 0.0, elementwise_s)


def expert_stored_bytes(experts: Experts, plan: Layout, job: Job) -> float:
    """Activations the routed experts keep for backward on a device, one micro-batch.

    Formula: c' * (gathered + tp_elems/etp + kept/etp) * 2 B, c' = c * etp/tp the copies the
    device runs (c = n * top_k routed copies at the mean load; etp = tp: the fc1 input is stored
    as all-gathered over TP;
    etp = 1: each rank keeps its own c/tp whole copies); GEMM inputs take 1 B under FP8. kept =
    ``routed_output_kept_elems``: the routed output (sp_elems) where the probabilities multiply
    it at the combine, none where they are applied in the activation.
    """
    etp = plan.expert_tp
    # the mean routed load, not the busiest rank's: which rank is busiest changes from layer to
    # layer, so what one rank stores over its layers averages out (a Qwen3-30B-A3B alltoall run
    # measured within 1% of its HybridEP twin, memory_runs_calibration.csv, where the busiest
    # load on every layer over-predicted it by 26%)
    copies = tokens_per_device(plan, job) * experts.top_k * etp / plan.tp
    kept = routed_output_kept_elems(experts, job)
    elems = experts.act_gathered_elems + experts.act_tp_elems / etp + kept / etp
    stored = copies * elems * ACTIVATION_BYTES
    if job.precision in GEMM_INPUT_BYTES:
        gemm_inputs = experts.act_gathered_gemm_elems + experts.act_tp_gemm_elems / etp
        stored -= copies * gemm_inputs * (ACTIVATION_BYTES - gemm_input_bytes(job.precision))
    return stored


def routed_output_kept_elems(experts: Experts, job: Job) -> float:
    """Elements per routed copy the combine keeps for its backward: the expert output
    (``experts.act_sp_elems``, d) where the router's probabilities multiply it at the combine
    (torchtitan 0.3.0 models/common/token_dispatcher.py ``routed_output * topk_scores``; the
    product's gradient with respect to the scores needs the output), 0 where they are applied
    inside the activation (megatron-core 0.19.2 transformer/moe/experts.py: the weighted SwiGLU
    keeps its input, which the activation keeps anyway, and the probabilities; the dispatcher's
    unpermute takes no probabilities, a permutation whose backward keeps nothing)."""
    return experts.act_sp_elems if job.moe_probs_applied is MoEProbs.COMBINE else 0.0
