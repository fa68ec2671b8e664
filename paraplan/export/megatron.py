"""Megatron-LM export: a torchrun launch of ``pretrain_gpt.py`` with megatron-core 0.19.2 flags.

Flags from the 0.19.2 argument parser (docs/frameworks.md §2.2); the rules (rules/megatron.py)
are §2.3's, numbered as there, plus one hit at run time: Megatron-FSDP (our ZeRO-2 and ZeRO-3)
builds its DP x TP mesh over the whole world (``_get_dp_tp_mesh`` in
``megatron/core/distributed/fsdp/mcore_fsdp_adapter.py``), so it cannot run with PP > 1.

Mapping of the plan:
- ZeRO 0: plain DDP; 1: ``--use-distributed-optimizer``; 2 and 3: ``--use-megatron-fsdp`` with
  sharding strategy ``optim_grads`` / ``optim_grads_params`` (the distributed optimizer keeps a
  full gradient buffer, so it would not give ZeRO-2's memory).
- Stages: even, first/last, account-for slots, an explicit ``--pipeline-model-parallel-layout``,
  or a hybrid model's ``--hybrid-layer-pattern`` (which launches ``pretrain_mamba.py``):
  megatron_placement.py, with the rank groups.
- Rank order: ``tp-cp-ep-dp-pp`` (default) or ``tp-cp-ep-pp-dp`` (``--use-tp-pp-dp-mapping``).
- Mixture of experts: ``--expert-model-parallel-size`` = ep and ``--expert-tensor-parallel-size``
  = tp (paraplan's cost model keeps expert TP = TP, Megatron's default, written out); the
  dispatcher, EP overlap, CUDA graphs and routing: megatron_moe.py (rules/moe_state.py).
- Model shape: megatron_model.py (refuses ALiBi, parallel attention + MLP residuals, RoPE scalings
  megatron-core fixes differently); tests/export/test_megatron_lm_oracle.py parses every command.
- Recompute (``--recompute-*``) and activation offloading (``--fine-grained-activation-offloading``,
  ``--offload-modules``, with ``NVTE_CPU_OFFLOAD_V1=1`` in the environment): here, shared with nemo.py.

Size: one module because ``FLAGS`` is the one table of Megatron's flag names (STYLE.md Sec. 2)
and the argument vector is assembled beside it; model, placement and MoE state are split out.
"""

from __future__ import annotations

import shlex

from paraplan.cost import CPComm, Plan, Precision, Recompute
from paraplan.cost.plan import OffloadModule, RecomputeModule
from paraplan.cost.recompute_layers import uniform_recompute_layers
from paraplan.export import (
    ExportContext,
    comment_block,
    enforce,
    header_lines,
    uniform_recompute,
)
from paraplan.export.megatron_model import (
    ACTIVATION_FLAGS,
    MOE_DISPATCHER,
    NORMS,
    SINK_SOFTMAX,
    mla_args,
    model_args,
    moe_args,
    moe_layer_pattern,
)
from paraplan.export.megatron_moe import state_args
from paraplan.export.megatron_placement import (
    expert_rank_groups,
    pipeline_args,
    pipeline_layout,
    rank_groups,
)
from paraplan.graph import ModelSpec
from paraplan.rules import rules_of
from paraplan.rules.launch_env import megatron_job_env
from paraplan.rules.megatron import ORDERS, hybrid_pattern, megatron_order, tp_repairs

__all__ = [
    "FLAGS",
    "ORDERS",
    "render",
    "megatron_args",
    "megatron_env",
    "rank_groups",
    "megatron_order",
    "pipeline_layout",
    "pipeline_args",
    "tp_repairs",
    "moe_args",
    "mla_args",
    "moe_layer_pattern",
    "expert_rank_groups",
    "NORMS",
    "SINK_SOFTMAX",
    "MOE_DISPATCHER",
    "offload_settings",
]

FRAMEWORK = "Megatron-LM (megatron-core 0.19.2)"

FLAGS: dict[str, str] = {
    # model shape
    "num_layers": "--num-layers",
    "hidden": "--hidden-size",
    "ffn_hidden": "--ffn-hidden-size",
    "heads": "--num-attention-heads",
    "gqa": "--group-query-attention",
    "kv_heads": "--num-query-groups",
    "head_dim": "--kv-channels",
    "seq_len": "--seq-length",
    "max_positions": "--max-position-embeddings",
    "norm": "--normalization",
    "swiglu": "--swiglu",
    "relu2": "--squared-relu",
    "no_gelu_fusion": "--no-bias-gelu-fusion",
    "untied": "--untie-embeddings-and-output-weights",
    "num_experts": "--num-experts",
    "top_k": "--moe-router-topk",
    "moe_ffn_hidden": "--moe-ffn-hidden-size",
    "shared_ffn_hidden": "--moe-shared-expert-intermediate-size",
    "moe_latent_dim": "--moe-latent-size",
    "moe_layer_freq": "--moe-layer-freq",
    "grouped_gemm": "--moe-grouped-gemm",
    "no_bias": "--disable-bias-linear",
    "dispatcher": "--moe-token-dispatcher-type",
    "flex_backend": "--moe-flex-dispatcher-backend",
    # MoE software state (megatron_moe.py)
    "moe_overlap": "--overlap-moe-expert-parallel-comm",
    "cuda_graph_impl": "--cuda-graph-impl",
    "cuda_graph_modules": "--cuda-graph-modules",
    "no_nan_check": "--no-check-for-nan-in-loss-and-grad",
    "force_balance": "--moe-router-force-load-balancing",
    "router_fusion": "--moe-router-fusion",
    "permute_fusion": "--moe-permute-fusion",
    "capacity_factor": "--moe-expert-capacity-factor",
    "drop_policy": "--moe-token-drop-policy",
    "mla": "--multi-latent-attention",
    "q_lora_rank": "--q-lora-rank",
    "kv_lora_rank": "--kv-lora-rank",
    "qk_nope_head_dim": "--qk-head-dim",
    "qk_rope_head_dim": "--qk-pos-emb-head-dim",
    "v_head_dim": "--v-head-dim",
    "hidden_dropout": "--hidden-dropout",
    "attention_dropout": "--attention-dropout",
    "position_embedding": "--position-embedding-type",
    "rotary_base": "--rotary-base",
    "rotary_percent": "--rotary-percent",
    "rope_scaling": "--use-rope-scaling",
    "rope_scaling_factor": "--rope-scaling-factor",
    "rope_type": "--rope-type",
    "rotary_scaling_factor": "--rotary-scaling-factor",
    "mscale": "--mscale",
    "mscale_all_dim": "--mscale-all-dim",
    "yarn_original_max_positions": "--yarn-original-max-position-embeddings",
    "yarn_beta_fast": "--yarn-beta-fast",
    "yarn_beta_slow": "--yarn-beta-slow",
    "yarn_no_rounding": "--no-yarn-correction-range-round-to-int",
    "norm_eps": "--norm-epsilon",
    "zero_centered_norm": "--apply-layernorm-1p",
    "qkv_bias": "--add-qkv-bias",
    "qk_norm": "--qk-layernorm",
    "window": "--window-size",
    "window_skip_freq": "--window-attn-skip-freq",
    "softmax_type": "--softmax-type",
    "router_score": "--moe-router-score-function",
    "router_pre_softmax": "--moe-router-pre-softmax",
    "router_expert_bias": "--moe-router-enable-expert-bias",
    "router_groups": "--moe-router-num-groups",
    "router_group_topk": "--moe-router-group-topk",
    "router_scaling": "--moe-router-topk-scaling-factor",
    "router_balance": "--moe-router-load-balancing-type",
    "aux_loss_coeff": "--moe-aux-loss-coeff",
    # parallelism
    "tp": "--tensor-model-parallel-size",
    "pp": "--pipeline-model-parallel-size",
    "vp": "--num-virtual-stages-per-pipeline-rank",
    "layout": "--pipeline-model-parallel-layout",
    "hybrid_pattern": "--hybrid-layer-pattern",
    "mtp_layers": "--mtp-num-layers",
    "first_stage_layers": "--decoder-first-pipeline-num-layers",
    "last_stage_layers": "--decoder-last-pipeline-num-layers",
    "account_for_embedding": "--account-for-embedding-in-pipeline-split",
    "account_for_loss": "--account-for-loss-in-pipeline-split",
    "cp": "--context-parallel-size",
    "cp_comm": "--cp-comm-type",
    "sp": "--sequence-parallel",
    "ep": "--expert-model-parallel-size",
    "etp": "--expert-tensor-parallel-size",
    "tp_pp_dp_order": "--use-tp-pp-dp-mapping",
    # batch
    "micro_batch": "--micro-batch-size",
    "global_batch": "--global-batch-size",
    # data parallel / ZeRO
    "distributed_optimizer": "--use-distributed-optimizer",
    "fsdp": "--use-megatron-fsdp",
    "fsdp_strategy": "--data-parallel-sharding-strategy",
    "ckpt_format": "--ckpt-format",
    "overlap_grad_reduce": "--overlap-grad-reduce",
    "overlap_param_gather": "--overlap-param-gather",
    "bf16_grads": "--grad-reduce-in-bf16",
    # recompute
    "recompute": "--recompute-granularity",
    "recompute_method": "--recompute-method",
    "recompute_layers": "--recompute-num-layers",
    "recompute_modules": "--recompute-modules",
    # fine-grained activation offloading (cost/offload.py)
    "activation_offloading": "--fine-grained-activation-offloading",
    "offload_modules": "--offload-modules",
    # precision
    "bf16": "--bf16",
    "fp16": "--fp16",
    "fp8": "--fp8-format",
    "fp8_recipe": "--fp8-recipe",
    "fp4": "--fp4-format",
    "fp4_recipe": "--fp4-recipe",
    # data and run length (synthetic data so the script runs as is)
    "mock_data": "--mock-data",
    "tokenizer": "--tokenizer-type",
    "vocab": "--vocab-size",
    "train_iters": "--train-iters",
}
"""paraplan concept -> Megatron-LM flag; the only place Megatron flag names appear."""

FSDP_STRATEGIES = {2: "optim_grads", 3: "optim_grads_params"}
FSDP_CKPT_FORMAT = "fsdp_dtensor"  # Megatron-FSDP refuses any other (rule 28)
SELECTIVE_MODULES = "core_attn"  # paraplan's selective recompute = the attention core
FULL_RECOMPUTE = ("uniform", "1")  # method, layers per recompute unit: every layer recomputed
FP8_FORMAT = "hybrid"  # e4m3 forward, e5m2 backward (Transformer Engine)
MOCK_TOKENIZER = "NullTokenizer"
DEFAULT_TRAIN_ITERS = 100
CUDA_CONNECTIONS_VAR = "CUDA_DEVICE_MAX_CONNECTIONS"
GPT_SCRIPT = "pretrain_gpt.py"
HYBRID_SCRIPT = "pretrain_mamba.py"  # Megatron-LM's entry point for hybrid (Mamba) models


CP_COMM_TYPES = {CPComm.P2P: "p2p", CPComm.ALL_GATHER: "allgather"}
"""plan.cp_comm -> ``--cp-comm-type`` value (docs/frameworks.md Sec. 2.2)."""


# --------------------------------------------------------------------------- arguments


def _parallel_args(plan: Plan, spec: ModelSpec) -> list[tuple[str, object]]:
    args: list[tuple[str, object]] = [("tp", plan.tp)]
    if plan.tp > 1 and plan.sequence_parallel:
        args.append(("sp", None))
    args += pipeline_args(plan, spec)
    if plan.cp > 1:
        args += [("cp", plan.cp), ("cp_comm", CP_COMM_TYPES[plan.cp_comm])]
    if plan.ep > 1 or plan.expert_tp != plan.tp:
        args += [("ep", plan.ep), ("etp", plan.expert_tp)]
    if megatron_order(plan) == "tp-cp-ep-pp-dp":
        args.append(("tp_pp_dp_order", None))
    return args


def _data_parallel_args(ctx: ExportContext, plan: Plan) -> list[tuple[str, object]]:
    args: list[tuple[str, object]] = []
    if plan.zero == 1:
        args.append(("distributed_optimizer", None))
    elif plan.zero >= 2:
        args += [
            ("fsdp", None),
            ("fsdp_strategy", FSDP_STRATEGIES[plan.zero]),
            ("ckpt_format", FSDP_CKPT_FORMAT),
        ]
    if ctx.inst.job.overlap_dp_comm and plan.dp * plan.cp > 1:
        args.append(("overlap_grad_reduce", None))
        if plan.zero >= 1:
            args.append(("overlap_param_gather", None))
    if not ctx.inst.job.fp32_grads:
        args.append(("bf16_grads", None))
    return args


def recompute_settings(
    plan: Plan, modules: frozenset[RecomputeModule] = frozenset()
) -> list[tuple[str, object]]:
    """The plan's recompute as (flag key, value) pairs: selective -> core_attn, or
    ``job.recompute_modules`` (``modules``) in Megatron's order of choices; full -> method
    uniform, 1 layer per unit (every layer); partial (Plan.recompute_layers, the one N every
    rank shares: rules.megatron.check_recompute_layers) -> method block, N layers per chunk
    (megatron/core/recompute.py checkpointed_forward). NeMo / Bridge take the same values."""
    mode = uniform_recompute(plan)
    if mode is Recompute.SELECTIVE and modules:
        return [
            ("recompute", "selective"),
            ("recompute_modules", tuple(m.value for m in RecomputeModule if m in modules)),
        ]
    if mode is Recompute.SELECTIVE:
        return [("recompute", "selective"), ("recompute_modules", SELECTIVE_MODULES)]
    if mode is Recompute.FULL:
        n = uniform_recompute_layers(plan)
        method, layers = ("block", str(n)) if n is not None else FULL_RECOMPUTE
        return [("recompute", "full"), ("recompute_method", method), ("recompute_layers", layers)]
    return []


LOW_PRECISION_ARGS: dict[Precision, list[tuple[str, object]]] = {
    Precision.FP8: [("fp8", FP8_FORMAT)],  # megatron-core's default recipe (delayed scaling)
    Precision.FP8_BLOCKWISE: [("fp8", FP8_FORMAT), ("fp8_recipe", "blockwise")],
    Precision.MXFP8: [("fp8", "e4m3"), ("fp8_recipe", "mxfp8")],
    Precision.NVFP4: [("fp4", "e2m1"), ("fp4_recipe", "nvfp4")],
}
"""FP8 and FP4 settings beside --bf16: megatron-core 0.19.2 recipes (TransformerConfig fp8_recipe /
fp4_recipe), with the formats Megatron-Bridge 0.6.2's recipes pair them with (training/mixed_precision.py:
bf16_with_fp8_subchannel_scaling_mixed, bf16_with_mxfp8_mixed, bf16_with_nvfp4_mixed)."""


def offload_settings(modules: frozenset[OffloadModule]) -> list[tuple[str, object]]:
    """``job.offload_modules`` as Megatron's --fine-grained-activation-offloading and
    --offload-modules (in Megatron's order of choices); [] when empty."""
    if not modules:
        return []
    ordered = tuple(m.value for m in OffloadModule if m in modules)
    return [("activation_offloading", None), ("offload_modules", ordered)]


def _precision_args(precision: Precision) -> list[tuple[str, object]]:
    if precision is Precision.FP16:
        return [("fp16", None)]
    return [("bf16", None), *LOW_PRECISION_ARGS.get(precision, [])]


def _flag_args(ctx: ExportContext) -> list[tuple[str, object]]:
    plan = ctx.plan
    job = ctx.inst.job
    return (
        model_args(ctx)
        + _parallel_args(plan, ctx.spec)
        + [("micro_batch", plan.micro_batch), ("global_batch", job.global_batch)]
        + _data_parallel_args(ctx, plan)
        + recompute_settings(plan, job.recompute_modules)
        + offload_settings(job.offload_modules)
        + _precision_args(ctx.precision)
        + state_args(ctx)
        + [
            ("mock_data", None),
            ("tokenizer", MOCK_TOKENIZER),
            ("vocab", ctx.spec.vocab),
            ("train_iters", DEFAULT_TRAIN_ITERS),
        ]
    )


def megatron_args(ctx: ExportContext) -> list[str]:
    """The ``pretrain_gpt.py`` argument vector for the context's plan (rules enforced first)."""
    enforce(ctx, FRAMEWORK, rules_of("megatron").rules)  # its launch rules first
    argv: list[str] = []
    for key, value in _flag_args(ctx):
        argv.append(FLAGS[key])
        if isinstance(value, tuple):  # a flag of several arguments (nargs='+')
            argv += [str(v) for v in value]
        elif value is not None:
            argv.append(str(value))
    return argv


def megatron_env(ctx: ExportContext) -> dict[str, str | None]:
    """Environment the launch needs (None: unset): rules 28, 31 and rules/launch_env.py's allocator."""
    plan = ctx.plan
    env: dict[str, str | None] = megatron_job_env(ctx.inst.job)
    if plan.zero >= 2:
        env[CUDA_CONNECTIONS_VAR] = None  # Megatron-FSDP needs it unset or > 1
    elif plan.tp > 1 or plan.cp > 1:
        env[CUDA_CONNECTIONS_VAR] = "1"  # TP/CP comm ordering on pre-Blackwell GPUs
    return env


# --------------------------------------------------------------------------- render


def _argv_lines(argv: list[str]) -> list[str]:
    lines: list[str] = []
    for token in argv:
        if token.startswith("--"):
            lines.append(token)
        else:
            lines[-1] += " " + shlex.quote(token)
    return lines


def _notes(ctx: ExportContext) -> list[str]:
    plan = ctx.plan
    order = megatron_order(plan)
    notes = [f"rank order: {order} (paraplan order {'-'.join(a.value for a in plan.order)})"]
    if plan.sequence_parallel and plan.tp == 1:
        notes.append("sequence_parallel is a no-op with tp=1, so --sequence-parallel is omitted")
    if ctx.spec.activation.value not in ACTIVATION_FLAGS and ctx.spec.activation.value != "gelu":
        notes.append(
            f"activation {ctx.spec.activation.value}: no Megatron-LM flag; set "
            "TransformerConfig.activation_func in your model provider"
        )
    notes.append(
        "model shape and parallelism come from the plan; add data, tokenizer, optimizer "
        "and logging flags as extra arguments (they are passed through)"
    )
    return notes


def _num_nodes(ctx: ExportContext) -> int:
    """Nodes the job runs on: all of them, or on a mixed-GPU cluster those of the used pools."""
    pools = ctx.cluster.pools
    if not pools or not ctx.plan.stage_pools:
        return ctx.cluster.num_nodes
    return sum(pools[p].num_nodes for p in set(ctx.plan.stage_pools))


def render(ctx: ExportContext) -> str:
    """The launch script: header, environment, torchrun line with every flag, one per line."""
    argv = megatron_args(ctx)
    env = megatron_env(ctx)
    cluster = ctx.cluster
    env_lines = [f"unset {k}" if v is None else f"export {k}={v}" for k, v in env.items()]
    launch = [
        f"torchrun --nnodes {_num_nodes(ctx)} --nproc-per-node {cluster.devices_per_node}",
        '--node-rank "${NODE_RANK:-0}" --master-addr "${MASTER_ADDR:-localhost}"',
        '--master-port "${MASTER_PORT:-6000}"',
        f'"${{MEGATRON_LM:-.}}/{HYBRID_SCRIPT if hybrid_pattern(ctx.spec) else GPT_SCRIPT}"',
        *_argv_lines(argv),
        '"$@"',
    ]
    body = " \\\n  ".join(launch)
    return (
        "\n".join(
            [
                "#!/usr/bin/env bash",
                comment_block(header_lines(ctx, FRAMEWORK) + _notes(ctx)),
                "set -euo pipefail",
                *env_lines,
                body,
            ]
        )
        + "\n"
    )
