"""Per-stage cost terms of a plan: the numbers both ``evaluate`` and the solver combine.

Everything here is per device and per micro-batch unless the name says per step. A plan's layout
(degrees, micro-batch, ZeRO, SP, order) fixes the cost of one transformer block under each
recompute mode; a stage's time and memory are then affine in its layer count, which is what lets
the solver choose uneven layer splits and per-stage recompute without re-deriving any formula.

Mixture-of-experts models: the block is the MoE block. Dense layers among MoE ones (DeepSeek-V3's
first three) are booked as a correction on the first stage's fixed part, ``dense_credit`` = g x
(dense block - MoE block) in time, activations and (dense and expert) parameters, where g is the
number of dense layers the first stage is guaranteed to hold: all of them when pp = 1, else
min(first_dense_layers, 1) (stage 0 always holds layer 0; how many more is the solver's choice).
The rest are costed as MoE blocks: conservative (a dense layer is cheaper than a MoE layer in
time and memory), so a plan never needs more than the model says. With moe_layer_freq > 1 the
interleaved dense layers are likewise costed as MoE unless pp = 1.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from itertools import permutations
from typing import Any

from paraplan.cost.comm import GroupSpan, group_span, packed_span
from paraplan.cost.compute import LayerTime, layer_forward
from paraplan.cost.cp import cp_layer_comm
from paraplan.cost.dp import (
    OPTIMIZER_STEP_BYTES_PER_PARAM,
    grad_sync_s,
    micro_batch_reduce_s,
    shard_degree,
    zero3_gather_s,
)
from paraplan.cost.ep import (
    EPComm,
    ep_layer_comm,
    ep_span,
    expert_dp_span,
    expert_forward,
    expert_shard_degree,
    moe_layer_overhead_s,
    moe_tp_collectives,
)
from paraplan.cost.plan import DEFAULT_ORDER, Axis, Job, Plan, Recompute, plan_key
from paraplan.cost.pp import p2p_per_micro_batch_s, stage_p2p_s
from paraplan.cost.recompute import block_input_bytes, recompute_forward_s, stored_activation_bytes
from paraplan.cost.torus import collective_matmul_exposed_s, torus_floor
from paraplan.cost.tp import tp_block_comm
from paraplan.graph import Layer, LayerGraph, LayerKind
from paraplan.hardware import Accelerator, Cluster, Efficiency, Tier

__all__ = [
    "Affine",
    "BlockCost",
    "StageTerms",
    "stage_terms",
    "compute_floor_s",
    "FLOOR_IGNORES",
    "ends_floor_s",
    "layer_time",
    "block_params_per_device",
    "dense_layers_credited",
    "inner_tiers_fastest",
    "zero_exposed_s",
]

SharedCache = dict[tuple[object, ...], Any]  # per-layout work and sync lines shared across stages

LOGITS_BYTES_PER_ELEMENT = 6  # bf16 logits + fp32 softmax for the fused cross-entropy


@dataclass(frozen=True, slots=True)
class Affine:
    """A quantity of one stage as fixed + per-layer parts: value(layers) = fixed + layers * per_layer."""

    fixed: float
    per_layer: float

    def at(self, layers: float) -> float:
        return self.fixed + layers * self.per_layer

    def __add__(self, other: Affine) -> Affine:
        return Affine(self.fixed + other.fixed, self.per_layer + other.per_layer)


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

    def minus(self, other: BlockCost, times: float = 1.0) -> BlockCost:
        """times x (self - other), field by field (a correction, may be negative)."""
        return BlockCost(
            *(
                times * (getattr(self, f) - getattr(other, f))
                for f in (
                    "forward_s",
                    "backward_s",
                    "compute_s",
                    "comm_s",
                    "activation_bytes",
                    "working_bytes",
                )
            )
        )


ZERO_BLOCK = BlockCost(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


@dataclass(frozen=True, slots=True)
class EndCost:
    """The embedding (first stage) or final norm + LM head + loss (last stage)."""

    compute_s: float
    comm_s: float
    backward_s: float
    params: float  # per device
    activation_bytes: float  # not multiplied by in-flight micro-batches
    expert_params: float = 0.0  # per device (the first stage's dense-layer correction)


@dataclass(frozen=True)
class StageTerms:
    plan: Plan
    job: Job
    cluster: Cluster
    num_micro_batches: int
    block: dict[Recompute, BlockCost]
    block_params: float  # per device, all but routed experts (sharded by tp)
    first: EndCost
    last: EndCost
    p2p_s: float
    block_expert_params: float = 0.0  # per device routed-expert weights (sharded by ep x tp)
    dense_credit: dict[Recompute, BlockCost] | None = None  # stage 0 (module docstring)
    sync_lines: tuple[Affine, Affine] = (Affine(0.0, 0.0), Affine(0.0, 0.0))  # see _sync_lines
    pool_terms: tuple[StageTerms, ...] = ()  # pooled cluster: the terms of each stage's pool
    stage_p2p: tuple[float, ...] = ()  # pooled cluster: each stage's p2p (pp.stage_p2p_s)

    def at(self, stage: int) -> StageTerms:
        """The terms that cost ``stage``: on a pooled cluster those of the pool hosting it (the
        same layout on that pool's devices, tiers and accelerator), else these."""
        return self.pool_terms[stage] if self.pool_terms else self

    def block_at(self, stage: int, recompute: Recompute) -> BlockCost:
        """One block of ``stage`` under ``recompute`` (per-stage on a pooled cluster)."""
        return self.at(stage).block[recompute]

    def p2p_at(self, stage: int) -> float:
        return self.stage_p2p[stage] if self.stage_p2p else self.p2p_s

    def stage_capacity_bytes(self, stage: int) -> float:
        """Device memory of ``stage``'s devices."""
        return self.at(stage).cluster.memory_capacity_bytes

    def stage_params(self, stage: int, layers: int) -> float:
        """Parameters one device of ``stage`` holds (the tied embedding is replicated on the
        last), routed experts excluded (see stage_expert_params)."""
        params = layers * self.block_params
        if stage == 0:
            params += self.first.params
        if stage == self.plan.pp - 1:
            params += self.last.params
        return params

    def stage_expert_params(self, stage: int, layers: int) -> float:
        """Routed-expert parameters one device of ``stage`` holds."""
        return layers * self.block_expert_params + (self.first.expert_params if stage == 0 else 0.0)

    def _ends(self, stage: int, first: float, last: float) -> float:
        return (first if stage == 0 else 0.0) + (last if stage == self.plan.pp - 1 else 0.0)

    def credit(self, stage: int, recompute: Recompute) -> BlockCost:
        """The dense-layer correction of ``stage`` (zero except on stage 0 of such models)."""
        credit = self.at(stage).dense_credit
        if stage or credit is None:
            return ZERO_BLOCK
        return credit[recompute]

    def stage_time(self, stage: int, recompute: Recompute) -> Affine:
        """Forward + backward of one micro-batch on ``stage``, exposed per-micro-batch comm included.

        Formula: layers * (block compute + block comm) + p2p + embedding / head on the ends
        (+ the dense-layer correction on stage 0)."""
        t = self.at(stage)
        ends = self._ends(stage, t.first.compute_s + t.first.comm_s, t.last.compute_s + t.last.comm_s)
        credit = self.credit(stage, recompute).time_s
        return Affine(self.p2p_at(stage) + ends + credit, t.block[recompute].time_s)

    def stage_compute(self, stage: int, recompute: Recompute) -> Affine:
        t = self.at(stage)
        ends = self._ends(stage, t.first.compute_s, t.last.compute_s)
        credit = self.credit(stage, recompute).compute_s
        return Affine(ends + credit, t.block[recompute].compute_s)

    def stage_backward(self, stage: int, recompute: Recompute) -> Affine:
        t = self.at(stage)
        ends = self._ends(stage, t.first.backward_s, t.last.backward_s)
        credit = self.credit(stage, recompute).backward_s
        return Affine(ends + credit, t.block[recompute].backward_s)

    def dp_sync(self, stage: int) -> Affine:
        """Once-per-step gradient sync of the stage's parameters (ZeRO 0-2): alpha-beta, so
        affine in the parameter count and hence in the layers. Routed-expert gradients sync over
        the expert-data-parallel group (ep.py) after the others."""
        sync, esync = self.at(stage).sync_lines
        return Affine(sync.at(self.stage_params(stage, 0)), sync.per_layer * self.block_params) + Affine(
            esync.at(self.stage_expert_params(stage, 0)), esync.per_layer * self.block_expert_params
        )

    def dp_exposed(self, stage: int, recompute: Recompute) -> Affine:
        """sync - window, where the window is the stage's last backward when overlap is on;
        the exposed time is max(0, this)."""
        sync = self.dp_sync(stage)
        if not self.job.overlap_dp_comm:
            return sync
        window = self.stage_backward(stage, recompute)
        return Affine(sync.fixed - window.fixed, sync.per_layer - window.per_layer)

    def optimizer(self, stage: int) -> Affine:
        """Adam step, HBM-bound: local params * 30 B / (HBM * eff); state sharded from ZeRO-1
        (over dp x cp, or dp*cp/ep for routed experts)."""
        cluster = self.at(stage).cluster
        scale = OPTIMIZER_STEP_BYTES_PER_PARAM / (
            cluster.accelerator.hbm_bytes_per_s * cluster.efficiency.hbm
        )
        dense, expert = scale, scale
        if self.plan.zero >= 1:
            dense /= shard_degree(self.plan)
            expert /= shard_degree(self.plan, expert=True)
        return Affine(
            self.stage_params(stage, 0) * dense + self.stage_expert_params(stage, 0) * expert,
            self.block_params * dense + self.block_expert_params * expert,
        )

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


def layer_time(ly: Layer, plan: Plan, job: Job, accel: Accelerator, eff: Efficiency) -> LayerTime:
    """Forward time of a layer, routed experts (ep.expert_forward) included."""
    t = layer_forward(ly, plan, job, accel, eff)
    if ly.experts is None:
        return t
    e = expert_forward(ly.experts, plan, job, accel, eff)
    return LayerTime(t.gemm_s + e.gemm_s, t.attention_s + e.attention_s, t.elementwise_s + e.elementwise_s)


def block_params_per_device(layers: list[Layer], plan: Plan) -> tuple[float, float]:
    """(params, expert params) one device holds of a block: TP-sharded weights / tp plus the
    replicated ones; routed experts / (ep x etp) (plan.expert_tp: etp, or tp when unset)."""
    params = sum(ly.tp_params / plan.tp + ly.replicated_params for ly in layers)
    experts = sum(ly.expert_params for ly in layers) / (plan.ep * plan.expert_tp)
    return params, experts


@dataclass(frozen=True, slots=True)
class _Work:
    """The placement-free part of a block's (or an end's) cost: compute, activations, params.
    Depends on tp, cp, cp_comm (the attention kernels, compute.attention_shape), ep, micro-batch
    and SP only."""

    times: tuple[LayerTime, ...]
    attention: LayerTime | None
    forward_s: float
    backward_s: float
    recompute_s: dict[Recompute, float]
    stored_bytes: dict[Recompute, float]
    working_bytes: float  # FULL recompute's re-materialised block
    params: float
    expert_params: float
    top_k: int  # 0: no routed experts


def _block_work(graph: LayerGraph, index: int, plan: Plan, job: Job, cluster: Cluster) -> _Work:
    accel = cluster.accelerator
    eff = cluster.efficiency
    layers = graph.block_layers(index)
    params, expert_params = block_params_per_device(layers, plan)
    times = tuple(layer_time(ly, plan, job, accel, eff) for ly in layers)
    moe = next((ly.experts for ly in layers if ly.experts), None)
    host = moe_layer_overhead_s(eff) if moe else 0.0  # once per pass: forward, backward, recompute
    stored_none = sum(stored_activation_bytes(ly, plan, job, Recompute.NONE) for ly in layers)
    return _Work(
        times=times,
        attention=next(
            (t for t, ly in zip(times, layers, strict=True) if ly.kind is LayerKind.ATTENTION), None
        ),
        forward_s=sum(t.total_s for t in times) + host,
        backward_s=sum(t.backward_s() for t in times) + host,
        recompute_s={
            r: sum(recompute_forward_s(t, r) for t in times) + (host if r is Recompute.FULL else 0.0)
            for r in Recompute
        },
        stored_bytes={
            Recompute.NONE: stored_none,
            Recompute.SELECTIVE: sum(
                stored_activation_bytes(ly, plan, job, Recompute.SELECTIVE, is_tpu=accel.is_tpu)
                for ly in layers
            ),
            Recompute.FULL: block_input_bytes(graph.spec.hidden, plan, job),
        },
        working_bytes=stored_none,
        params=params,
        expert_params=expert_params,
        top_k=moe.top_k if moe else 0,
    )


@dataclass(frozen=True, slots=True)
class _Spans:
    """The groups a layout's communication runs on (computed once per layout)."""

    tp: GroupSpan
    cp: GroupSpan
    ep: GroupSpan | None  # ep > 1
    dp: GroupSpan | None  # dp x cp, when ZeRO-2/3 moves traffic every micro-batch
    edp: GroupSpan | None  # expert-data-parallel, likewise
    sync: GroupSpan  # dp x cp: the once-per-step gradient sync
    esync: GroupSpan  # expert-data-parallel sync (dp x cp / ep ranks holding the same experts)
    pp: Tier | None  # outermost tier between neighbouring stages (pp > 1)

    @classmethod
    def of(cls, plan: Plan, cluster: Cluster) -> _Spans:
        zero = plan.zero >= 2
        sync = group_span(cluster, plan, Axis.DP, Axis.CP)
        esync = expert_dp_span(cluster, plan)
        return cls(
            tp=group_span(cluster, plan, Axis.TP),
            cp=group_span(cluster, plan, Axis.CP),
            ep=ep_span(cluster, plan) if plan.ep > 1 else None,
            dp=sync if zero else None,
            edp=esync if zero else None,
            sync=sync,
            esync=esync,
            pp=group_span(cluster, plan, Axis.PP).outermost if plan.pp > 1 else None,
        )

    @classmethod
    def torus_floor(cls, plan: Plan, cluster: Cluster) -> _Spans:
        """TPU torus: each group's cost terms at their least over every rank order of the active
        axes and every slice shape (cost/torus.py ``torus_floor``); collectives are sums of those
        terms, so costs on these spans bound every placement's."""
        assert cluster.torus is not None
        active = [a for a in DEFAULT_ORDER if plan.degree(a) > 1]
        idle = tuple(a for a in DEFAULT_ORDER if plan.degree(a) == 1)
        every: list[_Spans] = []
        for shape in cluster.torus.shapes:
            for perm in permutations(active):
                try:
                    every.append(cls.of(replace(plan, order=perm + idle, torus_shape=shape), cluster))
                except ValueError:
                    continue  # an order the expert-parallel split does not allow

        def floor(field: str) -> GroupSpan | None:
            spans = [getattr(s, field) for s in every if getattr(s, field) is not None]
            if not spans:
                return None
            fewest = min(spans, key=lambda s: (s.torus.slices, s.fan_in))
            return replace(fewest, latency_floor=True, torus=torus_floor([s.torus for s in spans]))

        sync, esync = floor("sync"), floor("esync")
        assert sync is not None and esync is not None
        return cls(
            tp=floor("tp") or every[0].tp,
            cp=floor("cp") or every[0].cp,
            ep=floor("ep"),
            dp=floor("dp"),
            edp=floor("edp"),
            sync=sync,
            esync=esync,
            pp=cluster.tiers[0] if plan.pp > 1 else None,
        )

    @classmethod
    def packed(cls, plan: Plan, cluster: Cluster, shared: SharedCache | None = None) -> _Spans:
        """Every group on consecutive ranks, as if each were innermost in the rank order: when
        inner tiers are the fastest (``inner_tiers_fastest``) no placement of the group costs less
        (its members fill the fastest domains first), so costs on these spans bound every order's.
        On a TPU torus: ``torus_floor`` (kept in ``shared`` per degrees; ZeRO-2/3 keep the
        per-micro-batch dp groups, lower stages drop them)."""
        if cluster.torus is not None:
            key = ("torus_floor", plan.tp, plan.cp, plan.dp, plan.pp, plan.ep, plan.etp)
            if shared is None or key not in shared:
                floor = cls.torus_floor(replace(plan, zero=3), cluster)
                if shared is None:
                    return floor if plan.zero >= 2 else replace(floor, dp=None, edp=None)
                shared[key] = floor
            return shared[key] if plan.zero >= 2 else replace(shared[key], dp=None, edp=None)

        def packed(size: int) -> GroupSpan:
            return packed_span(cluster, size)

        zero = plan.zero >= 2
        sync = packed(plan.dp * plan.cp)
        esync = packed(expert_shard_degree(plan))
        return cls(
            tp=packed(plan.tp),
            cp=packed(plan.cp),
            ep=packed(plan.ep) if plan.ep > 1 else None,
            dp=sync if zero else None,
            edp=esync if zero else None,
            sync=sync,
            esync=esync,
            pp=cluster.tiers[0] if plan.pp > 1 else None,
        )

    def key(self) -> tuple[object, ...]:
        """What per-micro-batch block costs depend on."""
        return tuple(
            (s.fan_in, s.latency_floor, s.torus) if s else None
            for s in (self.tp, self.cp, self.ep, self.dp, self.edp)
        )


def zero_exposed_s(
    gather_s: float, reduce_s: float, forward_s: float, backward_s: float, overlap: bool
) -> float:
    """Exposed ZeRO-2/3 traffic of one block, one micro-batch.

    Formula: max(0, gather - forward) + max(0, gather + reduce - backward) when gradient
    communication overlaps backward (job.overlap_dp_comm); else the gradient reduce-scatter is
    exposed whole: max(0, gather - forward) + max(0, gather - backward) + reduce (the parameter
    prefetch still overlaps: DeepSpeed ZeRO-3 ``overlap_comm`` defaults to false, and it governs
    the gradient reduction only; DeepSpeed docs, ZeRO configuration). Units: seconds."""
    if overlap:
        return max(0.0, gather_s - forward_s) + max(0.0, gather_s + reduce_s - backward_s)
    return max(0.0, gather_s - forward_s) + max(0.0, gather_s - backward_s) + reduce_s


def _block_costs(
    work: _Work, graph: LayerGraph, plan: Plan, job: Job, cluster: Cluster, spans: _Spans
) -> dict[Recompute, BlockCost]:
    """A block's cost under each recompute mode: its work plus the communication the plan's
    placement implies (TP, CP, EP, ZeRO-2/3 traffic)."""
    spec = graph.spec
    if not work.top_k:
        tp = tp_block_comm(spec.hidden, plan, job, cluster, span=spans.tp)
        ep = EPComm(0.0, 0.0)
    else:
        has_shared = spec.shared_ffn_hidden > 0
        tp = tp_block_comm(
            spec.hidden,
            plan,
            job,
            cluster,
            moe_tp_collectives(work.top_k, has_shared, plan, job),
            span=spans.tp,
        )
        ep = ep_layer_comm(spec.hidden, work.top_k, plan, job, cluster, span=spans.ep)
    assert work.attention is not None
    cp = cp_layer_comm(spec.kv_dim, work.attention, plan, job, cluster, span=spans.cp)
    dp, edp = spans.dp, spans.edp
    gather = zero3_gather_s(work.params, plan, cluster, span=dp) + zero3_gather_s(
        work.expert_params, plan, cluster, expert=True, span=edp
    )
    reduce = micro_batch_reduce_s(work.params, plan, job, cluster, span=dp) + micro_batch_reduce_s(
        work.expert_params, plan, job, cluster, expert=True, span=edp
    )
    fwd, bwd = work.forward_s, work.backward_s
    out: dict[Recompute, BlockCost] = {}
    for recompute in Recompute:
        is_full = recompute is Recompute.FULL
        rec = work.recompute_s[recompute]
        tp_s = tp.forward_s + tp.backward_s + (tp.forward_s if is_full else 0.0)
        if cluster.torus is not None:  # XLA's collective matmul (cost/torus.py)
            tp_s = collective_matmul_exposed_s(tp.forward_s, fwd) * (
                2 if is_full else 1
            ) + collective_matmul_exposed_s(tp.backward_s, bwd + rec)
        cp_s = cp.exposed_forward_s * (2 if is_full else 1) + cp.exposed_backward_s
        ep_s = ep.forward_s * (2 if is_full else 1) + ep.backward_s
        zero_s = zero_exposed_s(gather, reduce, fwd, bwd + rec, job.overlap_dp_comm)
        out[recompute] = BlockCost(
            forward_s=fwd,
            backward_s=bwd + rec,
            compute_s=fwd + bwd + rec,
            comm_s=tp_s + cp_s + ep_s + zero_s,
            activation_bytes=work.stored_bytes[recompute],
            working_bytes=(work.working_bytes if is_full else 0.0) + cp.working_bytes,
        )
    return out


def _end_work(graph: LayerGraph, names: tuple[str, ...], plan: Plan, job: Job, cluster: Cluster) -> _Work:
    accel = cluster.accelerator
    eff = cluster.efficiency
    layers = [graph.layer(n) for n in names]
    times = tuple(layer_forward(ly, plan, job, accel, eff) for ly in layers)
    act = 0.0
    if "lm_head" in names:
        n = plan.micro_batch * job.seq_len / plan.cp
        act = n * graph.spec.vocab / plan.tp * LOGITS_BYTES_PER_ELEMENT
    return _Work(
        times=times,
        attention=None,
        forward_s=sum(t.total_s for t in times),
        backward_s=sum(t.backward_s() for t in times),
        recompute_s={},
        stored_bytes={},
        working_bytes=act,
        params=sum(ly.tp_params / plan.tp + ly.replicated_params for ly in layers),
        expert_params=0.0,
        top_k=0,
    )


def _end_cost(work: _Work, plan: Plan, job: Job, cluster: Cluster, spans: _Spans) -> EndCost:
    gather = zero3_gather_s(work.params, plan, cluster, span=spans.dp)
    comm = 2 * gather + micro_batch_reduce_s(work.params, plan, job, cluster, span=spans.dp)
    return EndCost(
        compute_s=work.forward_s + work.backward_s,
        comm_s=comm,
        backward_s=work.backward_s,
        params=work.params,
        activation_bytes=work.working_bytes,
    )


# What each cache's value does not depend on (plan_key keeps every other field). The stage split,
# recompute and rank order never enter a per-layer cost (the order acts through the spans).
_PER_STAGE = frozenset({"recompute", "layers_per_stage", "layers_per_chunk", "order", "stage_pools"})
_WORK_IGNORES = _PER_STAGE | {"dp", "pp", "vp", "zero"}  # cp_comm sets the attention kernels
_SHARED_IGNORES = _PER_STAGE | {"dp", "pp", "vp", "zero"}  # zero enters as its class
_SYNC_IGNORES = _PER_STAGE | {"pp", "vp", "cp_comm", "micro_batch", "sequence_parallel"}


def _shared_key(plan: Plan, spans: _Spans) -> tuple[object, ...]:
    """What block and end costs depend on: tp, cp, ep, micro-batch, SP, the ZeRO class and the
    tiers the TP, CP, EP and (for ZeRO-2/3 traffic) DP x CP and expert-DP groups span."""
    zero_class = plan.zero if plan.zero >= 2 else 0
    return (plan_key(plan, _SHARED_IGNORES), zero_class, spans.key())


@dataclass(frozen=True, slots=True)
class _Shared:
    block: dict[Recompute, BlockCost]
    block_params: float
    block_expert_params: float
    dense: dict[Recompute, BlockCost] | None  # the dense block of a MoE model with dense layers
    dense_params: float
    first: EndCost
    last: EndCost


def _works(
    graph: LayerGraph, plan: Plan, job: Job, cluster: Cluster
) -> tuple[_Work, _Work | None, _Work, _Work]:
    """(block, dense block or None, first end, last end) work of the plan's tp, cp, ep, mb, SP."""
    moe, dense = graph.moe_block, graph.dense_block
    block = _block_work(graph, moe if moe is not None else 0, plan, job, cluster)
    dense_work = None
    if moe is not None and dense is not None:
        dense_work = _block_work(graph, dense, plan, job, cluster)
    return (
        block,
        dense_work,
        _end_work(graph, ("embedding",), plan, job, cluster),
        _end_work(graph, ("final_norm", "lm_head"), plan, job, cluster),
    )


def _shared_costs(
    graph: LayerGraph, plan: Plan, job: Job, cluster: Cluster, spans: _Spans, shared: SharedCache | None
) -> _Shared:
    key = ("work", *plan_key(plan, _WORK_IGNORES))
    if shared is None:
        works = _works(graph, plan, job, cluster)
    elif key in shared:
        works = shared[key]
    else:
        works = shared[key] = _works(graph, plan, job, cluster)
    block, dense, first, last = works
    return _Shared(
        _block_costs(block, graph, plan, job, cluster, spans),
        block.params,
        block.expert_params,
        _block_costs(dense, graph, plan, job, cluster, spans) if dense else None,
        dense.params if dense else 0.0,
        _end_cost(first, plan, job, cluster, spans),
        _end_cost(last, plan, job, cluster, spans),
    )


def _sync_lines(
    plan: Plan,
    job: Job,
    cluster: Cluster,
    block_params: float,
    block_expert_params: float,
    spans: _Spans,
    shared: SharedCache | None,
) -> tuple[Affine, Affine]:
    """grad_sync_s is alpha-beta: latency + bytes / bandwidth, affine in the parameters; one line
    for the dense-parallel group, one for the expert-data-parallel group."""
    key = (
        "sync",
        *plan_key(plan, _SYNC_IGNORES),
        spans.sync.fan_in,
        spans.esync.fan_in,
        spans.sync.latency_floor,
        spans.sync.torus,
        spans.esync.torus,
    )
    if shared is not None and key in shared:
        return shared[key]

    def line(params: float, expert: bool) -> Affine:
        span = spans.esync if expert else spans.sync
        none = grad_sync_s(0.0, plan, job, cluster, expert, span=span)
        block = grad_sync_s(params, plan, job, cluster, expert, span=span)
        return Affine(none, (block - none) / params if params else 0.0)

    lines = (
        line(block_params, False),
        line(block_expert_params, True) if block_expert_params else Affine(0.0, 0.0),
    )
    if shared is not None:
        shared[key] = lines
    return lines


def dense_layers_credited(graph: LayerGraph, plan: Plan) -> int:
    """Dense layers of a MoE model the first stage is guaranteed to hold (module docstring)."""
    spec = graph.spec
    if not spec.is_moe:
        return 0
    return spec.num_dense_layers if plan.pp == 1 else min(spec.first_dense_layers, 1)


def stage_terms(
    graph: LayerGraph,
    plan: Plan,
    job: Job,
    cluster: Cluster,
    shared: SharedCache | None = None,
    *,
    packed: bool = False,
) -> StageTerms:
    """All per-stage cost terms of the plan's layout (recompute and layer split left open).

    ``shared``: a dict the caller keeps across plans of one graph, job and cluster; block and end
    costs are computed once per distinct ``_shared_key`` (a solve evaluates thousands of layouts
    that differ only in pp, vp, dp or the placement of other axes).
    ``packed``: cost every group on consecutive ranks whatever the plan's order (``_Spans.packed``):
    a bound on the terms of every order of the layout, valid when ``inner_tiers_fastest``; on a
    TPU torus each group's terms at their least over every order and slice shape.

    Pooled cluster: each pool hosting a stage gets the layout's terms on its own devices
    (``StageTerms.at``), and each stage its p2p on the links to its neighbours (pp.stage_p2p_s,
    the same for every order: stages are the outermost rank axis there)."""
    if cluster.pools:
        return _pooled_terms(graph, plan, job, cluster, shared, packed)
    spans = _Spans.packed(plan, cluster, shared) if packed else _Spans.of(plan, cluster)
    if shared is None:
        costs = _shared_costs(graph, plan, job, cluster, spans, shared)
    else:
        key = _shared_key(plan, spans)
        if key not in shared:
            shared[key] = _shared_costs(graph, plan, job, cluster, spans, shared)
        costs = shared[key]
    first, last = costs.first, costs.last
    if graph.spec.tied_embeddings and plan.pp > 1:
        # the last stage keeps its own copy of the tied embedding for the LM head
        last = replace(last, params=last.params + first.params)
    credit = None
    g = dense_layers_credited(graph, plan)
    if g and costs.dense is not None:
        credit = {r: costs.dense[r].minus(costs.block[r], g) for r in Recompute}
        first = replace(
            first,
            params=first.params + g * (costs.dense_params - costs.block_params),
            expert_params=-g * costs.block_expert_params,
        )
    return StageTerms(
        plan=plan,
        job=job,
        cluster=cluster,
        num_micro_batches=plan.num_micro_batches(job),
        block=costs.block,
        block_params=costs.block_params,
        first=first,
        last=last,
        p2p_s=p2p_per_micro_batch_s(graph.spec.hidden, plan, job, cluster, spans.pp),
        block_expert_params=costs.block_expert_params,
        dense_credit=credit,
        sync_lines=_sync_lines(
            plan, job, cluster, costs.block_params, costs.block_expert_params, spans, shared
        ),
    )


def _pooled_terms(
    graph: LayerGraph, plan: Plan, job: Job, cluster: Cluster, shared: SharedCache | None, packed: bool
) -> StageTerms:
    """stage_terms on a pooled cluster (its docstring); ``plan.stage_pools`` must be set."""
    if len(plan.stage_pools) != plan.pp:
        raise ValueError(
            f"plan.stage_pools={list(plan.stage_pools)} needs one pool per stage "
            f"(pp={plan.pp}) on the pooled cluster {cluster.name}"
        )
    local = replace(plan, stage_pools=())
    by_pool = {
        p: stage_terms(
            graph,
            local,
            job,
            cluster.pools[p],
            None if shared is None else shared.setdefault(("pool", p), {}),
            packed=packed,
        )
        for p in sorted(set(plan.stage_pools))
    }
    return replace(
        by_pool[plan.stage_pools[0]],
        plan=plan,
        cluster=cluster,
        pool_terms=tuple(by_pool[p] for p in plan.stage_pools),
        stage_p2p=stage_p2p_s(graph.spec.hidden, plan, job, cluster),
    )


def inner_tiers_fastest(cluster: Cluster) -> bool:
    """Each tier at least as fast as the next one out (latency and bandwidth): then a group whose
    members are consecutive ranks (stride 1) is its own cheapest placement. A pooled cluster:
    on every pool (its groups stay inside a pool)."""
    if cluster.pools:
        return all(inner_tiers_fastest(p) for p in cluster.pools)
    if cluster.torus is not None:
        return False  # torus axes: a strided group can span more axes than a packed one
    return all(
        a.alpha_s <= b.alpha_s and a.effective_bytes_per_s >= b.effective_bytes_per_s
        for a, b in zip(cluster.tiers, cluster.tiers[1:], strict=False)
    )


def _moe_comm_floor_s(graph: LayerGraph, plan: Plan, job: Job, cluster: Cluster) -> float:
    """Least routed-expert time of one MoE block, one micro-batch, over every ep and placement:
    min over ep | experts of expert compute (ep local kernels, imbalance for ep > 1) plus the
    dispatch/combine all-to-all on ep consecutive ranks; plus the MoE layer's TP traffic at
    perfect balance on tp consecutive ranks (the plan's expert TP: etp = 1 has no routed TP
    collectives). Units: seconds."""
    accel = cluster.accelerator
    eff = cluster.efficiency
    spec = graph.spec
    layer = next(ly for ly in graph.block_layers(graph.moe_block or 0) if ly.experts)
    assert layer.experts is not None
    best = float("inf")
    for ep in (e for e in range(1, spec.num_experts + 1) if spec.num_experts % e == 0):
        p = replace(plan, ep=ep)
        expert = expert_forward(layer.experts, p, job, accel, eff).forward_backward_s
        a2a = ep_layer_comm(spec.hidden, spec.top_k, p, job, cluster, span=packed_span(cluster, ep))
        best = min(best, expert + a2a.forward_s + a2a.backward_s)
    tp = tp_block_comm(
        spec.hidden,
        plan,
        job,
        cluster,
        moe_tp_collectives(spec.top_k, spec.shared_ffn_hidden > 0, plan, replace(job, expert_imbalance=1.0)),
        span=packed_span(cluster, plan.tp),
    )
    return best + tp.forward_s + tp.backward_s


def ends_floor_s(graph: LayerGraph, plan: Plan, job: Job, cluster: Cluster) -> float:
    """Forward + backward compute of the embedding, final norm and LM head of one micro-batch
    (the part of compute_floor_s that is not blocks). Units: seconds."""
    accel = cluster.accelerator
    eff = cluster.efficiency
    return sum(
        layer_forward(graph.layer(n), plan, job, accel, eff).forward_backward_s
        for n in ("embedding", "final_norm", "lm_head")
    )


FLOOR_IGNORES = frozenset(
    {"dp", "pp", "ep", "vp", "zero", "recompute", "layers_per_stage", "layers_per_chunk", "order"}
)
"""What ``compute_floor_s`` does not depend on (a cache key for it is ``plan_key`` without these)."""


def compute_floor_s(graph: LayerGraph, plan: Plan, job: Job, cluster: Cluster) -> float:
    """Least time one micro-batch needs summed over all stages: every block forward + backward
    without recompute, plus the embedding and LM head. Depends on tp, cp, micro_batch, SP,
    cp_comm and (MoE) expert TP only.
    Dense models: compute plus the block's TP and exposed CP traffic with both groups on
    consecutive ranks (``_Spans.packed``; compute only when inner tiers are not the fastest).
    MoE models: a MoE block is floored at its non-expert compute plus
    ``_moe_comm_floor_s`` (least expert compute + all-to-all + TP traffic over every ep and
    placement, when inner tiers are the fastest; else one kernel per expert GEMM at perfect
    balance and no communication), and dense layers at the lesser of the dense and the MoE floor
    (the most any plan credits). Units: seconds."""
    accel = cluster.accelerator
    eff = cluster.efficiency
    spec = graph.spec

    def block_floor(index: int, p: Plan, j: Job, experts: bool = True) -> float:
        layers = graph.block_layers(index)
        host = 2 * moe_layer_overhead_s(eff) if any(ly.experts for ly in layers) else 0.0
        return host + sum(
            (
                layer_time(ly, p, j, accel, eff) if experts else layer_forward(ly, p, j, accel, eff)
            ).forward_backward_s
            for ly in layers
        )

    ends = sum(
        layer_forward(graph.layer(n), plan, job, accel, eff).forward_backward_s
        for n in ("embedding", "final_norm", "lm_head")
    )
    if graph.moe_block is None:
        if not inner_tiers_fastest(cluster):
            return spec.num_layers * block_floor(0, plan, job) + ends
        p = replace(plan, zero=min(plan.zero, 1))  # no per-micro-batch ZeRO traffic
        work = _block_work(graph, 0, p, job, cluster)
        block = _block_costs(work, graph, p, job, cluster, _Spans.packed(p, cluster))
        return spec.num_layers * block[Recompute.NONE].time_s + ends
    if inner_tiers_fastest(cluster):
        moe_floor = block_floor(graph.moe_block, plan, job, experts=False) + _moe_comm_floor_s(
            graph, plan, job, cluster
        )
    else:
        moe_floor = block_floor(
            graph.moe_block, replace(plan, ep=spec.num_experts), replace(job, expert_imbalance=1.0)
        )
    dense = spec.num_dense_layers
    dense_floor = min(moe_floor, block_floor(graph.dense_block, plan, job)) if dense else 0.0
    return (spec.num_layers - dense) * moe_floor + dense * dense_floor + ends
