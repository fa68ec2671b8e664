"""What the cost model evaluates: a job (batch, sequence, precision) and a fully fixed plan."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import StrEnum
from functools import cache

__all__ = [
    "Axis",
    "Precision",
    "Recompute",
    "CPComm",
    "Job",
    "Plan",
    "DEFAULT_ORDER",
    "check_plan",
    "check_expert_parallel",
    "expert_axes",
    "expert_folded",
    "folded_ep_axes",
    "chunk_layers",
    "default_chunks",
    "is_even_chunks",
    "pipeline_slots",
    "check_chunks",
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
    expert_imbalance: float = 1.1  # see cost/ep.py DEFAULT_EXPERT_IMBALANCE

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.global_batch


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """Every knob fixed. ``recompute``, ``layers_per_stage`` and (on a pooled cluster)
    ``stage_pools`` have one entry per pp rank. ``layers_per_chunk``: with interleaving, the
    layers of each virtual stage (chunk), one row of vp counts per pp rank, rank s chunk c
    holding virtual stage c*pp + s; empty = ``default_chunks`` of ``layers_per_stage``."""

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
    recompute: tuple[Recompute, ...] = field(default=(Recompute.NONE,))
    layers_per_stage: tuple[int, ...] = field(default=())
    layers_per_chunk: tuple[tuple[int, ...], ...] = field(default=())
    order: tuple[Axis, ...] = DEFAULT_ORDER
    stage_pools: tuple[int, ...] = ()  # pooled clusters: the pool of each pp stage (cost/pools.py)
    torus_shape: tuple[int, ...] = ()  # TPU: the slice shape chosen (cost/torus.py); () = default

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


def even_split(num_layers: int, pp: int) -> tuple[int, ...]:
    """The one even split: equal counts, the remainder spread over the middle stages (the first
    and last also hold the embedding and the LM head), then over all when pp <= 2."""
    base, extra = divmod(num_layers, pp)
    split = [base] * pp
    middle = list(range(1, pp - 1)) or list(range(pp))
    for i in range(extra):
        split[middle[i % len(middle)]] += 1
    return tuple(split)


def plan_key(plan: Plan, ignore: frozenset[str]) -> tuple[object, ...]:
    """A cache key: every field of ``plan`` but those the cached value is declared not to depend
    on. Derived from the dataclass, so a knob added to Plan enters every key (a cache that does
    not need it must say so), never silently missing from one."""
    return tuple(getattr(plan, name) for name in _key_fields(ignore))


@cache
def _key_fields(ignore: frozenset[str]) -> tuple[str, ...]:
    names = tuple(f.name for f in fields(Plan))
    unknown = ignore.difference(names)
    if unknown:
        raise ValueError(f"plan_key: {sorted(unknown)} are not Plan fields")
    return tuple(n for n in names if n not in ignore)


def check_plan(
    plan: Plan,
    job: Job,
    *,
    num_devices: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    num_experts: int = 0,
) -> None:
    """Every rule a plan must meet; ValueError names the knob, the values and the rule."""
    for name in ("dp", "tp", "pp", "cp", "ep", "vp", "micro_batch"):
        if getattr(plan, name) < 1:
            raise ValueError(f"plan.{name}={getattr(plan, name)} must be at least 1")
    if plan.num_devices != num_devices:
        raise ValueError(
            f"plan: dp*tp*pp*cp = {plan.dp}*{plan.tp}*{plan.pp}*{plan.cp} = {plan.num_devices} "
            f"must equal the cluster's {num_devices} devices"
        )
    if plan.zero not in (0, 1, 2, 3):
        raise ValueError(f"plan.zero={plan.zero} must be 0, 1, 2 or 3")
    if num_heads % plan.tp:
        raise ValueError(f"plan.tp={plan.tp} must divide model heads={num_heads}")
    if num_kv_heads % plan.tp and plan.tp % num_kv_heads:
        raise ValueError(f"plan.tp={plan.tp} and model kv_heads={num_kv_heads}: one must divide the other")
    if plan.sequence_parallel and plan.tp == 1:
        pass  # sequence parallelism is a no-op without TP
    if job.seq_len % plan.cp or (plan.cp > 1 and (job.seq_len // plan.cp) % 2):
        raise ValueError(
            f"plan.cp={plan.cp} must split job.seq_len={job.seq_len} into an even number of "
            "tokens per rank (2*cp chunks for causal load balance)"
        )
    per_step = plan.micro_batch * plan.dp
    if job.global_batch % per_step:
        raise ValueError(
            f"job.global_batch={job.global_batch} must be divisible by "
            f"plan.micro_batch*dp = {plan.micro_batch}*{plan.dp} = {per_step} "
            "(global batch = micro-batch x accumulation steps x data-parallel replicas)"
        )
    if len(plan.layers_per_stage) != plan.pp:
        raise ValueError(f"plan.layers_per_stage has {len(plan.layers_per_stage)} entries; need pp={plan.pp}")
    check_chunks(plan, num_layers)
    if sum(plan.layers_per_stage) != num_layers or min(plan.layers_per_stage) < plan.vp:
        raise ValueError(
            f"plan.layers_per_stage={list(plan.layers_per_stage)} must sum to the model's "
            f"{num_layers} layers with at least vp={plan.vp} per stage"
        )
    if plan.vp > 1:
        if plan.pp == 1:
            raise ValueError(f"plan.vp={plan.vp} needs pp > 1 (interleaving splits pipeline stages)")
        if plan.num_micro_batches(job) % plan.pp:
            raise ValueError(
                f"interleaved schedule (vp={plan.vp}) needs the micro-batch count "
                f"{plan.num_micro_batches(job)} to be a multiple of pp={plan.pp}"
            )
    if len(plan.recompute) != plan.pp:
        raise ValueError(f"plan.recompute has {len(plan.recompute)} entries; need pp={plan.pp}")
    if sorted(plan.order) != sorted(DEFAULT_ORDER):
        raise ValueError(f"plan.order={list(plan.order)} must be a permutation of tp, cp, dp, pp")
    check_expert_parallel(plan, num_experts)


def default_chunks(layers_per_stage: tuple[int, ...], vp: int) -> tuple[tuple[int, ...], ...]:
    """Each stage's layers over its vp chunks as evenly as possible: stage 0 puts its short
    chunks first (next to the embedding), every other stage last (the last stage's are next to
    the loss). 126 layers as [15, 16 x 6, 15] on vp 8 give stage 0 [1, 2 x 7] and stage 7
    [2 x 7, 1]: Megatron's --account-for-embedding/loss-in-pipeline-split layout."""
    rows = []
    for s, n in enumerate(layers_per_stage):
        base, extra = divmod(n, vp)
        short, long_ = [base] * (vp - extra), [base + 1] * extra
        rows.append(tuple(short + long_) if s == 0 else tuple(long_ + short))
    return tuple(rows)


def pipeline_slots(num_layers: int, pp: int, vp: int) -> tuple[int, ...] | None:
    """Per stage, the layer slots the embedding / loss take when layers are split in units of
    vp (Megatron's --account-for-embedding/loss-in-pipeline-split): stage s holds
    vp * k_s - slots[s] layers, k_s >= 1 + slots[s] (every virtual stage keeps a layer).

    Formula: none when vp divides the layers; one slot on the last stage (the loss, next to
    the costlier LM head) when layers + 1 is a multiple of vp; one on the first and one on the
    last when layers + 2 is; else None (no such split; e.g. 126 layers on vp 8 take both: 128
    slots, 2 per virtual stage, the first and last virtual stages holding 1 layer)."""
    if vp == 1 or num_layers % vp == 0:
        return (0,) * pp
    need = -num_layers % vp
    if need > 2 or pp < 2:
        return None
    return (need - 1,) + (0,) * (pp - 2) + (1,)


def chunk_layers(plan: Plan) -> tuple[tuple[int, ...], ...]:
    """Layers of each (pp rank, chunk): ``plan.layers_per_chunk`` or ``default_chunks``."""
    return plan.layers_per_chunk or default_chunks(plan.layers_per_stage, plan.vp)


def is_even_chunks(plan: Plan) -> bool:
    """Every chunk of each stage holds the same number of layers (vp divides every stage)."""
    return all(len(set(row)) == 1 for row in chunk_layers(plan))


def check_chunks(plan: Plan, num_layers: int) -> None:
    """plan.layers_per_chunk: pp rows of vp counts, each >= 1, all summing to the model's layers,
    row s to layers_per_stage[s]. Without it, each stage's layers are spread over its chunks by
    default_chunks (so vp need not divide a stage)."""
    rows = plan.layers_per_chunk
    if not rows:
        return
    if len(rows) != plan.pp or any(len(r) != plan.vp for r in rows):
        raise ValueError(
            f"plan.layers_per_chunk has {len(rows)} rows of {sorted({len(r) for r in rows})} "
            f"entries; need pp={plan.pp} rows of vp={plan.vp} layer counts (one per virtual stage)"
        )
    bad = [(s, c) for s, r in enumerate(rows) for c, n in enumerate(r) if n < 1]
    if bad:
        s, c = bad[0]
        raise ValueError(
            f"plan.layers_per_chunk[{s}][{c}]={rows[s][c]}: every virtual stage holds at least one layer"
        )
    sums = [sum(r) for r in rows]
    if sum(sums) != num_layers:
        raise ValueError(
            f"plan.layers_per_chunk holds {sum(sums)} layers (stages {sums}); the model has {num_layers}"
        )
    if tuple(sums) != tuple(plan.layers_per_stage):
        raise ValueError(
            f"plan.layers_per_chunk row sums {sums} must equal plan.layers_per_stage="
            f"{list(plan.layers_per_stage)} (each row is one pp stage's chunks)"
        )


def check_expert_parallel(plan: Plan, num_experts: int) -> None:
    """Megatron's expert-parallel rules: EP is carved out of dp x cp (it does not change the
    device count), ep divides the experts, and MoE with TP needs sequence parallelism."""
    if plan.ep > 1 and num_experts == 0:
        raise ValueError(f"plan.ep={plan.ep}: expert parallelism needs a mixture-of-experts model")
    if num_experts and plan.tp > 1 and not plan.sequence_parallel:
        raise ValueError(
            f"plan.tp={plan.tp} on a mixture-of-experts model needs plan.sequence_parallel=true "
            "(Megatron routes the sequence-parallel shards to the experts)"
        )
    if plan.etp is not None and plan.etp not in (1, plan.tp):
        raise ValueError(
            f"plan.etp={plan.etp} must be 1 or tp={plan.tp} (expert tensor parallelism either "
            "shards each expert like the dense layers or not at all; other degrees are not "
            "modelled)"
        )
    if plan.etp is not None and plan.etp != plan.tp and num_experts == 0:
        raise ValueError(f"plan.etp={plan.etp} needs a mixture-of-experts model")
    if plan.ep == 1:
        return
    if num_experts % plan.ep:
        raise ValueError(f"plan.ep={plan.ep} must divide the model's {num_experts} experts")
    if expert_folded(plan):
        if folded_ep_axes(plan) is None:
            raise ValueError(
                f"plan.ep={plan.ep} with plan.etp=1 spans tp ranks (Megatron's MoE parallel "
                f"folding) and must take the innermost ep of the tp*cp*dp = "
                f"{plan.tp}*{plan.cp}*{plan.dp} ranks along the rank order: whole inner axes and "
                "a divisor of the next"
            )
        return
    inner, outer = expert_axes(plan)
    if (plan.dp * plan.cp) % plan.ep or (plan.ep % inner and inner % plan.ep):
        raise ValueError(
            f"plan.ep={plan.ep} must divide dp*cp = {plan.dp}*{plan.cp} and split along the rank "
            f"order (ep divides, or is a multiple of, the inner of cp/dp, degree {inner}); "
            "expert parallelism is carved out of the data- and context-parallel ranks"
        )


def expert_folded(plan: Plan) -> bool:
    """Megatron-core's MoE parallel folding (docs/frameworks.md Sec. 2.3, expert grid ETP x EP x
    expert-DP x PP laid over the same ranks as TP x CP x DP x PP): with etp = 1 the EP group may
    span TP ranks. paraplan folds when it must: etp = 1 < tp and ep does not divide dp*cp."""
    return plan.ep > 1 and plan.etp == 1 and plan.tp > 1 and (plan.dp * plan.cp) % plan.ep != 0


def folded_ep_axes(plan: Plan) -> list[tuple[Axis, int]] | None:
    """EP group of a folded plan as (axis, members along it): the innermost
    ep ranks of tp x cp x dp in rank order (Megatron's expert RankGenerator with tp = etp = 1 puts
    ep innermost), i.e. whole inner axes and a divisor of the next; None if ep does not split so."""
    left = plan.ep
    out: list[tuple[Axis, int]] = []
    for axis in (a for a in plan.order if a != Axis.PP):
        d = plan.degree(axis)
        if left == 1:
            break
        take = d if left % d == 0 else left
        if d % take:
            return None
        out.append((axis, take))
        left //= take
    return out if left == 1 else None


def expert_axes(plan: Plan) -> tuple[int, int]:
    """Degrees of the inner and outer of the cp and dp axes under the plan's rank order."""
    cp_first = plan.order.index(Axis.CP) < plan.order.index(Axis.DP)
    return (plan.cp, plan.dp) if cp_first else (plan.dp, plan.cp)
