"""DeepSpeed 0.19.8 export: the ``deepspeed.json`` config (docs/frameworks.md §3).

The JSON carries batch sizes, precision, ZeRO, AutoTP (``tensor_parallel.autotp_size``), Ulysses
sequence parallelism (``sequence_parallel_size``, our cp) and the pipeline settings; the pipeline
split itself is a ``PipelineModule`` code argument, spelled out under the top-level ``_paraplan``
key together with the plan summary and prediction (DeepSpeed accepts unknown top-level keys).

Rules enforced (DeepSpeed catches the starred ones only at run time, or never):
- train_batch_size == micro x gradient_accumulation_steps x dp (§3.2); under AutoTP the key is
  left out (DeepSpeed derives it, counting the tp ranks, then re-derives it without them under
  ZeRO-3, so no fixed value passes);
- AutoTP cannot shard a PipelineModule* (tp > 1 with pp > 1 is refused);
- pipeline parallelism with ZeRO-2/3 is invalid* (PipelineEngine assertion, §3.3);
- no interleaved (virtual) stages*;
- no explicit layer counts*: ``partition_method="type:<block>"`` balances blocks with DeepSpeed's
  ``partition_balanced``, replicated here, and only that split is expressible;
- activation checkpointing is whole-layer (``activation_checkpoint_interval``), one setting for
  every stage*: no selective recompute, no per-stage modes;
- AutoTP has no Megatron-style sequence parallelism*; Ulysses (cp) needs tp = pp = 1 and
  heads and kv heads divisible by cp*;
- rank order: topology ``['pipe', 'data', 'model']``, i.e. tp innermost, then dp, then pp*;
- expert parallelism is refused: DeepSpeed's MoE sets ``ep_size`` in model code
  (``deepspeed.moe.layer.MoE``, docs/frameworks.md §1), which this JSON cannot carry.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache
from typing import Any

import numpy as np

from paraplan.cost import Axis, Precision, Recompute
from paraplan.export import (
    Draft,
    ExportContext,
    Refusal,
    SearchLimits,
    check_dense_model,
    check_no_expert_parallel,
    enforce,
    header_lines,
    micro_batch_repairs,
    order_fixes,
    order_matches,
    recompute_fixes,
    regroup,
    repair,
    uniform_recompute,
)
from paraplan.result import paraplan_version

__all__ = ["KEYS", "RULES", "ORDER", "render", "deepspeed_config", "balanced_split",
           "partition_balanced", "autotp_batch_note"]

FRAMEWORK = "DeepSpeed 0.19.8"

KEYS: dict[str, str] = {
    "global_batch": "train_batch_size", "micro_batch": "train_micro_batch_size_per_gpu",
    "grad_accum": "gradient_accumulation_steps", "enabled": "enabled",
    "bf16": "bf16", "fp16": "fp16",
    "zero": "zero_optimization", "stage": "stage", "overlap_comm": "overlap_comm",
    "contiguous_gradients": "contiguous_gradients", "reduce_scatter": "reduce_scatter",
    "tp": "tensor_parallel", "autotp_size": "autotp_size", "cp": "sequence_parallel_size",
    "pipeline": "pipeline", "stages": "stages", "partition": "partition",
    "checkpoint_interval": "activation_checkpoint_interval",
    "activation_checkpointing": "activation_checkpointing",
    "partition_activations": "partition_activations",
    "data_types": "data_types", "grad_accum_dtype": "grad_accum_dtype",
    "comm_dtype": "communication_data_type", "gradient_clipping": "gradient_clipping",
    "header": "_paraplan",
}
"""paraplan concept -> DeepSpeed config key; the only place DeepSpeed key names appear."""

ORDER = (Axis.TP, Axis.CP, Axis.DP, Axis.PP)
"""DeepSpeed's topology ['pipe', 'data', 'model'] (model fastest), Ulysses ranks inside data."""

BLOCK_PARTITION = "type:<transformer block class>"
LAYER_LIST = "[embedding, *transformer_blocks, final_norm, lm_head]"
GRADIENT_CLIPPING = 1.0
BF16_NAME = "bf16"


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
    return tuple(sum(weights[parts[s]:parts[s + 1]]) for s in range(pp))


# --------------------------------------------------------------------------- rules


def check_batch_rule(ctx: ExportContext, draft: Draft) -> Refusal | None:
    """train_batch_size == train_micro_batch_size_per_gpu x gradient_accumulation_steps x dp."""
    p, gb = draft.plan, ctx.inst.job.global_batch
    if gb % (p.micro_batch * p.dp) == 0:
        return None
    return Refusal(f"train_batch_size={gb} must equal micro_batch x gradient_accumulation_steps x "
                   f"dp, and {gb} is not a multiple of {p.micro_batch}*{p.dp}",
                   micro_batch_repairs(draft, gb))


def check_pipeline_zero(ctx: ExportContext, draft: Draft) -> Refusal | None:
    """PipelineEngine asserts ZeRO stage < 2."""
    p = draft.plan
    if p.pp == 1 or p.zero < 2:
        return None
    return Refusal(f"plan.zero={p.zero} with pp={p.pp}: ZeRO-2 and ZeRO-3 are incompatible with "
                   "pipeline parallelism (PipelineEngine assertion, at run time)",
                   repair("zero -> 1", draft, replace(p, zero=1))
                   + repair("pp -> 1, dp absorbs it", draft, regroup(p, pp=1)))


def check_no_interleaving(ctx: ExportContext, draft: Draft) -> Refusal | None:
    """PipelineModule has one stage per pipeline rank: no virtual stages."""
    if draft.plan.vp == 1:
        return None
    return Refusal(f"plan.vp={draft.plan.vp}: DeepSpeed pipelines have no interleaved "
                   "(virtual) stages", repair("vp -> 1", draft, replace(draft.plan, vp=1)))


def check_layer_split(ctx: ExportContext, draft: Draft) -> Refusal | None:
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
        repair(f"layers_per_stage -> {list(split)}", draft, replace(p, layers_per_stage=split)))


def check_recompute(ctx: ExportContext, draft: Draft) -> Refusal | None:
    """Whole-layer checkpointing, one interval for every stage."""
    mode = uniform_recompute(draft.plan)
    if mode in (Recompute.NONE, Recompute.FULL):
        return None
    if mode is None:
        modes = [r.value for r in draft.plan.recompute]
        rule = (f"recompute differs per stage ({modes}); DeepSpeed's "
                "activation_checkpoint_interval is one setting for every stage")
    else:
        rule = ("recompute=selective: DeepSpeed checkpoints whole layers "
                "(activation_checkpoint_interval, deepspeed.checkpointing) and has no selective "
                "(attention-only) recompute")
    return Refusal(rule, recompute_fixes(draft, (Recompute.FULL, Recompute.NONE)))


def check_sequence_parallel(ctx: ExportContext, draft: Draft) -> Refusal | None:
    """AutoTP replicates norm/dropout activations: no Megatron-style sequence parallelism."""
    p = draft.plan
    if p.tp == 1 or not p.sequence_parallel:
        return None
    return Refusal(f"sequence_parallel=on with tp={p.tp}: DeepSpeed AutoTP has no Megatron-style "
                   "sequence parallelism", repair("sequence_parallel -> off", draft,
                                                  replace(p, sequence_parallel=False)))


def check_ulysses(ctx: ExportContext, draft: Draft) -> Refusal | None:
    """cp maps to Ulysses (sequence_parallel_size): tp = pp = 1, heads and kv heads % cp == 0."""
    p, s = draft.plan, ctx.spec
    if p.cp == 1:
        return None
    if p.tp == 1 and p.pp == 1 and s.num_heads % p.cp == 0 and s.num_kv_heads % p.cp == 0:
        return None
    return Refusal(f"plan.cp={p.cp} maps to Ulysses sequence parallelism, which needs tp=1, pp=1 "
                   f"and cp dividing heads={s.num_heads} and kv_heads={s.num_kv_heads} "
                   f"(plan has tp={p.tp}, pp={p.pp})",
                   repair("cp -> 1, dp absorbs it", draft, regroup(p, cp=1)))


def check_autotp_without_pipeline(ctx: ExportContext, draft: Draft) -> Refusal | None:
    """AutoTP shards a Hugging Face-style model; a PipelineModule has no policy it recognises
    (deepspeed.initialize fails with "Not able to determine model policy")."""
    p = draft.plan
    if p.tp == 1 or p.pp == 1:
        return None
    return Refusal(f"plan.tp={p.tp} with pp={p.pp}: tensor_parallel.autotp_size cannot shard a "
                   "PipelineModule (AutoTP: 'Not able to determine model policy'), and DeepSpeed "
                   "itself has no other tensor parallelism",
                   repair("tp -> 1, dp absorbs it", draft, regroup(p, tp=1))
                   + repair("pp -> 1, dp absorbs it", draft, regroup(p, pp=1)))


def check_rank_order(ctx: ExportContext, draft: Draft) -> Refusal | None:
    """ProcessTopology(['pipe', 'data', 'model']): tp innermost, then dp, then pp."""
    if order_matches(draft.plan, ORDER):
        return None
    order = "-".join(a.value for a in draft.plan.order)
    return Refusal(f"plan.order={order}: DeepSpeed's topology ['pipe', 'data', 'model'] places "
                   "tp innermost, then dp, then pp", order_fixes(draft, [("tp-cp-dp-pp", ORDER)]))


RULES = (check_dense_model, check_no_expert_parallel(
    "DeepSpeed sets the expert-parallel size in model code (deepspeed.moe.layer.MoE(ep_size=...)), "
    "not in the JSON config"), check_batch_rule, check_pipeline_zero, check_no_interleaving,
         check_recompute, check_layer_split, check_sequence_parallel, check_ulysses,
         check_autotp_without_pipeline, check_rank_order)

def pipeline_split(num_layers: int, pp: int, vp: int) -> tuple[int, ...] | None:
    """The split PipelineModule builds (balanced_split); none with virtual stages."""
    return balanced_split(num_layers, pp) if vp == 1 and num_layers >= pp else None


SEARCH = SearchLimits(stage_split=pipeline_split, recompute_modes=(Recompute.NONE, Recompute.FULL))
"""solver.target=deepspeed: PipelineModule balances the blocks itself (the solver uses that one
split per layout); whole-layer checkpointing only."""
MODEL_RULES = ()
"""The RULES that read only the model and job (solver.target checks them once, first)."""


# --------------------------------------------------------------------------- config


def _precision_section(ctx: ExportContext) -> dict[str, Any]:
    fp16 = ctx.precision is Precision.FP16
    return {KEYS["bf16"]: {KEYS["enabled"]: not fp16}, KEYS["fp16"]: {KEYS["enabled"]: fp16}}


def _pipeline_section(ctx: ExportContext) -> dict[str, Any]:
    p = ctx.plan
    if p.pp == 1:
        return {}
    interval = 1 if uniform_recompute(p) is Recompute.FULL else 0
    return {KEYS["pipeline"]: {KEYS["stages"]: p.pp, KEYS["partition"]: BLOCK_PARTITION,
                               KEYS["checkpoint_interval"]: interval}}


def _notes(ctx: ExportContext) -> list[str]:
    p = ctx.plan
    notes = []
    if p.pp > 1:
        notes.append(
            f"build the model as PipelineModule(layers={LAYER_LIST}, num_stages={p.pp}, "
            f"partition_method='{BLOCK_PARTITION}', activation_checkpoint_interval="
            f"{_pipeline_section(ctx)[KEYS['pipeline']][KEYS['checkpoint_interval']]}): "
            f"blocks per stage {list(p.layers_per_stage)}"
            + (f"; topology=PipeModelDataParallelTopology(num_pp={p.pp}, num_mp={p.tp}, "
               f"num_dp={p.dp})" if p.tp > 1 else ""))
    elif uniform_recompute(p) is Recompute.FULL:
        notes.append("full recompute: wrap every transformer block with "
                     "deepspeed.checkpointing.checkpoint")
    if ctx.precision is Precision.FP8:
        notes.append("fp8: DeepSpeed has no FP8 switch; keep bf16 here and run the linear layers "
                     "under Transformer Engine's fp8_autocast in the model code")
    if p.cp > 1:
        notes.append(f"cp={p.cp} runs as DeepSpeed-Ulysses (all-to-all over heads), not ring "
                     "attention; wrap attention in deepspeed.sequence.layer.DistributedAttention, "
                     "call deepspeed.runtime.sequence_parallel.parallel_state_sp."
                     f"initialize_sequence_parallel({p.cp}) and pass mpu=parallel_state_sp to "
                     "deepspeed.initialize (without it the engine runs with no sequence-parallel "
                     "group and reduces gradients as if every rank were data parallel)")
    if p.tp > 1:
        notes.append(autotp_batch_note(ctx) + "; build the model as a Hugging Face model AutoTP "
                     "has a policy for")
    notes.append(f"launch: deepspeed --num_nodes {ctx.cluster.num_nodes} --num_gpus "
                 f"{ctx.cluster.devices_per_node} <train.py> --deepspeed_config deepspeed.json")
    return notes


def autotp_batch_note(ctx: ExportContext) -> str:
    """Why an AutoTP config leaves train_batch_size out (DeepSpeedConfig's batch rule)."""
    p, gb = ctx.plan, ctx.inst.job.global_batch
    return (f"train_batch_size is left out: under AutoTP DeepSpeed derives it as micro_batch x "
            f"gradient_accumulation_steps x world size, first over all {p.num_devices} ranks "
            f"({gb * p.tp}, the tp ranks counted), then (ZeRO-3's zero.Init) over the {p.dp} "
            f"data-parallel ranks ({gb}); no fixed value passes both checks. A step trains on "
            f"{gb} sequences: the {p.tp} tp ranks of a replica share their data")


def deepspeed_config(ctx: ExportContext) -> dict[str, Any]:
    """The config dict for the context's plan (rules enforced first)."""
    enforce(ctx, FRAMEWORK, RULES)
    p, job = ctx.plan, ctx.inst.job
    header = header_lines(ctx, FRAMEWORK)
    config: dict[str, Any] = {
        KEYS["header"]: {"generated_by": f"paraplan {paraplan_version()}", "summary": header,
                         "predicted_step_time_s": ctx.step_time_s, "notes": _notes(ctx)},
        KEYS["micro_batch"]: p.micro_batch,
        KEYS["grad_accum"]: job.global_batch // (p.micro_batch * p.dp),
        **_precision_section(ctx),
        KEYS["zero"]: {KEYS["stage"]: p.zero, KEYS["overlap_comm"]: job.overlap_dp_comm,
                       KEYS["contiguous_gradients"]: True, KEYS["reduce_scatter"]: True},
        KEYS["gradient_clipping"]: GRADIENT_CLIPPING,
    }
    if p.tp == 1:  # AutoTP: DeepSpeed derives it (autotp_batch_note)
        config = {KEYS["header"]: config.pop(KEYS["header"]),
                  KEYS["global_batch"]: job.global_batch, **config}
    if p.tp > 1:
        config[KEYS["tp"]] = {KEYS["autotp_size"]: p.tp}
    if p.cp > 1:
        config[KEYS["cp"]] = p.cp
    config.update(_pipeline_section(ctx))
    if p.pp == 1 and uniform_recompute(p) is Recompute.FULL:
        config[KEYS["activation_checkpointing"]] = {KEYS["partition_activations"]: False}
    if not job.fp32_grads:
        config[KEYS["data_types"]] = {KEYS["grad_accum_dtype"]: BF16_NAME}
        config[KEYS["comm_dtype"]] = BF16_NAME
    return config


def render(ctx: ExportContext) -> str:
    """``deepspeed.json``: the config with the plan summary under ``_paraplan``."""
    return json.dumps(deepspeed_config(ctx), indent=2) + "\n"
