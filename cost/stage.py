"""Per-stage cost terms of a plan: the numbers both ``evaluate`` and the solver combine.

Everything here is per device and per micro-batch unless the name says per step. A plan's layout
(degrees, micro-batch, ZeRO, SP, order) fixes the cost of one transformer block under each
recompute mode; a stage's time and memory are then affine in its layer count, which is what lets
the solver choose uneven layer splits and per-stage recompute without re-deriving any formula.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from paraplan.cost.comm import group_span
from paraplan.cost.compute import LayerTime, layer_forward
from paraplan.cost.cp import cp_layer_comm
from paraplan.cost.dp import (
    OPTIMIZER_STEP_BYTES_PER_PARAM,
    grad_sync_s,
    micro_batch_reduce_s,
    shard_degree,
    zero3_gather_s,
)
from paraplan.cost.plan import Axis, Job, Plan, Recompute
from paraplan.cost.pp import p2p_per_micro_batch_s
from paraplan.cost.recompute import block_input_bytes, recompute_forward_s, stored_activation_bytes
from paraplan.cost.tp import tp_block_comm
from paraplan.graph import LayerGraph, LayerKind
from paraplan.hardware import Cluster, efficiency

__all__ = ["Affine", "BlockCost", "StageTerms", "stage_terms", "compute_floor_s"]

LOGITS_BYTES_PER_ELEMENT = 6  # bf16 logits + fp32 softmax for the fused cross-entropy


@dataclass(frozen=True, slots=True)
class Affine:
    """A quantity of one stage as fixed + per-layer parts: value(layers) = fixed + layers * per_layer."""

    fixed: float
    per_layer: float

    def at(self, layers: int) -> float:
        return self.fixed + layers * self.per_layer


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

    def _ends(self, stage: int, first: float, last: float) -> float:
        return (first if stage == 0 else 0.0) + (last if stage == self.plan.pp - 1 else 0.0)

    def stage_time(self, stage: int, recompute: Recompute) -> Affine:
        """Forward + backward of one micro-batch on ``stage``, exposed per-micro-batch comm included.

        Formula: layers * (block compute + block comm) + p2p + embedding / head on the ends."""
        ends = self._ends(stage, self.first.compute_s + self.first.comm_s,
                          self.last.compute_s + self.last.comm_s)
        return Affine(self.p2p_s + ends, self.block[recompute].time_s)

    def stage_compute(self, stage: int, recompute: Recompute) -> Affine:
        ends = self._ends(stage, self.first.compute_s, self.last.compute_s)
        return Affine(ends, self.block[recompute].compute_s)

    def stage_backward(self, stage: int, recompute: Recompute) -> Affine:
        ends = self._ends(stage, self.first.backward_s, self.last.backward_s)
        return Affine(ends, self.block[recompute].backward_s)

    @cached_property
    def _sync_per_param(self) -> Affine:
        """grad_sync_s is alpha-beta: latency + bytes / bandwidth, affine in the parameters."""
        none = grad_sync_s(0.0, self.plan, self.job, self.cluster)
        block = grad_sync_s(self.block_params, self.plan, self.job, self.cluster)
        per_param = (block - none) / self.block_params if self.block_params else 0.0
        return Affine(none, per_param)

    def dp_sync(self, stage: int) -> Affine:
        """Once-per-step gradient sync of the stage's parameters (ZeRO 0-2): alpha-beta, so
        affine in the parameter count and hence in the layers."""
        sync = self._sync_per_param
        return Affine(sync.at(self.stage_params(stage, 0)), sync.per_layer * self.block_params)

    def dp_exposed(self, stage: int, recompute: Recompute) -> Affine:
        """sync - window, where the window is the stage's last backward when overlap is on;
        the exposed time is max(0, this)."""
        sync = self.dp_sync(stage)
        if not self.job.overlap_dp_comm:
            return sync
        window = self.stage_backward(stage, recompute)
        return Affine(sync.fixed - window.fixed, sync.per_layer - window.per_layer)

    def optimizer(self, stage: int) -> Affine:
        """Adam step, HBM-bound: local params * 30 B / (HBM * eff); state sharded from ZeRO-1."""
        accel = self.cluster.accelerator
        scale = OPTIMIZER_STEP_BYTES_PER_PARAM / (accel.hbm_bytes_per_s
                                                  * efficiency(accel.generation).hbm)
        if self.plan.zero >= 1:
            scale /= shard_degree(self.plan)
        return Affine(self.stage_params(stage, 0) * scale, self.block_params * scale)

    def stage_time_s(self, stage: int, layers: int, recompute: Recompute) -> float:
        return self.stage_time(stage, recompute).at(layers)

    def stage_compute_s(self, stage: int, layers: int, recompute: Recompute) -> float:
        return self.stage_compute(stage, recompute).at(layers)

    def stage_backward_s(self, stage: int, layers: int, recompute: Recompute) -> float:
        return self.stage_backward(stage, recompute).at(layers)

    def dp_sync_s(self, stage: int, layers: int) -> float:
        return self.dp_sync(stage).at(layers)

    def dp_exposed_s(self, stage: int, layers: int, recompute: Recompute) -> float:
        return max(0.0, self.dp_exposed(stage, recompute).at(layers))

    def optimizer_s(self, stage: int, layers: int) -> float:
        return self.optimizer(stage).at(layers)

    @cached_property
    def capacity_bytes(self) -> float:
        return self.cluster.memory_capacity_bytes


def _block_costs(graph: LayerGraph, plan: Plan, job: Job, cluster: Cluster,
                 block_params: float) -> dict[Recompute, BlockCost]:
    """One block's cost under each recompute mode (forward times computed once)."""
    accel = cluster.accelerator
    eff = efficiency(accel.generation)
    spec = graph.spec
    layers = graph.block_layers(0)
    times: list[LayerTime] = [layer_forward(ly, plan, job, accel, eff) for ly in layers]
    fwd = sum(t.total_s for t in times)
    bwd = sum(t.backward_s() for t in times)
    tp = tp_block_comm(spec.hidden, plan, job, cluster)
    attn_time = next(t for t, ly in zip(times, layers, strict=True)
                     if ly.kind is LayerKind.ATTENTION)
    cp = cp_layer_comm(spec.kv_dim, attn_time, plan, job, cluster)
    gather = zero3_gather_s(block_params, plan, cluster)
    reduce = micro_batch_reduce_s(block_params, plan, job, cluster)
    stored_none = sum(stored_activation_bytes(ly, plan, job, Recompute.NONE) for ly in layers)
    out: dict[Recompute, BlockCost] = {}
    for recompute in Recompute:
        rec = sum(recompute_forward_s(t, recompute) for t in times)
        is_full = recompute is Recompute.FULL
        tp_s = tp.forward_s + tp.backward_s + (tp.forward_s if is_full else 0.0)
        cp_s = cp.exposed_forward_s * (2 if is_full else 1) + cp.exposed_backward_s
        zero_s = max(0.0, gather - fwd) + max(0.0, gather + reduce - (bwd + rec))
        if is_full:
            stored, working = block_input_bytes(spec.hidden, plan, job), stored_none
        elif recompute is Recompute.NONE:
            stored, working = stored_none, 0.0
        else:
            stored = sum(stored_activation_bytes(ly, plan, job, recompute) for ly in layers)
            working = 0.0
        out[recompute] = BlockCost(
            forward_s=fwd, backward_s=bwd + rec, compute_s=fwd + bwd + rec,
            comm_s=tp_s + cp_s + zero_s, activation_bytes=stored, working_bytes=working,
        )
    return out


def _end_cost(graph: LayerGraph, names: tuple[str, ...], plan: Plan, job: Job,
              cluster: Cluster) -> EndCost:
    accel = cluster.accelerator
    eff = efficiency(accel.generation)
    layers = [graph.layer(n) for n in names]
    times = [layer_forward(ly, plan, job, accel, eff) for ly in layers]
    params = sum(ly.params for ly in layers) / plan.tp
    fwd = sum(t.total_s for t in times)
    bwd = sum(t.backward_s() for t in times)
    gather = zero3_gather_s(params, plan, cluster)
    comm = 2 * gather + micro_batch_reduce_s(params, plan, job, cluster)  # not overlapped at the ends
    act = 0.0
    if "lm_head" in names:
        n = plan.micro_batch * job.seq_len / plan.cp
        act = n * graph.spec.vocab / plan.tp * LOGITS_BYTES_PER_ELEMENT
    return EndCost(compute_s=fwd + bwd, comm_s=comm, backward_s=bwd, params=params,
                   activation_bytes=act)


def _shared_key(plan: Plan, cluster: Cluster) -> tuple:
    """What block and end costs depend on: tp, cp, micro-batch, SP, the ZeRO class and the tiers
    the TP, CP and (for ZeRO-2/3 traffic) DP x CP groups span."""
    zero_class = plan.zero if plan.zero >= 2 else 0
    dp_span = group_span(cluster, plan, Axis.DP, Axis.CP).fan_in if zero_class else None
    return (plan.tp, plan.cp, plan.micro_batch, plan.sequence_parallel, zero_class,
            group_span(cluster, plan, Axis.TP).fan_in, group_span(cluster, plan, Axis.CP).fan_in,
            dp_span)


def stage_terms(graph: LayerGraph, plan: Plan, job: Job, cluster: Cluster,
                shared: dict | None = None) -> StageTerms:
    """All per-stage cost terms of the plan's layout (recompute and layer split left open).

    ``shared``: a dict the caller keeps across plans of one graph, job and cluster; block and end
    costs are computed once per distinct ``_shared_key`` (a solve evaluates thousands of layouts
    that differ only in pp, vp, dp or the placement of other axes)."""
    key = _shared_key(plan, cluster) if shared is not None else None
    if shared is not None and key in shared:
        block, block_params, first, last = shared[key]
    else:
        block_params = sum(ly.params for ly in graph.block_layers(0)) / plan.tp
        block = _block_costs(graph, plan, job, cluster, block_params)
        first = _end_cost(graph, ("embedding",), plan, job, cluster)
        last = _end_cost(graph, ("final_norm", "lm_head"), plan, job, cluster)
        if shared is not None:
            shared[key] = (block, block_params, first, last)
    if graph.spec.tied_embeddings and plan.pp > 1:
        # the last stage keeps its own copy of the tied embedding for the LM head
        last = replace(last, params=last.params + first.params)
    return StageTerms(
        plan=plan, job=job, cluster=cluster,
        num_micro_batches=plan.num_micro_batches(job),
        block=block,
        block_params=block_params,
        first=first, last=last,
        p2p_s=p2p_per_micro_batch_s(graph.spec.hidden, plan, job, cluster),
    )


def compute_floor_s(graph: LayerGraph, plan: Plan, job: Job, cluster: Cluster) -> float:
    """Least compute one micro-batch needs summed over all stages: every block forward + backward
    without recompute, plus the embedding and LM head. Depends on tp, cp, micro_batch, SP only.
    Units: seconds."""
    accel = cluster.accelerator
    eff = efficiency(accel.generation)
    block = sum(layer_forward(ly, plan, job, accel, eff).forward_backward_s
                for ly in graph.block_layers(0))
    ends = sum(layer_forward(graph.layer(n), plan, job, accel, eff).forward_backward_s
               for n in ("embedding", "final_norm", "lm_head"))
    return graph.spec.num_layers * block + ends
