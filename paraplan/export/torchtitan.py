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
  runs on pp rank r, torchtitan's "loop" placement), schedule ``1F1B`` or ``Interleaved1F1B``,
  micro-batch ``pipeline_parallel_microbatch_size`` and ``local_batch_size`` = micro x count.
- rank order: the mesh is ``[pp, dp_replicate, dp_shard, cp, tp]``, i.e. tp-cp-dp-pp.
- ep: ``expert_parallel_degree``; the sparse mesh ``[pp, dp_replicate, efsdp, ep]`` carves ep out
  of dp_shard x cp x tp, innermost first, which is the cost model's EP group (the innermost ep
  ranks of dp x cp) when tp = 1 and dp is sharded (ZeRO 1-3; with ZeRO-0, ep must divide cp).

Rules enforced: PP and EP (its all-to-all dispatcher synchronises with the CPU) need
``--training.disable-cuda-graphs`` (emitted); local batch % PP
micro-batch; global batch % (local x dp); Schedule1F1B needs micro-batches >= stages and
Interleaved1F1B needs n % max(1, n // pp) == 0 (torch 2.13); one recompute mode for all stages;
cp needs seq_len % (2 x cp) (head-tail load balancer); bf16 or fp32 parameters only (no fp16).
"""

from __future__ import annotations

import shlex
from dataclasses import replace

from paraplan.cost import Axis, CPComm, Plan, Precision, Recompute
from paraplan.cost.plan import chunk_layers
from paraplan.export import (
    Draft,
    ExportContext,
    Fix,
    Refusal,
    SearchLimits,
    check_dense_model,
    check_expert_tp_is_tp,
    comment_block,
    enforce,
    header_lines,
    micro_batch_repairs,
    order_fixes,
    order_matches,
    regroup,
    repair,
    uniform_recompute,
    uniform_recompute_rule,
)
from paraplan.graph import ModelSpec, preset
from paraplan.graph.spec import Rope

__all__ = ["FLAGS", "RULES", "ORDER", "CONFIGS", "render", "torchtitan_args", "model_parts"]

FRAMEWORK = "torchtitan 0.3.0"

FLAGS: dict[str, str] = {
    "module": "--module", "config": "--config",
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
    "local_batch": "--training.local-batch-size", "global_batch": "--training.global-batch-size",
    "seq_len": "--training.seq-len", "mixed_precision": "--training.mixed-precision-param",
    "no_cuda_graphs": "--training.disable-cuda-graphs",
    "no_compile": "--compile.no-enable",
    "no_async_tp": "--compile.no-enable-async-tensor-parallel",
}
"""paraplan concept -> torchtitan 0.3.0 flag; the only place torchtitan option names appear."""

RECOMPUTE_SUBCOMMANDS = {
    Recompute.NONE: "activation-checkpoint:none",
    Recompute.SELECTIVE: "activation-checkpoint:selective",
    Recompute.FULL: "activation-checkpoint:full",
}
SCHEDULES = {False: "1F1B", True: "Interleaved1F1B"}  # keyed by "interleaved"
RESHARD = {1: "never", 2: "never", 3: "always"}
PARAM_DTYPES = {Precision.BF16: "bfloat16", Precision.FP8: "bfloat16"}
EMBEDDING, LAYER, FINAL_NORM, HEAD = "tok_embeddings", "layers.{}", "norm", "lm_head"
CONFIGS: dict[str, tuple[str, str]] = {
    "llama3.1-8b": ("llama3", "llama3_8b"), "llama3.1-70b": ("llama3", "llama3_70b"),
    "llama3.1-405b": ("llama3", "llama3_405b"), "qwen3-32b": ("qwen3", "qwen3_32b"),
    "qwen3-30b-a3b": ("qwen3", "qwen3_30b_a3b"), "deepseek-v3": ("deepseek_v3", "deepseek_v3_671b"),
    "gpt-oss-120b": ("gpt_oss", "gpt_oss_120b"),
}
"""paraplan preset -> torchtitan 0.3.0 (module, config_registry function) building the same model
(tests/export/test_torchtitan_oracle.py builds each and compares). torchtitan takes the model
shape only from such a function: a model equal to none of these presets is refused. The llama3
functions build Llama 3.1 (RoPE scaling x8), so Llama 3 without scaling is refused too."""
FLOAT8_CONFIGS = {"llama3_405b"}
"""Config functions that convert linear layers to float8 (Float8LinearConverter in
model_spec; no command-line option removes it): only an fp8 plan may use them."""

ORDER = (Axis.TP, Axis.CP, Axis.DP, Axis.PP)
"""Mesh [pp, dp_replicate, dp_shard, cp, tp], row-major: tp varies fastest."""


# --------------------------------------------------------------------------- rules


def _num_micro_batches(ctx: ExportContext, draft: Draft) -> int:
    p = draft.plan
    return ctx.inst.job.global_batch // (p.micro_batch * p.dp)


def check_batch(ctx: ExportContext, draft: Draft) -> Refusal | None:
    """global_batch_size % (local_batch_size x dp) == 0 (trainer)."""
    p, gb = draft.plan, ctx.inst.job.global_batch
    if gb % (p.micro_batch * p.dp) == 0:
        return None
    return Refusal(f"training.global_batch_size={gb} must be divisible by local batch x dp = "
                   f"{p.micro_batch}*{p.dp}", micro_batch_repairs(draft, gb))


def check_schedule(ctx: ExportContext, draft: Draft) -> Refusal | None:
    """torch 2.13: 1F1B needs n >= stages; Interleaved1F1B needs n % max(1, n // pp) == 0."""
    p = draft.plan
    if p.pp == 1:
        return None
    n = _num_micro_batches(ctx, draft)
    if p.vp == 1 and n < p.pp:
        return Refusal(f"Schedule1F1B needs at least pp={p.pp} micro-batches per step; the plan "
                       f"has {n}", repair("pp -> 1, dp absorbs it", draft, regroup(p, pp=1)))
    if p.vp > 1 and n % max(1, n // p.pp):
        return Refusal(f"ScheduleInterleaved1F1B needs the {n} micro-batches to satisfy "
                       f"n % max(1, n // pp) == 0 with pp={p.pp}",
                       repair("vp -> 1", draft, replace(p, vp=1)))
    return None


check_uniform_recompute = uniform_recompute_rule(
    "the activation-checkpoint subcommand applies to every stage")


def check_context_split(ctx: ExportContext, draft: Draft) -> Refusal | None:
    """The head-tail load balancer cuts the sequence into 2 x cp chunks."""
    cp, seq = draft.plan.cp, ctx.inst.job.seq_len
    if cp == 1 or seq % (2 * cp) == 0:
        return None
    return Refusal(f"training.seq_len={seq} must be divisible by 2*cp = {2 * cp} (head-tail "
                   "load balancer)", repair("cp -> 1, dp absorbs it", draft, regroup(draft.plan,
                                                                                     cp=1)))


def check_precision(ctx: ExportContext, draft: Draft) -> Refusal | None:
    """training.mixed_precision_param accepts bfloat16 and float32 only."""
    if draft.precision in PARAM_DTYPES:
        return None
    return Refusal(f"job.precision={draft.precision.value}: training.mixed_precision_param takes "
                   "bfloat16 or float32 only", (Fix("precision -> bf16",
                                                   replace(draft, precision=Precision.BF16)),))


def check_rank_order(ctx: ExportContext, draft: Draft) -> Refusal | None:
    """Mesh [pp, dp_replicate, dp_shard, cp, tp]: tp-cp-dp-pp innermost first."""
    if order_matches(draft.plan, ORDER):
        return None
    order = "-".join(a.value for a in draft.plan.order)
    return Refusal(f"plan.order={order}: torchtitan's mesh [pp, dp_replicate, dp_shard, cp, tp] "
                   "places tp innermost, then cp, dp, pp", order_fixes(draft, [("tp-cp-dp-pp",
                                                                                ORDER)]))


def check_expert_mesh(ctx: ExportContext, draft: Draft) -> Refusal | None:
    """dp_shard x cp x tp == efsdp x ep with ep innermost: ep ranks inside dp_shard x cp, tp = 1."""
    p = draft.plan
    shard = p.dp if p.zero >= 1 else 1
    if p.ep == 1 or (p.tp == 1 and (shard * p.cp) % p.ep == 0):
        return None
    return Refusal(
        f"plan.ep={p.ep}: torchtitan carves ep out of dp_shard x cp x tp = {shard}*{p.cp}*{p.tp} "
        "innermost first, so the expert-parallel group matches the plan's only with tp=1 and ep "
        "dividing dp_shard x cp",
        repair("tp -> 1, dp absorbs it", draft, regroup(p, tp=1) if p.tp > 1 else None)
        + repair("zero -> 1", draft, replace(p, zero=1) if p.zero == 0 else None)
        + repair("ep -> 1", draft, replace(p, ep=1)))


def check_cp_comm(ctx: ExportContext, draft: Draft) -> Refusal | None:
    """torchtitan 0.3 has no option selecting the K/V exchange (0.2.x had
    context_parallel_rotate_method); only the ring (p2p) plan is exported."""
    p = draft.plan
    if p.cp == 1 or p.cp_comm is CPComm.P2P:
        return None
    return Refusal(f"plan.cp_comm={p.cp_comm.value}: torchtitan 0.3 has no option to select the "
                   "context-parallel K/V exchange", repair("cp_comm -> p2p", draft,
                                                           replace(p, cp_comm=CPComm.P2P)))


# torchtitan 0.3 dropped 0.2.x's expert_tensor_parallel_degree: expert TP must be the default, tp
check_expert_tp = check_expert_tp_is_tp("torchtitan 0.3 has no expert tensor-parallel option")


def torchtitan_config(spec: ModelSpec) -> tuple[str, str] | None:
    """The (module, config function) whose model equals ``spec`` (any name), or None. A model that
    differs only in its RoPE frequency scaling (Llama 3 beside torchtitan's Llama 3.1 configs)
    counts: shapes, parameters and cost are the same, and the export notes the difference."""
    return next((target for name, target in CONFIGS.items()
                 if _same_but_rope_scaling(preset(name), spec)), None)


def _same_but_rope_scaling(built: ModelSpec, spec: ModelSpec) -> bool:
    def unscaled(m: ModelSpec) -> ModelSpec:
        return replace(m, name="", rope=Rope(theta=m.rope.theta, fraction=m.rope.fraction))
    if replace(built, name=spec.name) == spec:
        return True
    return unscaled(built) == unscaled(spec) and {built.rope.scaling, spec.rope.scaling} <= {"", "llama3"}


def _rope_note(spec: ModelSpec, config: str) -> list[str]:
    """The note when torchtitan's config scales RoPE frequencies differently from the plan's model."""
    name = next(n for n, t in CONFIGS.items() if t[1] == config)
    built = preset(name).rope
    if built.scaling == spec.rope.scaling and built.factor == spec.rope.factor:
        return []
    return [f"model: torchtitan's {config} builds {name}'s RoPE frequency scaling "
            f"({built.scaling or 'none'}, factor {built.factor:g}); {spec.name} has "
            f"{spec.rope.scaling or 'none'}. Shapes, parameters and cost are the same; to load "
            f"{spec.name} weights, set its rope scaling in the config function"]


def check_model_config(ctx: ExportContext, draft: Draft) -> Refusal | None:
    """torchtitan builds only the models of its config_registry functions (CONFIGS)."""
    if torchtitan_config(ctx.spec) is not None:
        return None
    same_shape = [n for n in CONFIGS if _shape(preset(n)) == _shape(ctx.spec)]
    hint = (f"; preset {same_shape[0]} has its shape but another architecture (e.g. RoPE "
            "scaling), so torchtitan would train another model" if same_shape else "")
    return Refusal(f"model {ctx.spec.name} is none of the models torchtitan 0.3.0's config "
                   f"functions build ({', '.join(CONFIGS)}): the model shape is Python, not a "
                   f"command-line option{hint}")


def check_float8_config(ctx: ExportContext, draft: Draft) -> Refusal | None:
    """llama3_405b converts linear layers to float8: only fp8 plans may use it."""
    target = torchtitan_config(ctx.spec)
    if target is None or target[1] not in FLOAT8_CONFIGS or draft.precision is Precision.FP8:
        return None
    return Refusal(f"torchtitan's {target[1]} trains in float8 (Float8LinearConverter, which no "
                   f"command-line option removes), not job.precision={draft.precision.value}",
                   (Fix("precision -> fp8", replace(draft, precision=Precision.FP8)),))


def _shape(spec: ModelSpec) -> tuple[int, ...]:
    return (spec.num_layers, spec.hidden, spec.ffn_hidden, spec.num_heads, spec.num_kv_heads,
            spec.vocab, spec.num_experts)


RULES = (check_model_config, check_float8_config, check_dense_model, check_cp_comm,
         check_expert_tp, check_batch, check_precision, check_context_split,
         check_uniform_recompute, check_schedule, check_rank_order, check_expert_mesh)

SEARCH = SearchLimits()
"""solver.target=torchtitan: module names per stage express any split; one activation-checkpoint setting."""
MODEL_RULES = (check_model_config, check_float8_config, check_precision)
"""The RULES that read only the model and job (solver.target checks them once, first)."""


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
        args += [("pp", p.pp), ("schedule", SCHEDULES[p.vp > 1]),
                 ("pp_micro_batch", p.micro_batch), ("model_parts", parts)]
    return args


def _training_args(ctx: ExportContext) -> list[tuple[str, object]]:
    p, job = ctx.plan, ctx.inst.job
    n = job.global_batch // (p.micro_batch * p.dp)
    local = p.micro_batch * n if p.pp > 1 else p.micro_batch  # PP: one step runs all micro-batches
    args: list[tuple[str, object]] = [
        ("local_batch", local), ("global_batch", job.global_batch), ("seq_len", job.seq_len),
        ("mixed_precision", PARAM_DTYPES[ctx.precision]),
    ]
    if p.pp > 1 or p.ep > 1:  # Trainer.Config._validate_cuda_graphs: no PP, no blocking EP
        args.append(("no_cuda_graphs", None))
    return args + [("no_compile", None), ("no_async_tp", None)]  # the plan models eager kernels


def torchtitan_args(ctx: ExportContext) -> list[str]:
    """``torchtitan.train`` arguments, activation-checkpoint subcommand last (rules enforced)."""
    enforce(ctx, FRAMEWORK, RULES)
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
    notes = ["rank order: mesh [pp, dp_replicate, dp_shard, cp, tp] (paraplan order "
             f"{'-'.join(a.value for a in p.order)})", *_rope_note(s, config)]
    if p.zero == 1:
        z2 = ctx.score(Draft(replace(p, zero=2), ctx.precision))
        cost = (f" (modelled {z2.predicted.step_time_s:.4g} s vs {ctx.step_time_s:.4g} s)"
                if z2 else "")
        notes.append("zero=1 runs as ZeRO-2: FSDP2 shards gradients with the optimizer "
                     f"state{cost}")
    if uniform_recompute(p) is Recompute.SELECTIVE:
        notes.append("selective recompute: torchtitan's is per-op SAC (saves matmul outputs), "
                     "the closest to recomputing the attention core only")
    if ctx.precision is Precision.FP8:
        notes.append("fp8: add Float8LinearConverter to the config's model_spec converters (as "
                     "llama3_debugmodel_float8 does); no command-line switch exists")
    notes.append(f"model {s.name}: torchtitan's {config} builds it; compile and async TP off "
                 "(the plan models eager kernels; turn them on for speed, same model)")
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
    launch = [f"torchrun --nnodes {ctx.cluster.num_nodes} --nproc-per-node "
              f"{ctx.cluster.devices_per_node}",
              '--node-rank "${NODE_RANK:-0}" --rdzv-endpoint "${MASTER_ADDR:-localhost}:29500"',
              "-m torchtitan.train", *_argv_lines(argv)]
    return "\n".join([
        "#!/usr/bin/env bash",
        comment_block(header_lines(ctx, FRAMEWORK) + _notes(ctx, argv[3])),
        "set -euo pipefail",
        " \\\n  ".join(launch),
    ]) + "\n"
