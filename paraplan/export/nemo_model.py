"""The planned model as megatron-core TransformerConfig / Megatron-Bridge GPTModelProvider fields,
for the NeMo 2 / Megatron-Bridge export (nemo.py writes them as ``model.*`` overrides).

Shape, positions (RoPE and its scaling, YaRN), norms, biases, QK-norm, windows and attention
sinks, multi-token prediction, the MoE router and MLA, so that whatever recipe the user starts
from builds the planned model; the refusals are paraplan.rules.megatron's. megatron-core 0.16.1
builds them into the plan model's parameter count in tests/export/test_oracles.py, which also
checks that each is a field of the provider. The sequence length (and so the learned position
table) is GPTModelProvider.seq_length (nemo.py's ``model.seq_length``, GPTModel's
max_sequence_length): the providers have no max_position_embeddings field.
"""

from __future__ import annotations

from paraplan.export import ExportContext
from paraplan.export import megatron as mg
from paraplan.export.megatron_model import POSITION_TYPES
from paraplan.rules.megatron import mtp_layers

__all__ = ["Expr", "ACTIVATIONS", "model_fields"]


class Expr(str):
    """A value written into ``nemo.py`` as Python code (a function), not as a literal."""

    def __repr__(self) -> str:
        return str(self)


ACTIVATIONS = {
    "swiglu": (True, Expr("torch.nn.functional.silu")),
    "gelu": (False, Expr("torch.nn.functional.gelu")),
    "relu": (False, Expr("torch.nn.functional.relu")),
    "relu2": (False, Expr("megatron.core.activations.squared_relu")),
    # Gemma 3: gated GELU (tanh); Megatron-Bridge gemma3_provider.py @dc805f5 (fast_gelu GLU)
    "geglu": (True, Expr("megatron.core.activations.fast_gelu")),
}
"""activation -> (gated_linear_unit, activation_func) of megatron-core's TransformerConfig."""


def model_fields(ctx: ExportContext) -> list[tuple[str, object]]:
    """The model as megatron-core TransformerConfig / Megatron-Bridge GPTModelProvider fields, so
    a recipe of another model still builds the planned one (refusals: paraplan.rules.megatron)."""
    s = ctx.spec
    gated, act = ACTIVATIONS[s.activation.value]
    out: list[tuple[str, object]] = [
        ("num_layers", s.num_layers),
        ("hidden_size", s.hidden),
        ("ffn_hidden_size", s.ffn_hidden),
        ("num_attention_heads", s.num_heads),
        ("num_query_groups", s.num_kv_heads),
        ("kv_channels", s.head_dim),
        ("vocab_size", s.vocab),
        ("share_embeddings_and_output_weights", s.tied_embeddings),
        ("normalization", mg.NORMS[s.norm]),
        ("layernorm_epsilon", s.norm_eps),
        ("layernorm_zero_centered_gamma", s.zero_centered_norm),
        ("gated_linear_unit", gated),
        ("activation_func", act),
        ("add_bias_linear", s.linear_bias),
        ("add_qkv_bias", s.qkv_bias and not s.linear_bias),
        ("qk_layernorm", s.qk_norm or s.is_mla),  # MLA: the q and kv latent RMSNorms
        ("hidden_dropout", 0.1 if s.dropout else 0.0),
        ("attention_dropout", 0.1 if s.dropout else 0.0),
        ("position_embedding_type", POSITION_TYPES.get(s.position_embedding, "none")),
    ]
    if s.sliding_window:
        out.append(("window_size", (s.sliding_window, 0)))
        if s.full_attention_every:
            out.append(("window_attn_skip_freq", s.full_attention_every))
    if s.attention_sinks:
        out.append(("softmax_type", mg.SINK_SOFTMAX))
    if mtp_layers(s):
        out.append(("mtp_num_layers", mtp_layers(s)))
    if s.position_embedding == "rope":
        out += _rope_fields(ctx)
    return out + _moe_fields(ctx) + _mla_fields(ctx)


def _rope_fields(ctx: ExportContext) -> list[tuple[str, object]]:
    s, rope = ctx.spec, ctx.spec.rope
    out: list[tuple[str, object]] = [("rotary_base", int(rope.theta)), ("rotary_percent", rope.fraction)]
    if rope.scaling == "llama3":
        out += [("rope_scaling", True), ("rope_scaling_factor", rope.factor)]
    elif rope.scaling == "yarn" and not s.is_mla:
        out[0:0] = [("position_embedding_type", "yarn")]
        out += [
            ("yarn_rotary_scaling_factor", rope.factor),
            ("yarn_original_max_position_embeddings", rope.original_max_positions),
            ("yarn_beta_fast", rope.beta_fast),
            ("yarn_beta_slow", rope.beta_slow),
            ("yarn_mscale", rope.mscale),
            ("yarn_mscale_all_dim", rope.mscale_all_dim),
            ("yarn_correction_range_round_to_int", rope.round_correction_range),
        ]
    return out


def _moe_fields(ctx: ExportContext) -> list[tuple[str, object]]:
    s = ctx.spec
    if not s.is_moe:
        return []
    r = s.router
    layers = [int(s.is_moe_layer(i)) for i in range(s.num_layers)]
    return [
        ("num_moe_experts", s.num_experts),
        ("moe_router_topk", s.top_k),
        ("moe_ffn_hidden_size", s.moe_ffn_hidden),
        ("moe_shared_expert_intermediate_size", s.shared_ffn_hidden or None),
        ("moe_latent_size", s.moe_latent_dim or None),
        ("moe_layer_freq", 1 if all(layers) else layers),
        ("moe_router_score_function", r.score),
        ("moe_router_pre_softmax", not r.normalize_top_k),
        ("moe_router_enable_expert_bias", r.expert_bias),
        ("moe_router_num_groups", r.groups or None),
        ("moe_router_group_topk", r.group_topk or None),
        ("moe_router_topk_scaling_factor", r.scaling_factor if r.scaling_factor != 1 else None),
        ("moe_router_load_balancing_type", r.balance),
        ("moe_aux_loss_coeff", r.aux_loss_coeff),
        ("moe_grouped_gemm", True),  # the dispatcher and routing: megatron_moe.state_fields
    ]


def _mla_fields(ctx: ExportContext) -> list[tuple[str, object]]:
    """MLATransformerConfig fields (a DeepSeek provider/recipe has them; a GPT one does not)."""
    s, rope = ctx.spec, ctx.spec.rope
    if not s.is_mla:
        return []
    out: list[tuple[str, object]] = [
        ("multi_latent_attention", True),
        ("q_lora_rank", s.q_lora_rank or None),
        ("kv_lora_rank", s.kv_lora_rank),
        ("qk_head_dim", s.qk_nope_head_dim),
        ("qk_pos_emb_head_dim", s.qk_rope_head_dim),
        ("v_head_dim", s.v_head_dim),
    ]
    if rope.scaling != "yarn":
        return out + [("rope_type", "rope")]
    return out + [
        ("rope_type", "yarn"),
        ("rotary_scaling_factor", rope.factor),
        ("original_max_position_embeddings", rope.original_max_positions),
        ("beta_fast", rope.beta_fast),
        ("beta_slow", rope.beta_slow),
        ("mscale", rope.mscale),
        ("mscale_all_dim", rope.mscale_all_dim),
    ]
