"""DeepSpeed 0.19.8's rules: what a plan must satisfy to run as a DeepSpeed JSON config with a
PipelineModule, and the layer split PipelineModule builds itself (``partition_balanced``), which
both the rules and the exporter (paraplan/export/deepspeed.py) need."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import numpy as np
from paraplan.cost import Axis, Recompute
from paraplan.rules.base import (
    Draft,
    Refusal,
    RuleContext,
    SearchLimits,
    micro_batch_repairs,
    recompute_fixes,
    repair,
)
from paraplan.rules.checks import (
    check_dense_model,
    check_no_expert_parallel,
    loss_chunks_rule,
    megatron_offload_modules_rule,
    megatron_recompute_modules_rule,
    partial_recompute_rule,
    rank_order_rule,
)
from paraplan.rules.moe_fusion import fusion_rule
from paraplan.rules.moe_state import state_rules
from paraplan.rules.plans import regroup, uniform_recompute
from paraplan.rules.pp_schedule import schedule_refusal_rule
from paraplan.rules.validity import batch_splits

__all__ = [
    "RULES",
    "SEARCH",
    "MODEL_RULES",
    "LAYOUT_RULES",
    "ZERO_RULES",
    "ORDER",
    "partition_balanced",
    "balanced_split",
    "pipeline_split",
]


ORDER = (Axis.TP, Axis.CP, Axis.DP, Axis.PP)
"""DeepSpeed's topology ['pipe', 'data', 'model'] (model fastest), Ulysses ranks inside data."""


# --------------------------------------------------------------------------- pipeline split


def partition_balanced(weights: list[int], num_parts: int) -> list[int]:
    """DeepSpeed's ``runtime.utils.partition_balanced`` (0.19.8), tie-breaking included.

    Its dynamic programme: cost[i][j] = least (max - min) part weight splitting the first i
    weights into j parts, over the last cut k < i, the last k reaching the least cost winning
    (DeepSpeed updates on >=). Same recurrence, one column j at a time over every (i, k) with
    numpy, so a 1,000-stage split takes seconds instead of hours."""
    n, m = len(weights), num_parts
    if n <= m:
        return [min(p, n) for p in range(m + 1)]
    prefix = np.concatenate([[0.0], np.cumsum(np.asarray(weights, dtype=float))])
    part = prefix[:, None] - prefix[None, :]  # part[i, k]: weights k..i-1
    earlier = np.arange(n + 1)[None, :] < np.arange(n + 1)[:, None]  # k < i
    best_max = np.full((n + 1, m + 1), np.inf)
    best_min = np.full((n + 1, m + 1), np.inf)
    position = np.zeros((n + 1, m + 1), dtype=int)
    best_max[0, 0] = 0.0
    for j in range(1, m + 1):  # rows i >= j: fewer weights than parts stay unset, as in DeepSpeed
        hi = np.maximum(best_max[None, :, j - 1], part[j:])
        lo = np.minimum(best_min[None, :, j - 1], part[j:])
        cost = np.where(earlier[j:], hi - lo, np.inf)
        ties = earlier[j:] & (cost == cost.min(axis=1)[:, None])
        k = n - np.argmax(ties[:, ::-1], axis=1)  # the last k reaching the least cost
        at = np.arange(len(k))
        position[j:, j] = k
        best_max[j:, j] = hi[at, k]
        best_min[j:, j] = lo[at, k]
    parts = [n]
    for j in range(m, 0, -1):
        parts.append(int(position[parts[-1], j]))
    return parts[::-1]


@cache
def balanced_split(num_layers: int, pp: int) -> tuple[int, ...]:
    """Blocks per stage DeepSpeed gives ``LAYER_LIST`` under ``partition_method="type:<block>"``."""
    weights = [0] + [1] * num_layers + [0, 0]
    parts = partition_balanced(weights, pp)
    return tuple(sum(weights[parts[s] : parts[s + 1]]) for s in range(pp))


# --------------------------------------------------------------------------- rules


def check_batch_rule(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """train_batch_size == train_micro_batch_size_per_gpu x gradient_accumulation_steps x dp."""
    p, gb = draft.plan, ctx.job.global_batch
    if batch_splits(ctx.job, p):
        return None
    return Refusal(
        f"train_batch_size={gb} must equal micro_batch x gradient_accumulation_steps x "
        f"dp, and {gb} is not a multiple of {p.micro_batch}*{p.dp}",
        micro_batch_repairs(draft, gb),
    )


def check_pipeline_zero(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """PipelineEngine asserts ZeRO stage < 2."""
    p = draft.plan
    if p.pp == 1 or p.zero < 2:
        return None
    return Refusal(
        f"plan.zero={p.zero} with pp={p.pp}: ZeRO-2 and ZeRO-3 are incompatible with "
        "pipeline parallelism (PipelineEngine assertion, at run time)",
        repair("zero -> 1", draft, replace(p, zero=1))
        + repair("pp -> 1, dp absorbs it", draft, regroup(p, pp=1)),
    )


def check_no_interleaving(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """PipelineModule has one stage per pipeline rank: no virtual stages."""
    if draft.plan.vp == 1:
        return None
    return Refusal(
        f"plan.vp={draft.plan.vp}: DeepSpeed pipelines have no interleaved (virtual) stages",
        repair("vp -> 1", draft, replace(draft.plan, vp=1)),
    )


def check_layer_split(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """PipelineModule takes no explicit layer counts; only the balanced split is expressible."""
    p = draft.plan
    if p.pp == 1:
        return None
    split = balanced_split(sum(p.layers_per_stage), p.pp)
    if tuple(p.layers_per_stage) == split:
        return None
    return Refusal(
        f"layers_per_stage={list(p.layers_per_stage)}: PipelineModule's partition_method has no "
        f"explicit layer counts; balancing the blocks gives {list(split)}",
        repair(f"layers_per_stage -> {list(split)}", draft, replace(p, layers_per_stage=split)),
    )


def check_recompute(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """Whole-layer checkpointing, one interval for every stage."""
    mode = uniform_recompute(draft.plan)
    if mode in (Recompute.NONE, Recompute.FULL):
        return None
    if mode is None:
        modes = [r.value for r in draft.plan.recompute]
        rule = (
            f"recompute differs per stage ({modes}); DeepSpeed's "
            "activation_checkpoint_interval is one setting for every stage"
        )
    else:
        rule = (
            "recompute=selective: DeepSpeed checkpoints whole layers "
            "(activation_checkpoint_interval, deepspeed.checkpointing) and has no selective "
            "(attention-only) recompute"
        )
    return Refusal(rule, recompute_fixes(draft, (Recompute.FULL, Recompute.NONE)))


def check_sequence_parallel(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """AutoTP replicates norm/dropout activations: no Megatron-style sequence parallelism."""
    p = draft.plan
    if p.tp == 1 or not p.sequence_parallel:
        return None
    return Refusal(
        f"sequence_parallel=on with tp={p.tp}: DeepSpeed AutoTP has no Megatron-style sequence parallelism",
        repair("sequence_parallel -> off", draft, replace(p, sequence_parallel=False)),
    )


def check_ulysses(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """cp maps to Ulysses (sequence_parallel_size): tp = pp = 1, heads and kv heads % cp == 0."""
    p, s = draft.plan, ctx.spec
    if p.cp == 1:
        return None
    if p.tp == 1 and p.pp == 1 and s.num_heads % p.cp == 0 and s.num_kv_heads % p.cp == 0:
        return None
    return Refusal(
        f"plan.cp={p.cp} maps to Ulysses sequence parallelism, which needs tp=1, pp=1 "
        f"and cp dividing heads={s.num_heads} and kv_heads={s.num_kv_heads} "
        f"(plan has tp={p.tp}, pp={p.pp})",
        repair("cp -> 1, dp absorbs it", draft, regroup(p, cp=1)),
    )


def check_autotp_without_pipeline(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """AutoTP shards a Hugging Face-style model; a PipelineModule has no policy it recognises
    (deepspeed.initialize fails with "Not able to determine model policy")."""
    p = draft.plan
    if p.tp == 1 or p.pp == 1:
        return None
    return Refusal(
        f"plan.tp={p.tp} with pp={p.pp}: tensor_parallel.autotp_size cannot shard a "
        "PipelineModule (AutoTP: 'Not able to determine model policy'), and DeepSpeed "
        "itself has no other tensor parallelism",
        repair("tp -> 1, dp absorbs it", draft, regroup(p, tp=1))
        + repair("pp -> 1, dp absorbs it", draft, regroup(p, pp=1)),
    )


check_rank_order = rank_order_rule(
    ORDER, "DeepSpeed's topology ['pipe', 'data', 'model'] places tp innermost, then dp, then pp"
)
"""ProcessTopology(['pipe', 'data', 'model']): tp innermost, then dp, then pp."""


check_recompute_layers = partial_recompute_rule(
    "DeepSpeed's activation checkpointing wraps every layer the same way; no number of layers"
)

MOE_STATE_RULES = state_rules("deepspeed")
"""plan.moe_dispatcher, plan.moe_overlap, plan.cuda_graphs, job.moe_routing (rules/moe_state.py)."""

check_recompute_modules = megatron_recompute_modules_rule("deepspeed")
"""job.recompute_modules: Megatron-only (rules/checks.py)."""
check_offload_modules = megatron_offload_modules_rule("deepspeed")
"""job.offload_modules: Megatron-only (rules/checks.py)."""
check_loss_chunks = loss_chunks_rule("deepspeed")
"""job.loss_chunks: torchtitan only (rules/checks.py)."""

check_pp_schedule = schedule_refusal_rule("deepspeed")
"""plan.pp_schedule: the schedules deepspeed runs (rules/pp_schedule.py)."""

check_moe_fusion = fusion_rule(
    "deepspeed",
    "routes in model code (deepspeed.moe TopKGate), which the JSON export cannot switch",
)
"""job.moe_router_fusion / moe_permute_fusion: megatron and nemo only (rules/moe_fusion.py)."""

RULES = (
    check_moe_fusion,
    check_recompute_modules,
    check_offload_modules,
    check_loss_chunks,
    check_dense_model,
    check_no_expert_parallel(
        "DeepSpeed sets the expert-parallel size in model code (deepspeed.moe.layer.MoE(ep_size=...)), "
        "not in the JSON config"
    ),
    check_batch_rule,
    check_pipeline_zero,
    check_no_interleaving,
    check_recompute,
    check_recompute_layers,
    check_layer_split,
    check_sequence_parallel,
    check_ulysses,
    check_autotp_without_pipeline,
    check_rank_order,
    *MOE_STATE_RULES,
    check_pp_schedule,
)


def pipeline_split(num_layers: int, pp: int, vp: int) -> tuple[int, ...] | None:
    """The split PipelineModule builds (balanced_split); none with virtual stages."""
    return balanced_split(num_layers, pp) if vp == 1 and num_layers >= pp else None


SEARCH = SearchLimits(stage_split=pipeline_split, recompute_modes=(Recompute.NONE, Recompute.FULL))
"""solver.target=deepspeed: PipelineModule balances the blocks itself (the solver uses that one
split per layout); whole-layer checkpointing only."""
MODEL_RULES = (
    check_moe_fusion,
    check_recompute_modules,
    check_offload_modules,
    check_loss_chunks,
    MOE_STATE_RULES[3],
)  # job.moe_routing
"""The RULES that read only the model and job (solver.target checks them once, first)."""
LAYOUT_RULES = (check_pipeline_zero, check_rank_order)
"""The RULES that read the ZeRO stage or the rank order, which the solver picks per layout; the
others give one verdict for a whole layout family (solver.target checks those once per family)."""
ZERO_RULES = (check_pipeline_zero,)
"""The LAYOUT_RULES that read the ZeRO stage but neither the rank order nor the slice shape: one
verdict for every placement of a family with its ZeRO stage (rules/filter.py asks them once per
such family, and the solver drops a family they refuse before bounding it)."""
