"""Megatron-LM's model-architecture flags, as (concept, value) pairs that paraplan/export/megatron.py
maps to flag names (``FLAGS``) and NeMo's exporter reuses the constants of.

- Shape: layers, hidden, FFN, heads and query groups, head dim, sequence length, norm, activation
  (``--swiglu``, ``--squared-relu``), untied embeddings, dropout off, MTP layers.
- Architecture (ModelSpec): position embedding type, RoPE base / rotated fraction / llama3 or
  YaRN scaling, norm epsilon and zero-centred LayerNorm, biases (all linear layers, or QKV only),
  QK-norm (under MLA the q/kv latent norms), attention windows and sinks.
- Mixture of experts: ``--num-experts``, ``--moe-router-topk``, ``--moe-ffn-hidden-size``, shared
  experts, ``--moe-layer-freq`` (a 0/1 pattern when some layers are dense), the MoE router (score
  function, top-k normalisation, expert bias, group-limited routing, scaling, balance loss), the
  plan's token dispatcher (megatron_moe.py) with grouped GEMM.
- Latent attention: ``--multi-latent-attention`` and its ranks and dims, MLA's rotary settings.
"""

from __future__ import annotations

from paraplan.export import ExportContext
from paraplan.export.megatron_moe import dispatcher_args
from paraplan.graph import ModelSpec
from paraplan.rules.megatron import mtp_layers

__all__ = [
    "NORMS",
    "POSITION_TYPES",
    "SINK_SOFTMAX",
    "ACTIVATION_FLAGS",
    "MOE_DISPATCHER",
    "model_args",
    "layer_args",
    "position_args",
    "moe_layer_pattern",
    "moe_args",
    "router_args",
    "mla_args",
]

NORMS = {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}
POSITION_TYPES = {"rope": "rope", "learned": "learned_absolute", "none": "none"}
"""ModelSpec.position_embedding -> --position-embedding-type (ALiBi has none: refused)."""
SINK_SOFTMAX = "learnable"  # TransformerConfig.softmax_type for a learned sink logit per head
ACTIVATION_FLAGS = {"swiglu": "swiglu", "relu2": "relu2"}  # gelu is Megatron's default
MOE_DISPATCHER = "alltoall"  # plan.moe_dispatcher's default (cost.Layout); megatron-core's is allgather


def model_args(ctx: ExportContext) -> list[tuple[str, object]]:
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
    if s.moe_latent_dim:
        args.append(("moe_latent_dim", s.moe_latent_dim))
    pattern = moe_layer_pattern(ctx)
    if pattern != 1:
        args.append(("moe_layer_freq", pattern))
    return args + router_args(s) + [("grouped_gemm", None)] + dispatcher_args(ctx)


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
