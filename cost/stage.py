"""Per-stage cost terms of a plan: the numbers both ``evaluate`` and the solver combine.

Everything here is per device and per micro-batch unless the name says per step. A plan's layout
(degrees, micro-batch, ZeRO, SP, order) fixes the cost of one block of each kind under each
recompute mode (``LayerGraph.block_kinds``: blocks whose layers are alike share a kind); a
stage's time and memory are then affine in how many blocks of each kind it holds:

    value(stage) = fixed + sum_k n_k * per_kind_k = fixed + n * per_base + sum_k n_k * delta_k

with n = sum_k n_k its blocks, ``base_kind`` the most common kind and delta_k = per_kind_k -
per_base (zero for a homogeneous model, which has one kind). The plan's layer positions give
the n_k of each stage exactly (cost.split.kind_counts: DeepSeek-V3's three dense layers cost as
dense wherever they land, Llama 4's interleaved dense and MoE layers each as what they are); the
solver chooses the split over the same affine terms without re-deriving any formula.
``stage_terms`` (cost/stage_build.py) builds a layout's terms from the block, end, sync and p2p
costs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from fractions import Fraction
from functools import cached_property

from paraplan.cost.block import BlockCost, EndCost
from paraplan.cost.dp import optimizer_step_bytes_per_param, shard_degree
from paraplan.cost.moe_memory import SoftwareMemory
from paraplan.cost.plan import Job, Layout, Plan, Recompute
from paraplan.cost.pp_schedule import bubble_weight
from paraplan.cost.split import kind_counts
from paraplan.hardware import Cluster

__all__ = [
    "Affine",
    "Counts",
    "KindCost",
    "StageTerms",
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


Counts = tuple[int, ...]
"""Blocks of each kind one stage holds (indexed like ``LayerGraph.kind_blocks``)."""


@dataclass(frozen=True, slots=True)
class KindCost:
    """One block of one kind: its cost under each recompute mode and its weights per device."""

    block: dict[Recompute, BlockCost]
    params: float  # all but routed experts (sharded by tp)
    expert_params: float  # routed experts (sharded by ep x etp)


def _dot(deltas: tuple[float, ...], counts: Counts) -> float:
    return sum(d * n for d, n in zip(deltas, counts, strict=True) if d)


@dataclass(frozen=True)
class StageTerms:
    """The cost terms of one layout (``plan``: a Layout, or a whole Plan when the terms are
    asked for one split, e.g. by ``evaluate``; ``full_plan`` reads it as one). ``block``,
    ``block_params`` and ``block_expert_params`` are the base kind's; ``kinds`` holds every kind
    (``base_kind`` among them) and ``block_kinds`` the kind of each block in order (module
    docstring). The ``*_s`` methods take a stage's per-kind counts (``stage_counts``), or a plain
    layer count on a model with one kind."""

    plan: Layout
    job: Job
    cluster: Cluster
    num_micro_batches: int
    block: dict[Recompute, BlockCost]
    block_params: float  # per device, all but routed experts (sharded by tp)
    first: EndCost
    last: EndCost
    p2p_s: float
    block_expert_params: float = 0.0  # per device routed-expert weights (sharded by ep x tp)
    sync_lines: tuple[Affine, Affine] = (Affine(0.0, 0.0), Affine(0.0, 0.0))  # see _sync_lines
    pool_terms: tuple[StageTerms, ...] = ()  # pooled cluster: the terms of each stage's pool
    stage_p2p: tuple[float, ...] = ()  # pooled cluster: each stage's p2p (pp.stage_p2p_s)
    kinds: tuple[KindCost, ...] = ()
    block_kinds: tuple[int, ...] = ()
    base_kind: int = 0
    relaxation: bool = False  # built by relaxed(): bounds time and memory, not exposed DP sync
    software: SoftwareMemory = SoftwareMemory()  # the MoE software state's buffers (cost/moe_memory.py)
    # B / (F + B) and W / (F + B) of the base block without recompute: the pipeline schedule's
    # bubble (cost/pp_schedule.py); defaults: F = W, B = 2F (dense GEMMs)
    backward_share: float = 2.0 / 3.0
    wgrad_share: float = 1.0 / 3.0
    _kind_times: dict[tuple[int, Recompute], tuple[float, ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )  # kind_time_s, per (pool stage, mode): the bounds ask it ~10^6 times per solve

    def at(self, stage: int) -> StageTerms:
        """The terms that cost ``stage``: on a pooled cluster those of the pool hosting it (the
        same layout on that pool's devices, tiers and accelerator), else these."""
        return self.pool_terms[stage] if self.pool_terms else self

    @property
    def bubble_weight(self) -> Fraction:
        """Weight of (sum_s t_s - max_s t_s) in the step: the schedule's (cost/pp_schedule.py)."""
        p = self.plan
        return bubble_weight(p.pp_schedule, p.pp, p.vp, self.backward_share, self.wgrad_share)

    @property
    def num_kinds(self) -> int:
        return max(1, len(self.kinds))

    @property
    def heterogeneous(self) -> bool:
        return self.num_kinds > 1

    @property
    def full_plan(self) -> Plan:
        """``plan`` with its split and recompute modes; TypeError when it is a bare Layout."""
        if not isinstance(self.plan, Plan):
            raise TypeError(f"these terms are a layout's, with no layer split or recompute: {self.plan}")
        return self.plan

    def stage_counts(self, plan: Plan | None = None) -> tuple[Counts, ...]:
        """Per stage, its blocks of each kind under ``plan``'s split (default: these terms')."""
        plan = plan or self.full_plan
        if not self.heterogeneous:
            return tuple((n,) for n in plan.layers_per_stage)
        return kind_counts(self.block_kinds, plan)

    def counts(self, layers: int | Counts) -> Counts:
        """``layers`` as per-kind counts; a plain count only where the model has one kind."""
        if not isinstance(layers, int):
            return layers
        if self.heterogeneous:
            raise ValueError(
                "a stage of a model with several block kinds is given by its per-kind counts "
                "(StageTerms.stage_counts), not a layer count"
            )
        return (layers,)

    def block_at(self, stage: int, recompute: Recompute) -> BlockCost:
        """One base-kind block of ``stage`` under ``recompute`` (per-stage on a pooled cluster)."""
        return self.at(stage).block[recompute]

    def kind_blocks_at(self, stage: int, recompute: Recompute) -> tuple[BlockCost, ...]:
        """One block of each kind of ``stage`` under ``recompute``."""
        t = self.at(stage)
        return tuple(k.block[recompute] for k in t.kinds) if t.kinds else (t.block[recompute],)

    def kind_time_s(self, stage: int, recompute: Recompute) -> tuple[float, ...]:
        """One block of each kind of ``stage`` under ``recompute``: its forward + backward +
        exposed per-micro-batch communication (BlockCost.time_s)."""
        key = (stage if self.pool_terms else 0, recompute)
        times = self._kind_times.get(key)
        if times is None:
            times = self._kind_times[key] = tuple(b.time_s for b in self.kind_blocks_at(stage, recompute))
        return times

    def _deltas(self, stage: int, recompute: Recompute, attr: str) -> tuple[float, ...]:
        """Per kind: its block's ``attr`` less the base kind's (module docstring)."""
        blocks = self.kind_blocks_at(stage, recompute)
        base = getattr(blocks[self.base_kind], attr)
        return tuple(getattr(b, attr) - base for b in blocks)

    def param_deltas(self, stage: int) -> tuple[tuple[float, float], ...]:
        """Per kind: (params, expert params) of its block less the base kind's."""
        t = self.at(stage)
        if not t.kinds:
            return ((0.0, 0.0),)
        b = t.kinds[self.base_kind]
        return tuple((k.params - b.params, k.expert_params - b.expert_params) for k in t.kinds)

    def p2p_at(self, stage: int) -> float:
        return self.stage_p2p[stage] if self.stage_p2p else self.p2p_s

    def stage_capacity_bytes(self, stage: int) -> float:
        """Device memory of ``stage``'s devices."""
        return self.at(stage).cluster.memory_capacity_bytes

    def stage_params(self, stage: int, layers: int) -> float:
        """Parameters one device of ``stage`` holds with ``layers`` base-kind blocks (the tied
        embedding is replicated on the last), routed experts excluded (see
        stage_expert_params); other kinds add ``param_deltas``."""
        params = layers * self.block_params
        if stage == 0:
            params += self.first.params
        if stage == self.plan.pp - 1:
            params += self.last.params
        return params

    def stage_expert_params(self, stage: int, layers: int) -> float:
        """Routed-expert parameters one device of ``stage`` holds with ``layers`` base blocks,
        the ends' (the last stage's MTP modules) included."""
        return layers * self.block_expert_params + self._ends(
            stage, self.first.expert_params, self.last.expert_params
        )

    def held_params(self, stage: int, layers: int | Counts) -> tuple[float, float]:
        """(params, routed-expert params) one device of ``stage`` holds with these blocks."""
        n = self.counts(layers)
        deltas = self.param_deltas(stage)
        return (
            self.stage_params(stage, sum(n)) + _dot(tuple(d for d, _ in deltas), n),
            self.stage_expert_params(stage, sum(n)) + _dot(tuple(e for _, e in deltas), n),
        )

    def _ends(self, stage: int, first: float, last: float) -> float:
        return (first if stage == 0 else 0.0) + (last if stage == self.plan.pp - 1 else 0.0)

    def stage_time(self, stage: int, recompute: Recompute) -> Affine:
        """Forward + backward of one micro-batch on ``stage``, exposed per-micro-batch comm included.

        Formula: layers * (base block compute + comm) + p2p + embedding / head on the ends;
        other kinds add ``time_deltas``."""
        t = self.at(stage)
        ends = self._ends(stage, t.first.compute_s + t.first.comm_s, t.last.compute_s + t.last.comm_s)
        return Affine(self.p2p_at(stage) + ends, t.block[recompute].time_s)

    def time_deltas(self, stage: int, recompute: Recompute) -> tuple[float, ...]:
        return self._deltas(stage, recompute, "time_s")

    def stage_compute(self, stage: int, recompute: Recompute) -> Affine:
        t = self.at(stage)
        return Affine(self._ends(stage, t.first.compute_s, t.last.compute_s), t.block[recompute].compute_s)

    def stage_backward(self, stage: int, recompute: Recompute) -> Affine:
        t = self.at(stage)
        return Affine(self._ends(stage, t.first.backward_s, t.last.backward_s), t.block[recompute].backward_s)

    def dp_sync(self, stage: int) -> Affine:
        """Once-per-step gradient sync of the stage's parameters (ZeRO 0-2): alpha-beta, so
        affine in the parameter count and hence in the layers. Routed-expert gradients sync over
        the expert-data-parallel group (ep.py) after the others."""
        sync, esync = self.at(stage).sync_lines
        return Affine(sync.at(self.stage_params(stage, 0)), sync.per_layer * self.block_params) + Affine(
            esync.at(self.stage_expert_params(stage, 0)), esync.per_layer * self.block_expert_params
        )

    def sync_deltas(self, stage: int) -> tuple[float, ...]:
        sync, esync = self.at(stage).sync_lines
        return tuple(sync.per_layer * p + esync.per_layer * e for p, e in self.param_deltas(stage))

    def dp_exposed(self, stage: int, recompute: Recompute) -> Affine:
        """sync - window, where the window is the stage's last backward when overlap is on;
        the exposed time is max(0, this)."""
        sync = self.dp_sync(stage)
        if not self.job.overlap_dp_comm:
            return sync
        window = self.stage_backward(stage, recompute)
        return Affine(sync.fixed - window.fixed, sync.per_layer - window.per_layer)

    def exposed_deltas(self, stage: int, recompute: Recompute) -> tuple[float, ...]:
        sync = self.sync_deltas(stage)
        if not self.job.overlap_dp_comm:
            return sync
        window = self._deltas(stage, recompute, "backward_s")
        return tuple(s - w for s, w in zip(sync, window, strict=True))

    def _optimizer_scales(self, stage: int) -> tuple[float, float]:
        cluster = self.at(stage).cluster
        scale = optimizer_step_bytes_per_param(self.job) / (
            cluster.accelerator.hbm_bytes_per_s * cluster.efficiency.hbm
        )
        if self.plan.zero >= 1:
            return scale / shard_degree(self.plan), scale / shard_degree(self.plan, expert=True)
        return scale, scale

    def optimizer(self, stage: int) -> Affine:
        """Adam step, HBM-bound: local params * 30 B / (HBM * eff); state sharded from ZeRO-1
        (over dp x cp, or dp*cp/ep for routed experts)."""
        dense, expert = self._optimizer_scales(stage)
        return Affine(
            self.stage_params(stage, 0) * dense + self.stage_expert_params(stage, 0) * expert,
            self.block_params * dense + self.block_expert_params * expert,
        )

    def optimizer_deltas(self, stage: int) -> tuple[float, ...]:
        dense, expert = self._optimizer_scales(stage)
        return tuple(p * dense + e * expert for p, e in self.param_deltas(stage))

    def stage_time_s(self, stage: int, layers: int | Counts, recompute: Recompute) -> float:
        n = self.counts(layers)
        return self.stage_time(stage, recompute).at(sum(n)) + _dot(self.time_deltas(stage, recompute), n)

    def stage_compute_s(self, stage: int, layers: int | Counts, recompute: Recompute) -> float:
        n = self.counts(layers)
        deltas = self._deltas(stage, recompute, "compute_s")
        return self.stage_compute(stage, recompute).at(sum(n)) + _dot(deltas, n)

    def stage_backward_s(self, stage: int, layers: int | Counts, recompute: Recompute) -> float:
        n = self.counts(layers)
        deltas = self._deltas(stage, recompute, "backward_s")
        return self.stage_backward(stage, recompute).at(sum(n)) + _dot(deltas, n)

    def dp_sync_s(self, stage: int, layers: int | Counts) -> float:
        n = self.counts(layers)
        return self.dp_sync(stage).at(sum(n)) + _dot(self.sync_deltas(stage), n)

    def dp_exposed_s(self, stage: int, layers: int | Counts, recompute: Recompute) -> float:
        n = self.counts(layers)
        line = self.dp_exposed(stage, recompute)
        return max(0.0, line.at(sum(n)) + _dot(self.exposed_deltas(stage, recompute), n))

    def optimizer_s(self, stage: int, layers: int | Counts) -> float:
        n = self.counts(layers)
        return self.optimizer(stage).at(sum(n)) + _dot(self.optimizer_deltas(stage), n)

    def relaxed(self) -> StageTerms:
        """Terms with one kind whose every part is the least over the kinds: a stage of these
        terms costs no more than any stage with as many blocks of the real model, in time and
        memory (what the solver's bounds and layer caps are taken from). Exposed DP sync is a
        difference of two parts, so it is not bounded this way (callers bound it by 0)."""
        if not self.heterogeneous:
            return self
        return _relaxed(self)

    @cached_property
    def capacity_bytes(self) -> float:
        return self.cluster.memory_capacity_bytes


_BLOCK_FIELDS = tuple(f.name for f in fields(BlockCost))


def _least_block(blocks: list[BlockCost]) -> BlockCost:
    return BlockCost(*(min(getattr(b, f) for b in blocks) for f in _BLOCK_FIELDS))


def _relaxed(terms: StageTerms) -> StageTerms:
    pools = tuple(_relaxed(t) for t in terms.pool_terms)
    least = KindCost(
        {r: _least_block([k.block[r] for k in terms.kinds]) for r in Recompute},
        min(k.params for k in terms.kinds),
        min(k.expert_params for k in terms.kinds),
    )
    return replace(
        terms,
        block=least.block,
        block_params=least.params,
        block_expert_params=least.expert_params,
        kinds=(least,),
        block_kinds=(0,) * len(terms.block_kinds),
        base_kind=0,
        pool_terms=pools,
        relaxation=True,
    )
