"""torchtitan 0.3.0 export: a torchrun command line of tyro overrides (docs/frameworks.md §4.1).

0.3.0 has no TOML job files: ``--module <model> --config <function>`` picks a config function and
``--parallelism.*`` / ``--training.*`` flags override it; activation checkpointing is a tyro
subcommand and must be the last token.

The model: torchtitan takes it only from a config function, so the export names the one that
builds the planned model (CONFIGS: llama3 for Llama 3.1, qwen3, deepseek_v3, gpt_oss) and refuses
any other model; ``llama3_405b`` converts linear layers to float8, so only fp8 plans may use it.
Compile and async TP are switched off (the plan models eager kernels).

Mapping of the plan:
- dp: ``data_parallel_replicate_degree`` for ZeRO-0; ``data_parallel_shard_degree`` (FSDP2) for
  ZeRO 1-3, with ``fsdp_reshard_after_forward`` ``never`` for ZeRO-1/2 and ``always`` for ZeRO-3.
  FSDP2 always shards gradients with the optimizer state, so ZeRO-1 runs as ZeRO-2 (less memory,
  same traffic); the header says so and gives the ZeRO-2 plan's modelled time.
- pp: explicit ``module_fqns_per_model_part`` (exact layer counts; virtual stage s = v * pp + r
  runs on pp rank r, torchtitan's "loop" placement; the V schedules place stages r and
  2 pp - 1 - r on rank r themselves), schedule ``1F1B``, ``Interleaved1F1B``,
  ``InterleavedZeroBubble`` (plan.pp_schedule zb1p) or ``DualPipeV`` (rules/pp_schedule.py
  TORCHTITAN_NAMES), micro-batch ``pipeline_parallel_microbatch_size`` and
  ``local_batch_size`` = micro x count.
- rank order: the mesh is ``[pp, dp_replicate, dp_shard, cp, tp]``, i.e. tp-cp-dp-pp.
- ep: ``expert_parallel_degree``; the sparse mesh ``[pp, dp_replicate, efsdp, ep]`` carves ep out
  of dp_shard x cp x tp, innermost first, which is the cost model's EP group (the innermost ep
  ranks of dp x cp) when tp = 1 and dp is sharded (ZeRO 1-3; with ZeRO-0, ep must divide cp).

The loss: every config function torchtitan 0.3.0 builds these models with wraps its cross entropy
in ``ChunkedLossWrapper`` (8 sequence chunks by default); ``--loss.num-chunks`` is written from
``job.loss_chunks`` (1 unless set: the whole micro-batch's logits, as the plan models them), and
the rules refuse a count that does not divide each rank's seq_len / cp.

MoE software state (rules/moe_state.py): the standard all-to-all dispatcher only, no EP overlap;
``plan.cuda_graphs`` none writes ``--training.disable-cuda-graphs`` (torchtitan 0.3.0 captures the
whole forward + backward by default), full leaves the graph on (refused with PP and EP: its
all-to-all dispatcher synchronises with the CPU); ``job.moe_routing`` force_balanced writes
``--debug.moe-force-load-balance`` (round-robin routing, for benchmarks).

Rules enforced (paraplan/rules/torchtitan.py): local batch % PP
micro-batch; global batch % (local x dp); Schedule1F1B needs micro-batches >= stages and
Interleaved1F1B needs n % max(1, n // pp) == 0 (torch 2.13); one recompute mode for all stages;
cp needs seq_len % (2 x cp) (head-tail load balancer); bf16 or fp32 parameters only (no fp16).
"""

from __future__ import annotations

import shlex
from dataclasses import replace

from paraplan.cost import CudaGraphs, MoERouting, Plan, Precision, Recompute
from paraplan.cost.plan import chunk_layers
from paraplan.cost.pp_schedule import resolved_schedule
from paraplan.export import (
    ExportContext,
    comment_block,
    enforce,
    header_lines,
    uniform_recompute,
)
from paraplan.graph import ModelSpec, preset
from paraplan.rules import Draft, rules_of
from paraplan.rules.launch_env import allocator_env
from paraplan.rules.pp_schedule import TORCHTITAN_NAMES
from paraplan.rules.torchtitan import CONFIGS, ORDER, PARAM_DTYPES, torchtitan_config

__all__ = ["FLAGS", "ORDER", "CONFIGS", "render", "torchtitan_args", "model_parts"]

FRAMEWORK = "torchtitan 0.3.0"

FLAGS: dict[str, str] = {
    "module": "--module",
    "config": "--config",
    "dp_replicate": "--parallelism.data-parallel-replicate-degree",
    "dp_shard": "--parallelism.data-parallel-shard-degree",
    "reshard": "--parallelism.fsdp-reshard-after-forward",
    "tp": "--parallelism.tensor-parallel-degree",
    "sp_on": "--parallelism.enable-sequence-parallel",
    "sp_off": "--parallelism.no-enable-sequence-parallel",
    "pp": "--parallelism.pipeline-parallel-degree",
    "schedule": "--parallelism.pipeline-parallel-schedule",
    "pp_micro_batch": "--parallelism.pipeline-parallel-microbatch-size",
    "model_parts": "--parallelism.module-fqns-per-model-part",
    "cp": "--parallelism.context-parallel-degree",
    "ep": "--parallelism.expert-parallel-degree",
    "local_batch": "--training.local-batch-size",
    "global_batch": "--training.global-batch-size",
    "seq_len": "--training.seq-len",
    "mixed_precision": "--training.mixed-precision-param",
    "no_cuda_graphs": "--training.disable-cuda-graphs",
    "force_balance": "--debug.moe-force-load-balance",
    "loss_chunks": "--loss.num-chunks",
    "no_compile": "--compile.no-enable",
    "no_async_tp": "--compile.no-enable-async-tensor-parallel",
}
"""paraplan concept -> torchtitan 0.3.0 flag; the only place torchtitan option names appear."""

RECOMPUTE_SUBCOMMANDS = {
    Recompute.NONE: "activation-checkpoint:none",
    Recompute.SELECTIVE: "activation-checkpoint:selective",
    Recompute.FULL: "activation-checkpoint:full",
}
RESHARD = {1: "never", 2: "never", 3: "always"}
EMBEDDING, LAYER, FINAL_NORM, HEAD = "tok_embeddings", "layers.{}", "norm", "lm_head"


def _rope_note(spec: ModelSpec, config: str) -> list[str]:
    """The note when torchtitan's config scales RoPE frequencies differently from the plan's model."""
    name = next(n for n, t in CONFIGS.items() if t[1] == config)
    built = preset(name).rope
    if built.scaling == spec.rope.scaling and built.factor == spec.rope.factor:
        return []
    return [
        f"model: torchtitan's {config} builds {name}'s RoPE frequency scaling "
        f"({built.scaling or 'none'}, factor {built.factor:g}); {spec.name} has "
        f"{spec.rope.scaling or 'none'}. Shapes, parameters and cost are the same; to load "
        f"{spec.name} weights, set its rope scaling in the config function"
    ]


# --------------------------------------------------------------------------- arguments


def model_parts(plan: Plan) -> list[list[str]]:
    """Module FQNs per model part; part s = v * pp + r holds rank r's v-th chunk of layers
    (unequal chunks from plan.layers_per_chunk)."""
    chunks = chunk_layers(plan)
    counts = [chunks[s % plan.pp][s // plan.pp] for s in range(plan.pp * plan.vp)]
    parts, first = [], 0
    for n in counts:
        parts.append([LAYER.format(i) for i in range(first, first + n)])
        first += n
    parts[0].insert(0, EMBEDDING)
    parts[-1] += [FINAL_NORM, HEAD]
    return parts


def _parallel_args(ctx: ExportContext) -> list[tuple[str, object]]:
    p = ctx.plan
    if p.zero == 0:
        args: list[tuple[str, object]] = [("dp_replicate", p.dp), ("dp_shard", 1)]
    else:
        args = [("dp_replicate", 1), ("dp_shard", p.dp), ("reshard", RESHARD[p.zero])]
    args.append(("tp", p.tp))
    if p.tp > 1:
        args.append(("sp_on" if p.sequence_parallel else "sp_off", None))
    if p.cp > 1:
        args.append(("cp", p.cp))
    if p.ep > 1:
        args.append(("ep", p.ep))
    if p.pp > 1:
        parts = [",".join(part) for part in model_parts(p)]
        args += [
            ("pp", p.pp),
            ("schedule", TORCHTITAN_NAMES[resolved_schedule(p.pp_schedule, p.vp)]),
            ("pp_micro_batch", p.micro_batch),
            ("model_parts", parts),
        ]
    return args


def _training_args(ctx: ExportContext) -> list[tuple[str, object]]:
    p, job = ctx.plan, ctx.inst.job
    n = job.global_batch // (p.micro_batch * p.dp)
    local = p.micro_batch * n if p.pp > 1 else p.micro_batch  # PP: one step runs all micro-batches
    args: list[tuple[str, object]] = [
        ("local_batch", local),
        ("global_batch", job.global_batch),
        ("seq_len", job.seq_len),
        ("mixed_precision", PARAM_DTYPES[ctx.precision]),
        ("loss_chunks", job.loss_chunks),  # every config's loss is a ChunkedLossWrapper (8 by default)
    ]
    if p.cuda_graphs is not CudaGraphs.FULL:  # the plan launches kernels from the host
        args.append(("no_cuda_graphs", None))
    if ctx.spec.is_moe and job.moe_routing is MoERouting.FORCE_BALANCED:
        args.append(("force_balance", None))
    return args + [("no_compile", None), ("no_async_tp", None)]  # the plan models eager kernels


def torchtitan_args(ctx: ExportContext) -> list[str]:
    """``torchtitan.train`` arguments, activation-checkpoint subcommand last (rules enforced)."""
    enforce(ctx, FRAMEWORK, rules_of("torchtitan").rules)  # its launch rules first
    module, config = torchtitan_config(ctx.spec)  # type: ignore[misc]  # RULES: not None
    argv = [FLAGS["module"], module, FLAGS["config"], config]
    for key, value in _parallel_args(ctx) + _training_args(ctx):
        argv.append(FLAGS[key])
        if isinstance(value, list):
            argv += value  # a list flag takes several tokens
        elif value is not None:
            argv.append(str(value))
    mode = uniform_recompute(ctx.plan) or Recompute.FULL  # RULES refused mixed modes already
    return argv + [RECOMPUTE_SUBCOMMANDS[mode]]


def _notes(ctx: ExportContext, config: str) -> list[str]:
    p, s = ctx.plan, ctx.spec
    notes = [
        "rank order: mesh [pp, dp_replicate, dp_shard, cp, tp] (paraplan order "
        f"{'-'.join(a.value for a in p.order)})",
        *_rope_note(s, config),
    ]
    if p.zero == 1:
        z2 = ctx.score(Draft(replace(p, zero=2), ctx.precision))
        cost = f" (modelled {z2.predicted.step_time_s:.4g} s vs {ctx.step_time_s:.4g} s)" if z2 else ""
        notes.append(f"zero=1 runs as ZeRO-2: FSDP2 shards gradients with the optimizer state{cost}")
    if uniform_recompute(p) is Recompute.SELECTIVE:
        notes.append(
            "selective recompute: torchtitan's is per-op SAC (saves matmul outputs), "
            "the closest to recomputing the attention core only"
        )
    if ctx.precision is Precision.FP8:
        notes.append(
            "fp8: add Float8LinearConverter to the config's model_spec converters (as "
            "llama3_debugmodel_float8 does); no command-line switch exists"
        )
    notes.append(
        f"model {s.name}: torchtitan's {config} builds it; compile and async TP off "
        "(the plan models eager kernels; turn them on for speed, same model)"
    )
    return notes


def _argv_lines(argv: list[str]) -> list[str]:
    """One line per flag with its value tokens; the trailing subcommand on its own line."""
    lines: list[str] = []
    for token in argv:
        if token.startswith("--") or token in RECOMPUTE_SUBCOMMANDS.values():
            lines.append(token)
        else:
            lines[-1] += " " + shlex.quote(token)
    return lines


def render(ctx: ExportContext) -> str:
    """``torchtitan.sh``: header comments and the torchrun line, one flag per line."""
    argv = torchtitan_args(ctx)
    env = [f"export {k}={v}" for k, v in allocator_env(ctx.inst.job).items()]
    launch = [
        f"torchrun --nnodes {ctx.cluster.num_nodes} --nproc-per-node {ctx.cluster.devices_per_node}",
        '--node-rank "${NODE_RANK:-0}" --rdzv-endpoint "${MASTER_ADDR:-localhost}:29500"',
        "-m torchtitan.train",
        *_argv_lines(argv),
    ]
    return (
        "\n".join(
            [
                "#!/usr/bin/env bash",
                comment_block(header_lines(ctx, FRAMEWORK) + _notes(ctx, argv[3])),
                "set -euo pipefail",
                *env,
                " \\\n  ".join(launch),
            ]
        )
        + "\n"
    )
