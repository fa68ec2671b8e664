"""Data parallel and ZeRO: model-state bytes per device and gradient/parameter traffic.

Mixed-precision Adam keeps, per parameter, 2 B bf16 weights, 4 B fp32 gradients (Megatron's
fp32 main-grad accumulation) and 12 B optimizer state (fp32 master, momentum, variance: ZeRO's
K = 12, Rajbhandari et al. 2020, arXiv:1910.02054 Sec. 3.1). ZeRO-1 shards the optimizer state
over the data-parallel group, ZeRO-2 also the gradients, ZeRO-3 (FSDP) also the weights. Context-
parallel ranks hold the same weights, so (as Megatron-Core does) gradients are reduced and state is
sharded over dp x cp.
Routed-expert weights live on the expert-data-parallel group instead (dp*cp/ep ranks, see ep.py):
the same formulas with that group (``expert=True``).
Traffic: ZeRO-0 all-reduces fp32 gradients once per step; ZeRO-1 reduce-scatters them once per step
and all-gathers the updated bf16 weights; ZeRO-2 (DeepSpeed) reduce-scatters every micro-batch's
gradients into the owner's shard (overlapped with backward) and all-gathers weights once per step;
ZeRO-3 all-gathers weights in forward and again in backward and reduce-scatters gradients, every
micro-batch (Rajbhandari et al. 2020 Sec. 5; PyTorch FSDP).
"""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.cost.comm import GroupSpan, allgather_s, allreduce_s, group_span, reduce_scatter_s
from paraplan.cost.ep import expert_dp_span, expert_shard_degree
from paraplan.cost.plan import Axis, Job, Layout, OptimizerMoments
from paraplan.hardware import Cluster

__all__ = [
    "WEIGHT_BYTES",
    "GRAD_BYTES",
    "OPTIMIZER_BYTES",
    "OPTIMIZER_STEP_BYTES_PER_PARAM",
    "moment_bytes",
    "StateBytes",
    "state_bytes",
    "shard_degree",
    "grad_bytes",
    "grad_sync_s",
    "optimizer_step_bytes_per_param",
    "zero3_gather_s",
    "micro_batch_reduce_s",
    "reduces_across_micro_batches",
]

WEIGHT_BYTES = 2
GRAD_BYTES = 4  # fp32 main grads; 2 when the job keeps gradients in bf16 (job.fp32_grads=False)
OPTIMIZER_BYTES = 12
FSDP_SHARD_WEIGHT_BYTES = 4  # ZeRO-3 with fp32 grads: the fp32 shard is the master (state_bytes)
FSDP_MOMENT_BYTES = 8  # Adam's fp32 momentum + variance
OPTIMIZER_STEP_BYTES_PER_PARAM = 30  # Adam reads grad, master, m, v (16 B), writes master, m, v, bf16 (14 B)


@dataclass(frozen=True, slots=True)
class StateBytes:
    weights: float
    grads: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer


def grad_bytes(job: Job) -> int:
    """Bytes per gradient element: 4 (fp32 accumulation) or 2 (bf16); 0 for frozen base weights
    (``job.frozen_base``, LoRA: no gradient, so nothing to store or reduce)."""
    if job.frozen_base:
        return 0
    return GRAD_BYTES if job.fp32_grads else WEIGHT_BYTES


def moment_bytes(job: Job) -> float:
    """Bytes of Adam's momentum + variance per parameter: 8 in fp32, 4 with
    ``job.optimizer_moments: bf16`` (Megatron's precision-aware optimizer: exp_avg_dtype and
    exp_avg_sq_dtype torch.bfloat16; megatron-core ``OptimizerConfig``; Megatron-Bridge 0.3.1
    recipes/moonlight/moonlight_16b.py sets both). Units: bytes per parameter."""
    return FSDP_MOMENT_BYTES / 2 if job.optimizer_moments is OptimizerMoments.BF16 else FSDP_MOMENT_BYTES


def optimizer_step_bytes_per_param(job: Job) -> float:
    """HBM bytes the optimizer step moves per local parameter: OPTIMIZER_STEP_BYTES_PER_PARAM, or 0
    for frozen base weights (``job.frozen_base``, LoRA: no step for them). For the stage
    composition's Adam term (cost/stage.py ``optimizer``)."""
    return 0.0 if job.frozen_base else float(OPTIMIZER_STEP_BYTES_PER_PARAM)


def state_bytes(
    params: float,
    zero: int,
    dp: int,
    grad_bytes_per_param: int = GRAD_BYTES,
    moments_bytes_per_param: float = FSDP_MOMENT_BYTES,
) -> StateBytes:
    """Formula: params * (2/(d if z>=3) + g/(d if z>=2) + (4 + m)/(d if z>=1)) bytes, d = shard
    group, m = Adam's two moments (8 B in fp32; 4 B in bf16, ``moment_bytes``); ZeRO-3 with fp32
    gradients (g = 4): params * (4 + 4 + m) / d. Frozen weights (g = 0, LoRA): params * 2 /
    (d if z>=3), no gradient or optimizer state.

    Fully sharded data parallelism keeps one sharded copy of each parameter: PyTorch FSDP/FSDP2
    mixed precision stores the shard in fp32 (it is the optimizer's master weight) and all-gathers
    a bf16 copy per layer (PyTorch docs, ``torch.distributed.fsdp.MixedPrecisionPolicy``:
    ``param_dtype`` is the unsharded compute dtype; the sharded parameter keeps its fp32 dtype),
    so fp32 gradients (``reduce_dtype`` fp32) leave Adam only its two moments (8 B): 16 B/param,
    the same total as DeepSpeed ZeRO-3's 2 + 2 + 12 (Rajbhandari et al. 2020, Sec. 3.1 / Fig. 1).
    """
    if grad_bytes_per_param == 0:  # frozen weights (LoRA): the bf16 copy only, sharded under ZeRO-3
        return StateBytes(weights=params * WEIGHT_BYTES / (dp if zero >= 3 else 1), grads=0.0, optimizer=0.0)
    if zero >= 3 and grad_bytes_per_param == GRAD_BYTES:
        return StateBytes(
            weights=params * FSDP_SHARD_WEIGHT_BYTES / dp,
            grads=params * grad_bytes_per_param / dp,
            optimizer=params * moments_bytes_per_param / dp,
        )
    master = OPTIMIZER_BYTES - FSDP_MOMENT_BYTES  # the fp32 master copy
    return StateBytes(
        weights=params * WEIGHT_BYTES / (dp if zero >= 3 else 1),
        grads=params * grad_bytes_per_param / (dp if zero >= 2 else 1),
        optimizer=params * (master + moments_bytes_per_param) / (dp if zero >= 1 else 1),
    )


def reduces_across_micro_batches(plan: Layout) -> bool:
    """ZeRO-2/3 under pipeline parallelism: a micro-batch's gradient reduce-scatter, issued as its
    backward runs, goes on beside the stage's next forward, which is another micro-batch's and
    does not wait for it (the 1F1B steady state alternates them). Llama 3 runs FSDP (weights not
    resharded after forward: ZeRO-2-like) under interleaved 1F1B with data parallelism outermost
    because it "can tolerate longer network latency by asynchronously prefetching sharded model
    weights and reducing gradients", reduce-scattering FP32 gradients (arXiv 2407.21783 Sec.
    3.3.2; cited from memory), and the gradients stay sharded (its 405B plan fits 80 GB only so).
    Without pipelining a framework waits for the reduce-scatter at the end of each backward
    (FSDP's post-backward callback, DeepSpeed's reduce epilogue), so the window stays the
    backward. Assumes: torchtitan's pipelining, which instead defers the reduce-scatter to the
    last micro-batch (torch 2.13 pipelining ``backward_maybe_with_nosync``, ``perform_reduce_grad``)
    and accumulates unsharded gradients, is not modelled apart."""
    return plan.pp > 1 and plan.zero >= 2


def shard_degree(plan: Layout, expert: bool = False) -> int:
    """Ranks that hold identical weights and share ZeRO shards: dp x cp (dp*cp/ep for experts)."""
    return expert_shard_degree(plan) if expert else plan.dp * plan.cp


def _span(plan: Layout, cluster: Cluster, expert: bool) -> GroupSpan:
    return expert_dp_span(cluster, plan) if expert else group_span(cluster, plan, Axis.DP, Axis.CP)


def grad_sync_s(
    params: float,
    plan: Layout,
    job: Job,
    cluster: Cluster,
    expert: bool = False,
    span: GroupSpan | None = None,
) -> float:
    """Once-per-step sync: ZeRO-0 AR(g B/param); ZeRO-1 RS(g B) + AG(2 B); ZeRO-2 AG(2 B).
    ``span``: the group's span when the caller has it (else computed)."""
    if shard_degree(plan, expert) == 1 or plan.zero >= 3 or job.frozen_base:
        return 0.0
    span = span or _span(plan, cluster, expert)
    if plan.zero == 0:
        return allreduce_s(span, params * grad_bytes(job))
    gather = allgather_s(span, params * WEIGHT_BYTES)
    if plan.zero == 2:
        return gather
    return reduce_scatter_s(span, params * grad_bytes(job)) + gather


def zero3_gather_s(
    params: float, plan: Layout, cluster: Cluster, expert: bool = False, span: GroupSpan | None = None
) -> float:
    """One all-gather of ``params`` bf16 weights over dp (done in forward, and again in backward).
    ``span``: the group's span when the caller has it (else computed)."""
    if shard_degree(plan, expert) == 1 or plan.zero < 3 or not params:
        return 0.0
    return allgather_s(span or _span(plan, cluster, expert), params * WEIGHT_BYTES)


def micro_batch_reduce_s(
    params: float,
    plan: Layout,
    job: Job,
    cluster: Cluster,
    expert: bool = False,
    span: GroupSpan | None = None,
) -> float:
    """Per micro-batch reduce-scatter of ``params`` gradients over dp x cp under ZeRO-2 and 3."""
    if shard_degree(plan, expert) == 1 or plan.zero < 2 or not params or job.frozen_base:
        return 0.0
    return reduce_scatter_s(span or _span(plan, cluster, expert), params * grad_bytes(job))
