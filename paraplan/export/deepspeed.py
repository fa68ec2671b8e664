"""DeepSpeed 0.19.8 export: the ``deepspeed.json`` config (docs/frameworks.md §3).

The JSON carries batch sizes, precision, ZeRO, AutoTP (``tensor_parallel.autotp_size``), Ulysses
sequence parallelism (``sequence_parallel_size``, our cp) and the pipeline settings; the pipeline
split itself is a ``PipelineModule`` code argument, spelled out under the top-level ``_paraplan``
key together with the plan summary and prediction (DeepSpeed accepts unknown top-level keys).

Rules enforced (paraplan/rules/deepspeed.py; DeepSpeed catches the starred ones only at run time, or never):
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
from typing import Any

from paraplan.cost import Precision, Recompute
from paraplan.export import (
    ExportContext,
    enforce,
    header_lines,
    uniform_recompute,
)
from paraplan.result import paraplan_version
from paraplan.rules import rules_of
from paraplan.rules.deepspeed import ORDER, balanced_split, partition_balanced
from paraplan.rules.launch_env import allocator_env
from paraplan.rules.validity import hybrid_pattern

__all__ = [
    "KEYS",
    "ORDER",
    "render",
    "deepspeed_config",
    "balanced_split",
    "partition_balanced",
    "autotp_batch_note",
]

FRAMEWORK = "DeepSpeed 0.19.8"

KEYS: dict[str, str] = {
    "global_batch": "train_batch_size",
    "micro_batch": "train_micro_batch_size_per_gpu",
    "grad_accum": "gradient_accumulation_steps",
    "enabled": "enabled",
    "bf16": "bf16",
    "fp16": "fp16",
    "zero": "zero_optimization",
    "stage": "stage",
    "overlap_comm": "overlap_comm",
    "contiguous_gradients": "contiguous_gradients",
    "reduce_scatter": "reduce_scatter",
    "tp": "tensor_parallel",
    "autotp_size": "autotp_size",
    "cp": "sequence_parallel_size",
    "pipeline": "pipeline",
    "stages": "stages",
    "partition": "partition",
    "checkpoint_interval": "activation_checkpoint_interval",
    "activation_checkpointing": "activation_checkpointing",
    "partition_activations": "partition_activations",
    "data_types": "data_types",
    "grad_accum_dtype": "grad_accum_dtype",
    "comm_dtype": "communication_data_type",
    "gradient_clipping": "gradient_clipping",
    "header": "_paraplan",
}
"""paraplan concept -> DeepSpeed config key; the only place DeepSpeed key names appear."""

BLOCK_PARTITION = "type:<transformer block class>"
LAYER_LIST = "[embedding, *transformer_blocks, final_norm, lm_head]"
GRADIENT_CLIPPING = 1.0
BF16_NAME = "bf16"


# --------------------------------------------------------------------------- config


def _precision_section(ctx: ExportContext) -> dict[str, Any]:
    fp16 = ctx.precision is Precision.FP16
    return {KEYS["bf16"]: {KEYS["enabled"]: not fp16}, KEYS["fp16"]: {KEYS["enabled"]: fp16}}


def _pipeline_section(ctx: ExportContext) -> dict[str, Any]:
    p = ctx.plan
    if p.pp == 1:
        return {}
    interval = 1 if uniform_recompute(p) is Recompute.FULL else 0
    return {
        KEYS["pipeline"]: {
            KEYS["stages"]: p.pp,
            KEYS["partition"]: BLOCK_PARTITION,
            KEYS["checkpoint_interval"]: interval,
        }
    }


def _notes(ctx: ExportContext) -> list[str]:
    p = ctx.plan
    notes = []
    if p.pp > 1:
        notes.append(
            f"build the model as PipelineModule(layers={LAYER_LIST}, num_stages={p.pp}, "
            f"partition_method='{BLOCK_PARTITION}', activation_checkpoint_interval="
            f"{_pipeline_section(ctx)[KEYS['pipeline']][KEYS['checkpoint_interval']]}): "
            f"blocks per stage {list(p.layers_per_stage)}"
            + (
                f"; topology=PipeModelDataParallelTopology(num_pp={p.pp}, num_mp={p.tp}, num_dp={p.dp})"
                if p.tp > 1
                else ""
            )
        )
        if ctx.spec.is_moe and ctx.spec.num_dense_layers or hybrid_pattern(ctx.spec):
            notes.append(  # PipelineModule._partition_layers: weight 1 per layer whose class matches
                "the blocks are of several classes (dense and MoE, or Mamba/attention/MLP): the "
                "type: regex must match every one of them (e.g. 'type:DenseBlock|MoEBlock') so "
                "each weighs one and the stages hold the blocks above"
            )
    elif uniform_recompute(p) is Recompute.FULL:
        notes.append("full recompute: wrap every transformer block with deepspeed.checkpointing.checkpoint")
    if ctx.precision is Precision.FP8:
        notes.append(
            "fp8: DeepSpeed has no FP8 switch; keep bf16 here and run the linear layers "
            "under Transformer Engine's fp8_autocast in the model code"
        )
    if p.cp > 1:
        notes.append(
            f"cp={p.cp} runs as DeepSpeed-Ulysses (all-to-all over heads), not ring "
            "attention; wrap attention in deepspeed.sequence.layer.DistributedAttention, "
            "call deepspeed.runtime.sequence_parallel.parallel_state_sp."
            f"initialize_sequence_parallel({p.cp}) and pass mpu=parallel_state_sp to "
            "deepspeed.initialize (without it the engine runs with no sequence-parallel "
            "group and reduces gradients as if every rank were data parallel)"
        )
    if p.tp > 1:
        notes.append(
            autotp_batch_note(ctx) + "; build the model as a Hugging Face model AutoTP has a policy for"
        )
    notes.append(
        f"launch: deepspeed --num_nodes {ctx.cluster.num_nodes} --num_gpus "
        f"{ctx.cluster.devices_per_node} <train.py> --deepspeed_config deepspeed.json"
    )
    return notes


def autotp_batch_note(ctx: ExportContext) -> str:
    """Why an AutoTP config leaves train_batch_size out (DeepSpeedConfig's batch rule)."""
    p, gb = ctx.plan, ctx.inst.job.global_batch
    return (
        f"train_batch_size is left out: under AutoTP DeepSpeed derives it as micro_batch x "
        f"gradient_accumulation_steps x world size, first over all {p.num_devices} ranks "
        f"({gb * p.tp}, the tp ranks counted), then (ZeRO-3's zero.Init) over the {p.dp} "
        f"data-parallel ranks ({gb}); no fixed value passes both checks. A step trains on "
        f"{gb} sequences: the {p.tp} tp ranks of a replica share their data"
    )


def _launch_env(ctx: ExportContext) -> dict[str, Any]:
    """The job's launch environment (rules/launch_env.py) under ``_paraplan``: DeepSpeed's
    launcher exports the NAME=VALUE lines of a ``.deepspeed_env`` file on every node."""
    env = allocator_env(ctx.inst.job)
    if not env:
        return {}
    return {"launch_env": env, "deepspeed_env": [f"{k}={v}" for k, v in env.items()]}


def deepspeed_config(ctx: ExportContext) -> dict[str, Any]:
    """The config dict for the context's plan (rules enforced first)."""
    enforce(ctx, FRAMEWORK, rules_of("deepspeed").rules)  # its launch rules first
    p, job = ctx.plan, ctx.inst.job
    header = header_lines(ctx, FRAMEWORK)
    config: dict[str, Any] = {
        KEYS["header"]: {
            "generated_by": f"paraplan {paraplan_version()}",
            "summary": header,
            "predicted_step_time_s": ctx.step_time_s,
            "notes": _notes(ctx),
            **_launch_env(ctx),
        },
        KEYS["micro_batch"]: p.micro_batch,
        KEYS["grad_accum"]: job.global_batch // (p.micro_batch * p.dp),
        **_precision_section(ctx),
        KEYS["zero"]: {
            KEYS["stage"]: p.zero,
            KEYS["overlap_comm"]: job.overlap_dp_comm,
            KEYS["contiguous_gradients"]: True,
            KEYS["reduce_scatter"]: True,
        },
        KEYS["gradient_clipping"]: GRADIENT_CLIPPING,
    }
    if p.tp == 1:  # AutoTP: DeepSpeed derives it (autotp_batch_note)
        config = {
            KEYS["header"]: config.pop(KEYS["header"]),
            KEYS["global_batch"]: job.global_batch,
            **config,
        }
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
