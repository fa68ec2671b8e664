"""What the cost model evaluates: a job (batch, sequence, precision) and a plan.

One plan type: ``Plan`` holds every knob, checks on construction the rules it can break on its
own (``check_structure``: degrees, ZeRO stage, rank order, expert TP) and offers the derived
values (``num_devices``, ``num_micro_batches``, ...); cost/validity.py checks it against a model,
job and cluster (``check_plan``). ``Layout`` is what the solver enumerates before the split: a
Plan's fields less the per-stage ones (``recompute``, ``layers_per_stage``, ``layers_per_chunk``);
``Layout.plan`` completes one, and a Plan is a Layout (``Plan.layout`` drops them).
``PartialPlan`` has Plan's fields, each None when the user left the knob to the solver. The
scenario's ``plan:`` and the result's ``plan`` (pydantic, in paraplan/) are the I/O edges of the
same fields: ``plan_values`` / ``plan_from_values`` and
``PartialPlan.from_values`` convert through ``fields(Plan)``, never a hand list. Where the layers
go (even split, pipeline slots, chunks, kind counts) is cost/split.py, re-exported here.

Size: one module because Layout, Plan and PartialPlan are one field list (PartialPlan is checked
on import to stay Plan's) and their conversions are derived from it; split apart, a knob added to
one would have to be mirrored by hand in the other. The knobs' enumerations (cost/knobs.py) and the
rules a plan breaks on its own (cost/plan_checks.py) live beside it and are re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from enum import Enum
from functools import cache
from operator import attrgetter
from types import UnionType
from typing import Any, Union, cast, get_args, get_origin, get_type_hints

from paraplan.cost.knobs import (
    Allocator,
    AttentionKernel,
    Axis,
    CPComm,
    CrossEntropy,
    OffloadModule,
    OptimizerMoments,
    Precision,
    Recompute,
    RecomputeModule,
    SelectivePolicy,
)
from paraplan.cost.plan_checks import (
    check_expert_tp,
    check_order,
    check_recompute_layers,
    check_structure,
    show_divisors,
)
from paraplan.cost.pp_schedule import PPSchedule
from paraplan.cost.software import CudaGraphs, MoEDispatcher, MoEProbs, MoERouting
from paraplan.cost.split import (
    chunk_layers,
    chunk_ranges,
    default_chunks,
    even_split,
    is_even_chunks,
    kind_counts,
    pipeline_slots,
)

__all__ = [
    "Axis",
    "Precision",
    "AttentionKernel",
    "Allocator",
    "OptimizerMoments",
    "CrossEntropy",
    "SelectivePolicy",
    "RecomputeModule",
    "OffloadModule",
    "Recompute",
    "CPComm",
    "MoEDispatcher",
    "CudaGraphs",
    "MoERouting",
    "MoEProbs",
    "PPSchedule",
    "Job",
    "Layout",
    "Plan",
    "PartialPlan",
    "PLAN_FIELDS",
    "LAYOUT_FIELDS",
    "DEFAULT_ORDER",
    "check_structure",
    "check_order",
    "check_expert_tp",
    "check_recompute_layers",
    "show_divisors",
    "plan_values",
    "plan_from_values",
    "chunk_layers",
    "chunk_ranges",
    "kind_counts",
    "default_chunks",
    "is_even_chunks",
    "pipeline_slots",
    "plan_key",
    "even_split",
]


DEFAULT_ORDER: tuple[Axis, ...] = (Axis.TP, Axis.CP, Axis.DP, Axis.PP)
"""Rank order, innermost (fastest-varying) first: Megatron's default tp-cp-(ep)-dp-pp."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    seq_len: int
    global_batch: int
    precision: Precision = Precision.BF16
    flash_attention: bool = True
    attention_kernel: AttentionKernel = AttentionKernel.FUSED
    # LoRA / adapter fine-tuning: the base weights are frozen (no weight-gradient GEMMs, gradients,
    # optimizer state or gradient sync for them); the adapters' own cost (rank << hidden) is neglected
    frozen_base: bool = False
    overlap_dp_comm: bool = True
    fp32_grads: bool = True
    # busiest EP rank's routed load / mean; None = from moe_routing (cost/ep.py expert_imbalance)
    expert_imbalance: float | None = None
    moe_routing: MoERouting = MoERouting.DROPLESS
    moe_capacity_factor: float | None = (
        None  # with moe_routing = capacity (Megatron --moe-expert-capacity-factor)
    )
    image_tokens: int = 0  # image patch tokens per sample into a vision encoder; 0 = the model's
    # default (ModelSpec.vision.image_tokens; graph Layer.tokens_per_sample)
    allocator: Allocator = Allocator.DEFAULT  # PYTORCH_CUDA_ALLOC_CONF (reserved memory, cost/memory.py)
    optimizer_moments: OptimizerMoments = OptimizerMoments.FP32  # Adam m, v dtype (cost/dp.py)
    cross_entropy: CrossEntropy = CrossEntropy.FUSED  # the loss kernel (logit bytes, cost/memory.py)
    # the loss over this many sequence chunks, one chunk's logits live at a time (torchtitan's
    # ChunkedLossWrapper num_chunks; cost/memory.py loss_bytes); 1 = the whole micro-batch's logits
    loss_chunks: int = 1
    # sequence lengths vary from micro-batch to micro-batch (fine-tuning data not packed to a fixed
    # length): the activations change size every micro-batch (cost/memory.py stranded_share)
    variable_seq_len: bool = False
    selective_policy: SelectivePolicy = SelectivePolicy.CORE_ATTENTION  # cost/recompute.py
    # Megatron --recompute-modules under recompute: selective; () = the framework's default policy
    # (selective_policy); set, exactly these modules (cost/recompute_modules.py)
    recompute_modules: frozenset[RecomputeModule] = frozenset()
    # Megatron --fine-grained-activation-offloading --offload-modules: these modules' saved inputs
    # go to host memory in forward and come back in backward (cost/offload.py); () = none
    offload_modules: frozenset[OffloadModule] = frozenset()
    # where the router's probabilities multiply the routed copies, resolved from the scenario's
    # job.moe_probs_applied (auto: by the framework, rules/moe_probs.py); combine keeps the routed
    # output for the backward (cost/ep.py expert_stored_bytes); is_moe_probs_given: the scenario set
    # it (not auto), so a framework that multiplies elsewhere refuses it by name
    moe_probs_applied: MoEProbs = MoEProbs.COMBINE
    is_moe_probs_given: bool = False
    # Megatron --moe-router-fusion / --moe-permute-fusion: the router's top-k, scores and aux loss,
    # and the token permute / unpermute, as Transformer Engine's fused kernels; off: PyTorch ops,
    # one launch each (cost/host.py fusion_launch_s). megatron-core 0.19.2 TransformerConfig
    # defaults both to False; the frameworks that run the fused kernels: rules/moe_fusion.py
    moe_router_fusion: bool = False
    moe_permute_fusion: bool = False

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.global_batch


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """What the solver enumerates before the split: the degrees, micro-batch, ZeRO stage,
    sequence parallelism, rank order, pools and slice shape, with no per-stage layer counts or
    recompute modes yet. Building one runs ``check_structure``. ``plan(layers, recompute)``
    completes it into a Plan; a Plan is a Layout with those per-stage fields
    (``Plan.layout`` drops them again), so the cost terms of a layout (cost/stage_build.py
    ``stage_terms``) take either."""

    dp: int
    tp: int
    pp: int
    cp: int = 1
    ep: int = 1
    etp: int | None = None  # expert tensor parallel degree; None = tp (Megatron's default)
    cp_comm: CPComm = CPComm.P2P
    vp: int = 1
    micro_batch: int = 1
    zero: int = 1
    sequence_parallel: bool = True
    order: tuple[Axis, ...] = DEFAULT_ORDER
    stage_pools: tuple[int, ...] = ()  # pooled clusters: the pool of each pp stage (cost/pools.py)
    torus_shape: tuple[int, ...] = ()  # TPU: the slice shape chosen (cost/torus.py); () = default
    moe_dispatcher: MoEDispatcher = MoEDispatcher.ALLTOALL  # MoE token dispatch (cost/dispatch.py)
    moe_overlap: bool = False  # EP all-to-all overlapped with the other micro-batch's compute (cost/ep.py)
    cuda_graphs: CudaGraphs = CudaGraphs.NONE  # captured CUDA graphs (cost/host.py)
    # the pipeline schedule (cost/pp_schedule.py); None = what vp implies (1f1b, interleaved)
    pp_schedule: PPSchedule | None = None

    def __post_init__(self) -> None:
        check_structure(self)

    @property
    def num_devices(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def expert_tp(self) -> int:
        """Degree the routed experts' weights are tensor-parallel over: etp, or tp when unset."""
        return self.tp if self.etp is None else self.etp

    def degree(self, axis: Axis) -> int:
        return getattr(self, axis)  # Axis is a StrEnum: its members are the field names

    def num_micro_batches(self, job: Job) -> int:
        """Micro-batches per step per dp rank: global = micro_batch x accumulation x dp."""
        return job.global_batch // (self.micro_batch * self.dp)

    @property
    def layout(self) -> Layout:
        """The layout alone (a Plan drops its per-stage fields): what a regrouped copy with
        another pp starts from, as per-stage fields of the old pp would not fit it."""
        return self

    def plan(
        self,
        layers_per_stage: tuple[int, ...],
        recompute: tuple[Recompute, ...],
        layers_per_chunk: tuple[tuple[int, ...], ...] = (),
        recompute_layers: tuple[int, ...] = (),
    ) -> Plan:
        """This layout with a layer split, recompute modes, (optionally) a chunk layout and the
        layers each full-recompute stage recomputes."""
        values = {name: getattr(self, name) for name in LAYOUT_FIELDS}
        return Plan(
            **values,
            layers_per_stage=layers_per_stage,
            recompute=recompute,
            layers_per_chunk=layers_per_chunk,
            recompute_layers=recompute_layers,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan(Layout):
    """Every knob fixed: a Layout plus its per-stage fields. ``recompute``,
    ``layers_per_stage`` and (on a pooled cluster) ``stage_pools`` have one entry per pp rank.
    ``layers_per_chunk``: with interleaving, the layers of each virtual stage (chunk), one row
    of vp counts per pp rank, rank s chunk c holding virtual stage c*pp + s; empty =
    ``default_chunks`` of ``layers_per_stage``."""

    recompute: tuple[Recompute, ...] = field(default=(Recompute.NONE,))
    # per pp rank: the first N layers of each of its chunks are fully recomputed, the rest store
    # everything (Megatron --recompute-method block --recompute-num-layers N); 0 on a stage not
    # FULL; () = every layer of a FULL stage (cost/recompute_layers.py)
    recompute_layers: tuple[int, ...] = field(default=())
    layers_per_stage: tuple[int, ...] = field(default=())
    layers_per_chunk: tuple[tuple[int, ...], ...] = field(default=())

    def __post_init__(self) -> None:
        check_structure(self)
        check_recompute_layers(self.recompute_layers, self.recompute, self.pp)

    def with_recompute(self, mode: Recompute) -> Plan:
        """This plan with ``mode`` on every stage and every layer (partial counts dropped: they
        belong to the old modes)."""
        return replace(self, recompute=(mode,) * self.pp, recompute_layers=())

    @property
    def layout(self) -> Layout:
        """The plan without its per-stage fields (the layout the solver split)."""
        return Layout(**{name: getattr(self, name) for name in LAYOUT_FIELDS})


LAYOUT_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Layout))
"""A layout's knobs, in declaration order (Plan's fields less the per-stage ones)."""
PLAN_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Plan))
"""Plan's knobs, in declaration order (the layout's, then the per-stage ones): what every
conversion and cache key is derived from."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PartialPlan:
    """The knobs a user fixes, the rest None (free for the solver): Plan's fields, each optional
    (spelled out for the type checker; the module checks on import that they stay Plan's).
    A single ``recompute`` entry fixes one mode for every stage. The search builds only the
    default chunk layout of a split (``default_chunks``); paraplan/api.py refuses another
    ``layers_per_chunk`` before the solver sees it."""

    dp: int | None = None
    tp: int | None = None
    pp: int | None = None
    cp: int | None = None
    ep: int | None = None
    etp: int | None = None
    cp_comm: CPComm | None = None
    vp: int | None = None
    micro_batch: int | None = None
    zero: int | None = None
    sequence_parallel: bool | None = None
    order: tuple[Axis, ...] | None = None
    stage_pools: tuple[int, ...] | None = None
    torus_shape: tuple[int, ...] | None = None
    moe_dispatcher: MoEDispatcher | None = None
    moe_overlap: bool | None = None
    cuda_graphs: CudaGraphs | None = None
    pp_schedule: PPSchedule | None = None
    recompute: tuple[Recompute, ...] | None = None
    recompute_layers: tuple[int, ...] | None = None
    layers_per_stage: tuple[int, ...] | None = None
    layers_per_chunk: tuple[tuple[int, ...], ...] | None = None

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> PartialPlan:
        """The partial plan of ``values`` (Plan field names; lists, enum values or members;
        missing or None = free); ValueError on an unknown key."""
        return cls(**_coerced(cls, values))


if tuple(f.name for f in fields(PartialPlan)) != PLAN_FIELDS:  # a knob added to one type only
    raise TypeError(
        f"PartialPlan's fields {[f.name for f in fields(PartialPlan)]} must be Plan's {PLAN_FIELDS}"
    )


def plan_values(plan: Plan) -> dict[str, Any]:
    """Every field of ``plan`` as JSON values (enums by value, tuples as lists)."""
    return {name: _plain(getattr(plan, name)) for name in PLAN_FIELDS}


def plan_from_values(values: Mapping[str, Any]) -> Plan:
    """The Plan of ``values`` (``plan_values``' form or Python values; a missing field takes
    Plan's default); ValueError on an unknown key or a broken rule (``check_structure``)."""
    return Plan(**_coerced(Plan, values))


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def _coerced(cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` converted to the types of ``cls``'s fields (lists to tuples, strings to enums)."""
    hints = _hints(cls)
    unknown = set(values).difference(hints)
    if unknown:
        raise ValueError(f"{sorted(unknown)} are not plan knobs; the knobs are {', '.join(PLAN_FIELDS)}")
    return {name: _coerce(hints[name], v) for name, v in values.items() if v is not None}


@cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def _coerce(hint: Any, value: Any) -> Any:
    """``value`` as type ``hint``: X | None takes X, tuple[T, ...] a tuple of T, an enum its member."""
    origin = get_origin(hint)
    if origin is Union or origin is UnionType:
        (inner,) = (a for a in get_args(hint) if a is not type(None))
        return _coerce(inner, value)
    if origin is tuple:
        return tuple(_coerce(get_args(hint)[0], v) for v in value)
    if isinstance(hint, type) and issubclass(hint, Enum):
        return hint(value)
    return value


def plan_key(plan: Layout, ignore: frozenset[str]) -> tuple[object, ...]:
    """A cache key: every field of ``plan`` (a Layout or a Plan) but those the cached value is
    declared not to depend on. Derived from the dataclass, so a knob added to Plan enters every
    key (a cache that does not need it must say so), never silently missing from one. A Layout
    and a Plan give the same key when the per-stage fields are ignored, else keys of different
    lengths (never equal)."""
    return _key_getter(isinstance(plan, Plan), ignore)(plan)


@cache
def _key_getter(is_plan: bool, ignore: frozenset[str]) -> Callable[[object], tuple[object, ...]]:
    """The fields' getter for plan_key: one ``operator.attrgetter`` over the kept names (a tuple
    of them read in C, the hot path of every cost memo), wrapped to a 1-tuple or () where fewer
    than two names are kept (attrgetter of one name returns the bare value)."""
    names = _key_fields(is_plan, ignore)
    if len(names) >= 2:
        return cast(Callable[[object], tuple[object, ...]], attrgetter(*names))
    if names:
        one = attrgetter(names[0])
        return lambda plan: (one(plan),)
    return lambda plan: ()


@cache
def _key_fields(is_plan: bool, ignore: frozenset[str]) -> tuple[str, ...]:
    unknown = ignore.difference(PLAN_FIELDS)
    if unknown:
        raise ValueError(f"plan_key: {sorted(unknown)} are not Plan fields")
    return tuple(n for n in (PLAN_FIELDS if is_plan else LAYOUT_FIELDS) if n not in ignore)
