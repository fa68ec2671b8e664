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

from paraplan.cost.block import (
    ZERO_BLOCK,
    BlockCost,
    EndCost,
    Work,
    block_costs,
    block_work,
    end_cost,
    end_work,
)
from paraplan.cost.dp import OPTIMIZER_STEP_BYTES_PER_PARAM, grad_sync_s, shard_degree
from paraplan.cost.plan import Job, Plan, Recompute, plan_key
from paraplan.cost.pp import p2p_per_micro_batch_s, stage_p2p_s
from paraplan.cost.spans import SharedCache, Spans
from paraplan.graph import LayerGraph
from paraplan.hardware import Cluster

__all__ = [
    "Affine",
    "StageTerms",
    "stage_terms",
    "dense_layers_credited",
]


@dataclass(frozen=True, slots=True)
class Affine:
    """A quantity of one stage as fixed + per-layer parts: value(layers) = fixed + layers * per_layer."""

    fixed: float
    per_layer: float

    def at(self, layers: float) -> float:
        return self.fixed + layers * self.per_layer

    def __add__(self, other: Affine) -> Affine:
        return Affine(self.fixed + other.fixed, self.per_layer + other.per_layer)


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


# recompute and rank order never enter a per-layer cost (the order acts through the spans).
_PER_STAGE = frozenset({"recompute", "layers_per_stage", "layers_per_chunk", "order", "stage_pools"})
_WORK_IGNORES = _PER_STAGE | {"dp", "pp", "vp", "zero"}  # cp_comm sets the attention kernels
_SHARED_IGNORES = _PER_STAGE | {"dp", "pp", "vp", "zero"}  # zero enters as its class
_SYNC_IGNORES = _PER_STAGE | {"pp", "vp", "cp_comm", "micro_batch", "sequence_parallel"}


def _shared_key(plan: Plan, spans: Spans) -> tuple[object, ...]:
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


def _works(graph: LayerGraph, plan: Plan, job: Job, cluster: Cluster) -> tuple[Work, Work | None, Work, Work]:
    """(block, dense block or None, first end, last end) work of the plan's tp, cp, ep, mb, SP."""
    moe, dense = graph.moe_block, graph.dense_block
    block = block_work(graph, moe if moe is not None else 0, plan, job, cluster)
    dense_work = None
    if moe is not None and dense is not None:
        dense_work = block_work(graph, dense, plan, job, cluster)
    return (
        block,
        dense_work,
        end_work(graph, graph.head_names, plan, job, cluster),
        end_work(graph, graph.tail_names, plan, job, cluster),
    )


def _shared_costs(
    graph: LayerGraph, plan: Plan, job: Job, cluster: Cluster, spans: Spans, shared: SharedCache | None
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
        block_costs(block, graph, plan, job, cluster, spans),
        block.params,
        block.expert_params,
        block_costs(dense, graph, plan, job, cluster, spans) if dense else None,
        dense.params if dense else 0.0,
        end_cost(first, plan, job, cluster, spans),
        end_cost(last, plan, job, cluster, spans),
    )


def _sync_lines(
    plan: Plan,
    job: Job,
    cluster: Cluster,
    block_params: float,
    block_expert_params: float,
    spans: Spans,
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
    ``packed``: cost every group on consecutive ranks whatever the plan's order (``Spans.packed``):
    a bound on the terms of every order of the layout, valid when ``inner_tiers_fastest``; on a
    TPU torus each group's terms at their least over every order and slice shape.

    Pooled cluster: each pool hosting a stage gets the layout's terms on its own devices
    (``StageTerms.at``), and each stage its p2p on the links to its neighbours (pp.stage_p2p_s,
    the same for every order: stages are the outermost rank axis there)."""
    if cluster.pools:
        return _pooled_terms(graph, plan, job, cluster, shared, packed)
    spans = Spans.packed(plan, cluster, shared) if packed else Spans.of(plan, cluster)
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
