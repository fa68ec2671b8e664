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
one would have to be mirrored by hand in the other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from enum import Enum, StrEnum
from functools import cache
from operator import attrgetter
from types import UnionType
from typing import Any, Union, cast, get_args, get_origin, get_type_hints

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


class Axis(StrEnum):
    TP = "tp"
    CP = "cp"
    DP = "dp"
    PP = "pp"


class Precision(StrEnum):
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"  # per-tensor scaling, delayed or current ("FP8-CS"; Megatron --fp8-recipe tensorwise)
    FP8_BLOCKWISE = "fp8_blockwise"  # 1x128 / 128x128 block scales (--fp8-recipe blockwise)
    MXFP8 = "mxfp8"  # 32-element blocks, E8M0 scales, Blackwell (--fp8-recipe mxfp8, "FP8-MX")
    NVFP4 = "nvfp4"  # 16-element FP4 blocks, E4M3 scales, Blackwell (--fp4-recipe nvfp4)


class AttentionKernel(StrEnum):
    """Which fused-attention kernels the run uses (cost/compute.py ``attention_s``)."""

    FUSED = "fused"  # the generation's own kernel: cuDNN / Transformer Engine, FlashAttention-3 on Hopper
    FLASH2 = "flash2"  # FlashAttention-2 (flash-attn 2.x, written for Ampere's instructions)
    FLASH1 = "flash1"  # FlashAttention-1 (flash-attn 1.x, or its Triton port): half FA2's rate


class Allocator(StrEnum):
    """The CUDA caching allocator's mode (``PYTORCH_CUDA_ALLOC_CONF``; cost/memory.py
    ``allocator_overhead``)."""

    DEFAULT = "default"  # fixed-size segments, split and cached
    EXPANDABLE_SEGMENTS = "expandable_segments"  # expandable_segments:True, segments grown in place


class OptimizerMoments(StrEnum):
    """Adam's momentum and variance dtype (cost/dp.py ``moment_bytes``): fp32 (torch, DeepSpeed,
    Megatron's default) or bf16 (Megatron's precision-aware optimizer, ``exp_avg_dtype`` and
    ``exp_avg_sq_dtype`` bf16, as Megatron-Bridge's Moonlight and DeepSeek recipes set them)."""

    FP32 = "fp32"
    BF16 = "bf16"


class CrossEntropy(StrEnum):
    """How the loss is computed over the logits (cost/memory.py ``logit_bytes_per_element``)."""

    FUSED = "fused"  # fused vocab-parallel kernel (Megatron / TE): bf16 logits + fp32 softmax
    UPCAST = "upcast"  # logits upcast to fp32, torch cross_entropy (torchtitan, HF Trainer)
    COMPILED = "compiled"  # the same under torch.compile (torchtitan 2025+): bf16 logits + bf16 grad


class SelectivePolicy(StrEnum):
    """What ``recompute: selective`` keeps (cost/recompute.py): the framework's own policy."""

    CORE_ATTENTION = "core_attention"  # Megatron: recompute the attention core only
    TORCHTITAN_OP = "torchtitan_op"  # torchtitan op-level SAC: save every other matmul + SDPA


class RecomputeModule(StrEnum):
    """Megatron ``--recompute-modules`` choices (megatron-core 0.19.2 transformer_config.py);
    what each stores and re-runs: cost/recompute_modules.py."""

    CORE_ATTN = "core_attn"
    LAYERNORM = "layernorm"
    MLA_UP_PROJ = "mla_up_proj"
    MOE_ACT = "moe_act"
    SHARED_EXPERTS = "shared_experts"
    MLP = "mlp"
    MOE = "moe"


class OffloadModule(StrEnum):
    """Megatron ``--fine-grained-activation-offloading --offload-modules`` choices whose inputs
    paraplan prices (megatron-core 0.19.2 transformer_config.py ``offload_modules``; what each
    moves to host memory and what it costs: cost/offload.py). Megatron's eighth choice,
    fused_group_mlp, needs Transformer Engine's op fuser and is not offered."""

    ATTN_NORM = "attn_norm"
    QKV_LINEAR = "qkv_linear"
    CORE_ATTN = "core_attn"
    ATTN_PROJ = "attn_proj"
    MLP_NORM = "mlp_norm"
    EXPERT_FC1 = "expert_fc1"
    MOE_ACT = "moe_act"


class Recompute(StrEnum):
    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"


class CPComm(StrEnum):
    """How context-parallel ranks exchange K/V (Megatron ``--cp-comm-type``; cost/cp.py)."""

    P2P = "p2p"  # ring: cp - 1 send/recv steps overlapped with attention (Megatron's default)
    ALL_GATHER = "all_gather"  # gather all K/V first, reduce-scatter dK/dV (Llama 3's CP)


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

_SCHEDULES = tuple(s.value for s in PPSchedule)
_POSITIVE = ("dp", "tp", "pp", "cp", "ep", "vp", "micro_batch")
_positives = attrgetter(*_POSITIVE)  # read in C: every Layout the search builds is checked
_AXES = frozenset(Axis)


def check_structure(plan: Layout) -> None:
    """The rules a layout (and so a plan) breaks on its own, whatever the model: degrees and micro-batch >= 1,
    ZeRO stage 0-3, a rank order naming each axis once, etp 1 or tp. ValueError names the knob,
    the values and the rule. (Interleaving needs pp > 1 is check_plan's: a pool's share of a
    pipeline, cost/pools.py, is a Plan of that many stages; so is what pp and vp a pipeline
    schedule needs, so that a rule's repair of pp or vp builds a plan that check_plan judges.)"""
    if min(_positives(plan)) < 1:
        name = next(n for n in _POSITIVE if getattr(plan, n) < 1)
        raise ValueError(f"plan.{name}={getattr(plan, name)} must be at least 1")
    if plan.zero not in (0, 1, 2, 3):
        raise ValueError(f"plan.zero={plan.zero} must be 0, 1, 2 or 3")
    if plan.pp_schedule is not None and plan.pp_schedule not in _SCHEDULES:
        raise ValueError(f"plan.pp_schedule={plan.pp_schedule!r} must be one of {', '.join(_SCHEDULES)}")
    check_order(plan.order)
    check_expert_tp(plan.etp, plan.tp)


def check_recompute_layers(counts: Sequence[int], modes: Sequence[Recompute], pp: int) -> None:
    """``plan.recompute_layers``: empty, or one count per pp rank, at least 1 where the stage's
    recompute is full (its first N layers of each chunk are recomputed) and 0 elsewhere (a stage
    that does not recompute full has no layers to choose)."""
    if not counts:
        return
    if len(counts) != pp:
        raise ValueError(
            f"plan.recompute_layers={list(counts)} lists {len(counts)} stages; give one count per "
            f"pipeline stage (pp={pp}) or leave it empty (every layer of a full-recompute stage)"
        )
    per_stage = tuple(modes) if len(modes) == pp else (tuple(modes[:1]) * pp)
    for s, (n, mode) in enumerate(zip(counts, per_stage, strict=True)):
        if mode is Recompute.FULL and n < 1:
            raise ValueError(
                f"plan.recompute_layers[{s}]={n} must be at least 1 on a stage whose recompute "
                "is full (the layers of each chunk recomputed); for none write plan.recompute=none"
            )
        if mode is not Recompute.FULL and n != 0:
            raise ValueError(
                f"plan.recompute_layers[{s}]={n} must be 0: stage {s} recomputes "
                f"{mode.value}, and only full recompute takes a number of layers"
            )


def check_order(order: Sequence[Axis]) -> None:
    """A rank order names tp, cp, dp and pp once each, innermost first."""
    if len(order) != len(_AXES) or set(order) != _AXES:
        raise ValueError(
            f"plan.order={[str(a) for a in order]} must be a permutation of "
            "tp, cp, dp, pp (every axis once, innermost first)"
        )


def check_expert_tp(etp: int | None, tp: int | None) -> None:
    """Expert tensor parallelism either shards each expert like the dense layers (etp = tp) or
    not at all (etp = 1); None means tp."""
    if etp is not None and tp is not None and etp not in (1, tp):
        raise ValueError(
            f"plan.etp={etp} must be 1 or tp={tp} (expert tensor parallelism either "
            "shards each expert like the dense layers or not at all; other degrees are not "
            "modelled)"
        )


def show_divisors(n: int) -> str:
    """The divisors of ``n``, ascending, for a message: ``1, 2, 4, 8``."""
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


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
