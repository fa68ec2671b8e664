"""Megatron-LM export: a torchrun launch of ``pretrain_gpt.py`` with megatron-core 0.19.2 flags.

Flag names were dumped from the 0.19.2 argument parser (docs/frameworks.md §2.2); the rules
(paraplan/rules/megatron.py) are §2.3's, numbered as there, plus one Megatron only hits at run
time: Megatron-FSDP (our ZeRO-2 and ZeRO-3) builds its DP x TP device mesh over the whole world
(``_get_dp_tp_mesh`` in ``megatron/core/distributed/fsdp/mcore_fsdp_adapter.py``), so it cannot
run with PP > 1.

Mapping of the plan:
- ZeRO 0: plain DDP; 1: ``--use-distributed-optimizer``; 2 and 3: ``--use-megatron-fsdp`` with
  sharding strategy ``optim_grads`` / ``optim_grads_params`` (the distributed optimizer keeps a
  full gradient buffer, so it would not give ZeRO-2's memory).
- Even stages: nothing, or ``--num-virtual-stages-per-pipeline-rank``; stages that differ only at
  the first/last rank: ``--decoder-first/last-pipeline-num-layers``; anything else: an explicit
  ``--pipeline-model-parallel-layout`` (virtual stage s = v * pp + r runs on pp rank r).
- Unequal virtual stages (plan.layers_per_chunk): every chunk q layers but the first of rank 0
  and/or the last of the last rank, q - 1: ``--account-for-embedding-in-pipeline-split`` /
  ``--account-for-loss-in-pipeline-split`` (megatron-core ``get_num_layers_to_build``: the
  (layers + 1 + 1) / pp slots per rank split by vp, one slot taken by the embedding / loss);
  any other chunk layout: ``--pipeline-model-parallel-layout``.
- The layout string is built from the plan's layer positions (rules/megatron.py
  ``layout_stages``, ``compact_layout``): 'E', the stage's decoder layers 't', its MTP layers 'm',
  'L', runs of equal stages as ``(tt|)*29``; MTP layers anywhere but the last virtual stage also
  need it. Hybrid models (``spec.layer_pattern``) take no layout: their stages are '|' segments
  of ``--hybrid-layer-pattern`` (megatron-core refuses the layout, vp, first/last and account-for
  flags next to it) and they launch ``pretrain_mamba.py``.
- Rank order: ``tp-cp-ep-dp-pp`` (default) or ``tp-cp-ep-pp-dp`` (``--use-tp-pp-dp-mapping``).
- Mixture of experts: ``--num-experts``, ``--moe-router-topk``, ``--moe-ffn-hidden-size``, shared
  experts, ``--moe-layer-freq`` (a 0/1 pattern when some layers are dense), the alltoall token
  dispatcher with grouped GEMM; ``--expert-model-parallel-size`` = ep and
  ``--expert-tensor-parallel-size`` = tp (paraplan's cost model keeps expert TP = TP, Megatron's
  default, written out). Latent attention: ``--multi-latent-attention`` and its ranks and dims.
- Architecture (ModelSpec): position embedding type, RoPE base / rotated fraction / llama3 or
  YaRN scaling, norm epsilon and zero-centred LayerNorm, biases (all linear layers, or QKV only),
  QK-norm (under MLA the q/kv latent norms), attention windows and sinks, and the MoE router
  (score function, top-k normalisation, expert bias, group-limited routing, scaling, balance
  loss). Refused (check_architecture): ALiBi, a parallel attention + MLP residual, and RoPE
  scalings megatron-core fixes differently. tests/export/test_megatron_lm_oracle.py parses every
  family's command with Megatron-LM 0.19.2 and checks the built model's parameter count.
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from math import prod

from paraplan.cost import Axis, CPComm, Plan, Precision, Recompute
from paraplan.cost.plan import chunk_layers, is_even_chunks
from paraplan.cost.recompute_layers import uniform_recompute_layers
from paraplan.export import (
    ExportContext,
    comment_block,
    enforce,
    header_lines,
    uniform_recompute,
)
from paraplan.graph import ModelSpec
from paraplan.result import PlanOut
from paraplan.rules import megatron as rules
from paraplan.rules.megatron import (
    ORDERS,
    compact_layout,
    hybrid_pattern,
    hybrid_stage_pattern,
    layout_stages,
    megatron_order,
    mtp_layers,
    stage_contents,
    tp_repairs,
)

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
    "moe_layer_freq": "--moe-layer-freq",
    "grouped_gemm": "--moe-grouped-gemm",
    "no_bias": "--disable-bias-linear",
    "dispatcher": "--moe-token-dispatcher-type",
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
    # precision
    "bf16": "--bf16",
    "fp16": "--fp16",
    "fp8": "--fp8-format",
    # data and run length (synthetic data so the script runs as is)
    "mock_data": "--mock-data",
    "tokenizer": "--tokenizer-type",
    "vocab": "--vocab-size",
    "train_iters": "--train-iters",
}
"""paraplan concept -> Megatron-LM flag; the only place Megatron flag names appear."""

NORMS = {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}
POSITION_TYPES = {"rope": "rope", "learned": "learned_absolute", "none": "none"}
"""ModelSpec.position_embedding -> --position-embedding-type (ALiBi has none: refused)."""
SINK_SOFTMAX = "learnable"  # TransformerConfig.softmax_type for a learned sink logit per head
ACTIVATION_FLAGS = {"swiglu": "swiglu", "relu2": "relu2"}  # gelu is Megatron's default
FSDP_STRATEGIES = {2: "optim_grads", 3: "optim_grads_params"}
FSDP_CKPT_FORMAT = "fsdp_dtensor"  # Megatron-FSDP refuses any other (rule 28)
SELECTIVE_MODULES = "core_attn"  # paraplan's selective recompute = the attention core
FULL_RECOMPUTE = ("uniform", "1")  # method, layers per recompute unit: every layer recomputed
FP8_FORMAT = "hybrid"  # e4m3 forward, e5m2 backward (Transformer Engine)
MOCK_TOKENIZER = "NullTokenizer"
DEFAULT_TRAIN_ITERS = 100
MOE_DISPATCHER = "alltoall"  # the all-to-all dispatch + combine paraplan's cost model prices
CUDA_CONNECTIONS_VAR = "CUDA_DEVICE_MAX_CONNECTIONS"
GPT_SCRIPT = "pretrain_gpt.py"
HYBRID_SCRIPT = "pretrain_mamba.py"  # Megatron-LM's entry point for hybrid (Mamba) models


CP_COMM_TYPES = {CPComm.P2P: "p2p", CPComm.ALL_GATHER: "allgather"}
"""plan.cp_comm -> ``--cp-comm-type`` value (docs/frameworks.md Sec. 2.2)."""


# --------------------------------------------------------------------------- rank groups


def rank_groups(plan: PlanOut | Plan) -> dict[str, list[list[int]]]:
    """Ranks of every tp/cp/dp/pp group under the plan's order (innermost axis varies fastest).

    Rank = sum over axes of coordinate x stride, stride = product of the degrees ordered inside.
    Groups are listed by their smallest rank.
    """
    order = [str(a) for a in plan.order]
    degree = {a: int(getattr(plan, a)) for a in order}
    stride = {a: prod(degree[b] for b in order[:i]) for i, a in enumerate(order)}
    world = prod(degree.values())
    groups: dict[str, list[list[int]]] = {}
    for a in order:
        bases = sorted({r - (r // stride[a] % degree[a]) * stride[a] for r in range(world)})
        groups[a] = [[b + k * stride[a] for k in range(degree[a])] for b in bases]
    return groups


def expert_rank_groups(plan: Plan) -> list[list[int]]:
    """Ranks of every expert-parallel group: the innermost ep ranks of each dp x cp group (the
    cost model's EP group, cost/ep.py), listed by their smallest rank."""
    strides = {a: prod(plan.degree(b) for b in plan.order[:i]) for i, a in enumerate(plan.order)}
    cp_inner = plan.order.index(Axis.CP) < plan.order.index(Axis.DP)
    inner, outer = (Axis.CP, Axis.DP) if cp_inner else (Axis.DP, Axis.CP)
    d1 = plan.degree(inner)
    if plan.ep <= d1:
        axes = [(strides[inner], plan.ep)]
    else:
        axes = [(strides[inner], d1), (strides[outer], plan.ep // d1)]
    offsets = [0]
    for stride, degree in axes:
        offsets = [o + k * stride for o in offsets for k in range(degree)]
    seen: set[int] = set()
    out: list[list[int]] = []
    for rank in range(plan.num_devices):  # the smallest rank not yet seen is a group's first
        if rank not in seen:
            group = sorted(rank + o for o in offsets)
            seen.update(group)
            out.append(group)
    return out


# --------------------------------------------------------------------------- arguments


def pipeline_layout(plan: Plan, spec: ModelSpec) -> str:
    """``--pipeline-model-parallel-layout`` string: virtual stage s = v * pp + r on pp rank r,
    holding the plan's layer positions in order (rules/megatron.py ``layout_stages``)."""
    return compact_layout(layout_stages(spec, plan))


def decoder_plan(plan: Plan, spec: ModelSpec) -> Plan | None:
    """``plan`` with its chunks counting decoder layers only (MTP positions taken out), or None
    when a virtual stage would hold none (only a layout expresses that)."""
    contents = stage_contents(spec, plan)
    rows = tuple(tuple(contents[c * plan.pp + s][0] for c in range(plan.vp)) for s in range(plan.pp))
    if min(min(row) for row in rows) < 1:
        return None
    return replace(plan, layers_per_stage=tuple(sum(row) for row in rows), layers_per_chunk=rows)


def account_for_slots(plan: Plan) -> tuple[bool, bool] | None:
    """(embedding, loss) when the chunks are Megatron's account-for split: every chunk holds q
    layers except the first of rank 0 (q - 1 with the embedding) and/or the last of the last
    rank (q - 1 with the loss), at least one of them short; else None."""
    chunks = chunk_layers(plan)
    q = max(max(row) for row in chunks)
    emb, loss = chunks[0][0] == q - 1, chunks[-1][-1] == q - 1
    rest = [
        n
        for r, row in enumerate(chunks)
        for c, n in enumerate(row)
        if not (emb and (r, c) == (0, 0)) and not (loss and (r, c) == (plan.pp - 1, plan.vp - 1))
    ]
    if plan.vp == 1 or not (emb or loss) or q < 2 or any(n != q for n in rest):
        return None
    return emb, loss


def pipeline_args(plan: Plan, spec: ModelSpec) -> list[tuple[str, object]]:
    """(concept, value) pairs of the pipeline split: even, first/last, account-for slots, or an
    explicit layout; a hybrid model's stages in its layer pattern."""
    args: list[tuple[str, object]] = [("pp", plan.pp)] if plan.pp > 1 else []
    if hybrid_pattern(spec):
        return args + [("hybrid_pattern", hybrid_stage_pattern(spec, plan))]
    if plan.pp == 1:
        return args
    layout = [("layout", pipeline_layout(plan, spec))]
    mtp_last = all(m == 0 for _, m in stage_contents(spec, plan)[:-1])
    decoder = decoder_plan(plan, spec)
    if decoder is None or not mtp_last:
        return args + layout  # flags alone put MTP on the last stage, next to the loss
    plan = decoder
    split = plan.layers_per_stage
    if not is_even_chunks(plan):
        slots = account_for_slots(plan)
        if slots is None:
            return args + layout
        emb, loss = slots
        return (
            args
            + [("account_for_embedding", None)] * emb
            + [("account_for_loss", None)] * loss
            + [("vp", plan.vp)]
        )
    middle = split[1:-1]
    if len(set(split)) > 1 and len(set(middle)) > 1:
        return args + layout
    if len(set(split)) > 1:
        body = middle[0] if middle else None
        if split[0] != body:
            args.append(("first_stage_layers", split[0]))
        if middle and split[-1] != body:
            args.append(("last_stage_layers", split[-1]))
    if plan.vp > 1:
        args.append(("vp", plan.vp))
    return args


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


def recompute_settings(plan: Plan) -> list[tuple[str, object]]:
    """The plan's recompute as (flag key, value) pairs: selective -> core_attn; full -> method
    uniform, 1 layer per unit (every layer); partial (Plan.recompute_layers, the one N every
    rank shares: rules.megatron.check_recompute_layers) -> method block, N layers per chunk
    (megatron/core/recompute.py checkpointed_forward). NeMo / Bridge take the same values."""
    mode = uniform_recompute(plan)
    if mode is Recompute.SELECTIVE:
        return [("recompute", "selective"), ("recompute_modules", SELECTIVE_MODULES)]
    if mode is Recompute.FULL:
        n = uniform_recompute_layers(plan)
        method, layers = ("block", str(n)) if n is not None else FULL_RECOMPUTE
        return [("recompute", "full"), ("recompute_method", method), ("recompute_layers", layers)]
    return []


_recompute_args = recompute_settings


def _model_args(ctx: ExportContext) -> list[tuple[str, object]]:
    s, job = ctx.spec, ctx.inst.job
    args: list[tuple[str, object]] = [
        ("num_layers", s.num_layers),
        ("hidden", s.hidden),
        ("ffn_hidden", s.ffn_hidden),
        ("heads", s.num_heads),
    ]
    if s.num_kv_heads != s.num_heads:
        args += [("gqa", None), ("kv_heads", s.num_kv_heads)]
    if s.head_dim * s.num_heads != s.hidden and not s.is_mla:
        args.append(("head_dim", s.head_dim))
    args += [("seq_len", job.seq_len), ("max_positions", job.seq_len), ("norm", NORMS[s.norm])]
    if s.activation.value in ACTIVATION_FLAGS:
        args.append((ACTIVATION_FLAGS[s.activation.value], None))
    if s.activation.value == "relu2":
        args.append(("no_gelu_fusion", None))  # the fused bias-activation kernel is gelu/swiglu
    if not s.tied_embeddings:
        args.append(("untied", None))
    if not s.dropout:
        args += [("hidden_dropout", 0), ("attention_dropout", 0)]
    if mtp_layers(s):
        args.append(("mtp_layers", mtp_layers(s)))
    return args + layer_args(s) + position_args(s) + moe_args(ctx) + mla_args(ctx)


def layer_args(s: ModelSpec) -> list[tuple[str, object]]:
    """Biases, norm details, QK-norm, attention windows and sinks."""
    args: list[tuple[str, object]] = [("norm_eps", s.norm_eps)]
    if s.zero_centered_norm:
        args.append(("zero_centered_norm", None))
    if not s.linear_bias:
        args.append(("no_bias", None))
    if s.qkv_bias and not s.linear_bias:
        args.append(("qkv_bias", None))
    if s.qk_norm or s.is_mla:  # under MLA the flag adds the q and kv latent RMSNorms (models.json)
        args.append(("qk_norm", None))
    if s.sliding_window:
        args.append(("window", f"{s.sliding_window},0"))
        if s.full_attention_every:
            args.append(("window_skip_freq", s.full_attention_every))
    if s.attention_sinks:
        args.append(("softmax_type", SINK_SOFTMAX))
    return args


def position_args(s: ModelSpec) -> list[tuple[str, object]]:
    """Position embedding type, RoPE base, rotated fraction and scaling (MLA's YaRN in
    mla_args)."""
    rope = s.rope
    if s.position_embedding != "rope":
        return [("position_embedding", POSITION_TYPES[s.position_embedding])]
    if s.is_mla:  # MLA's rotary settings are rope_type / rotary_scaling_factor / mscale
        return [("position_embedding", "rope"), ("rotary_base", int(rope.theta))]
    kind = "yarn" if rope.scaling == "yarn" else "rope"
    args: list[tuple[str, object]] = [("position_embedding", kind), ("rotary_base", int(rope.theta))]
    if rope.fraction != 1:
        args.append(("rotary_percent", rope.fraction))
    if rope.scaling == "llama3":
        args += [("rope_scaling", None), ("rope_scaling_factor", rope.factor)]
    elif rope.scaling == "yarn":
        args += [
            ("rotary_scaling_factor", rope.factor),
            ("yarn_original_max_positions", rope.original_max_positions),
            ("yarn_beta_fast", rope.beta_fast),
            ("yarn_beta_slow", rope.beta_slow),
            ("mscale", rope.mscale),
            ("mscale_all_dim", rope.mscale_all_dim),
        ]
        if not rope.round_correction_range:
            args.append(("yarn_no_rounding", None))
    return args


def moe_layer_pattern(ctx: ExportContext) -> str | int:
    """``--moe-layer-freq``: 1 when every layer is MoE, else Megatron's 0/1 list expression."""
    s = ctx.spec
    flags = [int(s.is_moe_layer(i)) for i in range(s.num_layers)]
    if all(flags):
        return 1
    runs: list[tuple[int, int]] = []
    for f in flags:
        if runs and runs[-1][0] == f:
            runs[-1] = (f, runs[-1][1] + 1)
        else:
            runs.append((f, 1))
    return "(" + "+".join(f"[{f}]*{n}" for f, n in runs) + ")"


def moe_args(ctx: ExportContext) -> list[tuple[str, object]]:
    """Mixture-of-experts model flags (none for dense models)."""
    s = ctx.spec
    if not s.is_moe:
        return []
    args: list[tuple[str, object]] = [
        ("num_experts", s.num_experts),
        ("top_k", s.top_k),
        ("moe_ffn_hidden", s.moe_ffn_hidden),
    ]
    if s.shared_ffn_hidden:
        args.append(("shared_ffn_hidden", s.shared_ffn_hidden))
    pattern = moe_layer_pattern(ctx)
    if pattern != 1:
        args.append(("moe_layer_freq", pattern))
    return args + router_args(s) + [("grouped_gemm", None), ("dispatcher", MOE_DISPATCHER)]


def router_args(s: ModelSpec) -> list[tuple[str, object]]:
    """Router score function, expert bias, group-limited routing, scaling, balance loss."""
    r = s.router
    args: list[tuple[str, object]] = [("router_score", r.score)]
    if not r.normalize_top_k:  # softmax over every expert, top-k weights kept as they are
        args.append(("router_pre_softmax", None))
    if r.expert_bias:
        args.append(("router_expert_bias", None))
    if r.groups:
        args += [("router_groups", r.groups), ("router_group_topk", r.group_topk)]
    if r.scaling_factor != 1:
        args.append(("router_scaling", r.scaling_factor))
    return args + [("router_balance", r.balance), ("aux_loss_coeff", r.aux_loss_coeff)]


def mla_args(ctx: ExportContext) -> list[tuple[str, object]]:
    """Multi-head latent attention flags (none for standard attention)."""
    s = ctx.spec
    if not s.is_mla:
        return []
    args: list[tuple[str, object]] = [("mla", None)]
    if s.q_lora_rank:
        args.append(("q_lora_rank", s.q_lora_rank))
    args += [
        ("kv_lora_rank", s.kv_lora_rank),
        ("qk_nope_head_dim", s.qk_nope_head_dim),
        ("qk_rope_head_dim", s.qk_rope_head_dim),
        ("v_head_dim", s.v_head_dim),
    ]
    rope = s.rope
    if rope.scaling != "yarn":
        return args + [("rope_type", "rope")]
    return args + [
        ("rope_type", "yarn"),
        ("rotary_scaling_factor", rope.factor),
        ("mscale", rope.mscale),
        ("mscale_all_dim", rope.mscale_all_dim),
    ]


def _precision_args(precision: Precision) -> list[tuple[str, object]]:
    if precision is Precision.FP16:
        return [("fp16", None)]
    if precision is Precision.FP8:
        return [("bf16", None), ("fp8", FP8_FORMAT)]
    return [("bf16", None)]


def _flag_args(ctx: ExportContext) -> list[tuple[str, object]]:
    plan = ctx.plan
    job = ctx.inst.job
    return (
        _model_args(ctx)
        + _parallel_args(plan, ctx.spec)
        + [("micro_batch", plan.micro_batch), ("global_batch", job.global_batch)]
        + _data_parallel_args(ctx, plan)
        + _recompute_args(plan)
        + _precision_args(ctx.precision)
        + [
            ("mock_data", None),
            ("tokenizer", MOCK_TOKENIZER),
            ("vocab", ctx.spec.vocab),
            ("train_iters", DEFAULT_TRAIN_ITERS),
        ]
    )


def megatron_args(ctx: ExportContext) -> list[str]:
    """The ``pretrain_gpt.py`` argument vector for the context's plan (rules enforced first)."""
    enforce(ctx, FRAMEWORK, rules.RULES)
    argv: list[str] = []
    for key, value in _flag_args(ctx):
        argv.append(FLAGS[key])
        if value is not None:
            argv.append(str(value))
    return argv


def megatron_env(ctx: ExportContext) -> dict[str, str | None]:
    """Environment the launch needs (None: must be unset). Rules 28 and 31."""
    plan = ctx.plan
    if plan.zero >= 2:
        return {CUDA_CONNECTIONS_VAR: None}  # Megatron-FSDP needs it unset or > 1
    if plan.tp > 1 or plan.cp > 1:
        return {CUDA_CONNECTIONS_VAR: "1"}  # TP/CP comm ordering on pre-Blackwell GPUs
    return {}


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
