"""Per-stage cost terms of a plan: the numbers both ``evaluate`` and the solver combine.

Everything here is per device and per micro-batch unless the name says per step. A plan's layout
(degrees, micro-batch, ZeRO, SP, order) fixes the cost of one transformer block under each
recompute mode; a stage's time and memory are then affine in its layer count, which is what lets
the solver choose uneven layer splits and per-stage recompute without re-deriving any formula.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from paraplan.cost.compute import LayerTime, layer_forward
from paraplan.cost.cp import cp_layer_comm
from paraplan.cost.dp import (
    OPTIMIZER_STEP_BYTES_PER_PARAM,
    shard_degree,
    grad_sync_s,
    zero3_gather_s,
    zero3_reduce_s,
)
from paraplan.cost.plan import Job, Plan, Recompute
from paraplan.cost.pp import p2p_per_micro_batch_s
from paraplan.cost.recompute import block_input_bytes, recompute_forward_s, stored_activation_bytes
from paraplan.cost.tp import tp_block_comm
from paraplan.graph import LayerGraph, LayerKind
from paraplan.hardware import Cluster, efficiency

__all__ = ["BlockCost", "StageTerms", "stage_terms"]

LOGITS_BYTES_PER_ELEMENT = 6  # bf16 logits + fp32 softmax for the fused cross-entropy


@dataclass(frozen=True, slots=True)
class BlockCost:
    """One transformer block, one micro-batch, one recompute mode. Units: seconds, bytes."""

    forward_s: float
    backward_s: float  # includes the recompute forward
    compute_s: float  # forward + backward + recompute, compute only
    comm_s: float  # exposed communication: TP, CP, ZeRO-3 gathers
    activation_bytes: float  # kept per in-flight micro-batch
    working_bytes: float  # transient peak while this block's backward runs

    @property
    def time_s(self) -> float:
        return self.compute_s + self.comm_s


@dataclass(frozen=True, slots=True)
class EndCost:
    """The embedding (first stage) or final norm + LM head + loss (last stage)."""

    compute_s: float
    comm_s: float
    backward_s: float
    params: float  # per device
    activation_bytes: float  # not multiplied by in-flight micro-batches


@dataclass(frozen=True)
class StageTerms:
    plan: Plan
    job: Job
    cluster: Cluster
    num_micro_batches: int
    block: dict[Recompute, BlockCost]
    block_params: float  # per device (sharded by tp)
    first: EndCost
    last: EndCost
    p2p_s: float

    def stage_params(self, stage: int, layers: int) -> float:
        """Parameters one device of ``stage`` holds (the tied embedding is replicated on the last)."""
        params = layers * self.block_params
        if stage == 0:
            params += self.first.params
        if stage == self.plan.pp - 1:
            params += self.last.params
        return params

    def stage_time_s(self, stage: int, layers: int, recompute: Recompute) -> float:
        """Forward + backward of one micro-batch on ``stage``, exposed per-micro-batch comm included."""
        t = layers * self.block[recompute].time_s + self.p2p_s
        if stage == 0:
            t += self.first.compute_s + self.first.comm_s
        if stage == self.plan.pp - 1:
            t += self.last.compute_s + self.last.comm_s
        return t

    def stage_compute_s(self, stage: int, layers: int, recompute: Recompute) -> float:
        t = layers * self.block[recompute].compute_s
        if stage == 0:
            t += self.first.compute_s
        if stage == self.plan.pp - 1:
            t += self.last.compute_s
        return t

    def stage_backward_s(self, stage: int, layers: int, recompute: Recompute) -> float:
        t = layers * self.block[recompute].backward_s
        if stage == 0:
            t += self.first.backward_s
        if stage == self.plan.pp - 1:
            t += self.last.backward_s
        return t

    def dp_sync_s(self, stage: int, layers: int) -> float:
        """Once-per-step gradient sync of the stage's parameters (ZeRO 0-2)."""
        return grad_sync_s(self.stage_params(stage, layers), self.plan, self.job, self.cluster)

    def dp_exposed_s(self, stage: int, layers: int, recompute: Recompute) -> float:
        """Sync not hidden behind the stage's last backward: max(0, sync - backward) if overlapped."""
        sync = self.dp_sync_s(stage, layers)
        window = self.stage_backward_s(stage, layers, recompute) if self.job.overlap_dp_comm else 0.0
        return max(0.0, sync - window)

    def optimizer_s(self, stage: int, layers: int) -> float:
        """Adam step, HBM-bound: local params * 30 B / (HBM * eff); state sharded from ZeRO-1."""
        params = self.stage_params(stage, layers)
        if self.plan.zero >= 1:
            params /= shard_degree(self.plan)
        accel = self.cluster.accelerator
        eff = efficiency(accel.generation)
        return params * OPTIMIZER_STEP_BYTES_PER_PARAM / (accel.hbm_bytes_per_s * eff.hbm)

    @cached_property
    def capacity_bytes(self) -> float:
        return self.cluster.memory_capacity_bytes


def _block_cost(graph: LayerGraph, plan: Plan, job: Job, cluster: Cluster,
                recompute: Recompute, block_params: float) -> BlockCost:
    accel = cluster.accelerator
    eff = efficiency(accel.generation)
    spec = graph.spec
    layers = graph.block_layers(0)
    times: list[LayerTime] = [layer_forward(ly, plan, job, accel, eff) for ly in layers]
    fwd = sum(t.total_s for t in times)
    bwd = sum(t.backward_s() for t in times)
    rec = sum(recompute_forward_s(t, recompute) for t in times)
    tp = tp_block_comm(spec.hidden, plan, job, cluster)
    tp_s = tp.forward_s + tp.backward_s + (tp.forward_s if recompute is Recompute.FULL else 0.0)
    attn_time = next(t for t, ly in zip(times, layers, strict=True)
                     if ly.kind is LayerKind.ATTENTION)
    cp = cp_layer_comm(spec.kv_dim, attn_time, plan, job, cluster)
    cp_s = cp.exposed_forward_s * (2 if recompute is Recompute.FULL else 1) + cp.exposed_backward_s
    gather = zero3_gather_s(block_params, plan, cluster)
    reduce = zero3_reduce_s(block_params, plan, job, cluster)
    z3_s = max(0.0, gather - fwd) + max(0.0, gather + reduce - (bwd + rec))
    stored = sum(stored_activation_bytes(ly, plan, job, recompute) for ly in layers)
    if recompute is Recompute.FULL:
        stored = block_input_bytes(spec.hidden, plan, job)
        working = sum(stored_activation_bytes(ly, plan, job, Recompute.NONE) for ly in layers)
    else:
        working = 0.0
    return BlockCost(
        forward_s=fwd, backward_s=bwd + rec, compute_s=fwd + bwd + rec,
        comm_s=tp_s + cp_s + z3_s, activation_bytes=stored, working_bytes=working,
    )


def _end_cost(graph: LayerGraph, names: tuple[str, ...], plan: Plan, job: Job,
              cluster: Cluster) -> EndCost:
    accel = cluster.accelerator
    eff = efficiency(accel.generation)
    layers = [graph.graph.nodes[n]["layer"] for n in names]
    times = [layer_forward(ly, plan, job, accel, eff) for ly in layers]
    params = sum(ly.params for ly in layers) / plan.tp
    fwd = sum(t.total_s for t in times)
    bwd = sum(t.backward_s() for t in times)
    gather = zero3_gather_s(params, plan, cluster)
    comm = 2 * gather + zero3_reduce_s(params, plan, job, cluster)  # not overlapped at the ends
    act = 0.0
    if "lm_head" in names:
        n = plan.micro_batch * job.seq_len / plan.cp
        act = n * graph.spec.vocab / plan.tp * LOGITS_BYTES_PER_ELEMENT
    return EndCost(compute_s=fwd + bwd, comm_s=comm, backward_s=bwd, params=params,
                   activation_bytes=act)


def stage_terms(graph: LayerGraph, plan: Plan, job: Job, cluster: Cluster) -> StageTerms:
    """All per-stage cost terms of the plan's layout (recompute and layer split left open)."""
    block_params = sum(ly.params for ly in graph.block_layers(0)) / plan.tp
    first = _end_cost(graph, ("embedding",), plan, job, cluster)
    last = _end_cost(graph, ("final_norm", "lm_head"), plan, job, cluster)
    if graph.spec.tied_embeddings and plan.pp > 1:
        # the last stage keeps its own copy of the tied embedding for the LM head
        last = replace(last, params=last.params + first.params)
    return StageTerms(
        plan=plan, job=job, cluster=cluster,
        num_micro_batches=plan.num_micro_batches(job),
        block={r: _block_cost(graph, plan, job, cluster, r, block_params) for r in Recompute},
        block_params=block_params,
        first=first, last=last,
        p2p_s=p2p_per_micro_batch_s(graph.spec.hidden, plan, job, cluster),
    )
