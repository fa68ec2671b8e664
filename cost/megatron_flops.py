"""Megatron's own model-FLOP count of one training step, as the published TFLOP/s figures use it.

Source: Megatron-LM's ``num_floating_point_operations(args, batch_size)`` in
``megatron/training/training.py`` of megatron-core 0.19.2 (the wheel ships Megatron-LM's
``megatron/training``), and Megatron-Bridge 0.6.2's variant of it,
``num_floating_point_operations(cfg, batch_size)`` in
``megatron/bridge/training/utils/flop_utils.py``. Both count model FLOPs (no recompute) of one
global batch of ``B`` sequences of ``s`` tokens, every GEMM 3 times (forward, dgrad, wgrad) at
2 FLOPs per multiply-add. With T = B s tokens, h hidden, V the padded vocabulary:

Transformer models (``transformer_flops``)::

    F = T * ( 6 h (f g L_dense + (f_e k g) L_moe + f_sh g L_moe)     MLPs (g = 3 gated, else 2)
            + A_proj (L + mtp)                                       attention projections
            + 6 mtp (3 h + 2 h^2)                                    MTP norms and eh-projection
            + 6 h V (mtp + 1) )                                      logits (and MTP's)
      + B s^2 * A_core (L + mtp)                                     causal core attention

- GQA / MHA: A_proj = 6 (h (q + 2 kv) + q h), A_core = 6 q (QK^T and PV, halved for causality),
  with q = heads x head_dim, kv = query groups x head_dim.
- MLA: A_proj = 6 (q_term + r_kv (h + n (d_qk + d_v) + 1) + h d_rope + n d_v h), q_term =
  r_q (h + n (d_qk + d_rope) + 1) with a q latent, else h n (d_qk + d_rope); A_core =
  6 (n (d_qk + d_rope) / 2 + n d_v / 2).
- MTP layers count as extra layers of the last layer's kind (MoE or dense MLP).
- LatentMoE: the routed term is f_e k g r / h + 2 r (experts at the latent width r, plus the
  h <-> r projections).

Hybrid models (``hybrid_flops``, selected by a hybrid layer pattern): per layer kind, forward
FLOPs times 3: attention 4 T q (h + h g_q / n) + 2 B s^2 q; MLP 4 T f h (x 3/2 gated); Mamba
2 T h (2 d + 2 groups N + heads) + 7 T d N + 2 T d h with d = 2 h (Megatron's own d_inner, not
heads x head_dim); MoE 4 T h (f_e k + f_sh) (x 3/2 gated); logits 2 T h V (1 + mtp).

Where the two differ (read from both sources): Megatron-LM calls an MLP gated only under
``--swiglu`` and counts every attention layer as full causal; Megatron-Bridge calls it gated for
any gated linear unit (GeGLU too) and counts sliding-window layers by their mean causal context
W - W (W - 1) / (2 s) for a window of W = w + 1 keys (``window_size`` (w, 0), as paraplan's
Megatron export writes ``sliding_window``), every ``window_attn_skip_freq``-th layer full.

Counted by neither (so not here): norms beyond MLA's latent norms and MTP's, softmax, the
router, RoPE; Megatron-LM also no vision encoder (Bridge adds a ViT only when the step passes
``num_vision_patches``, which a published TFLOP/s row does not say). Counted by both but not
here, as no ModelSpec field holds them: Gated DeltaNet (linear attention) layers, the attention
output gate and DeepSeek-V4's sparse attention.
"""

from __future__ import annotations

import math
from enum import StrEnum

from paraplan.graph import Activation, ModelSpec

__all__ = [
    "FlopCounting",
    "MEGATRON_VOCAB_DIVISIBLE_BY",
    "padded_vocab_size",
    "megatron_flops_per_step",
]

MEGATRON_VOCAB_DIVISIBLE_BY = 128
"""``--make-vocab-size-divisible-by``'s default (megatron-core 0.19.2 training/arguments.py;
Megatron-Bridge's GPT providers and recipes use 128 too)."""

GEMM_PASSES = 3  # forward, backward dgrad, backward wgrad
FLOPS_PER_FMA = 2


class FlopCounting(StrEnum):
    """Whose count: Megatron-LM's training.py or Megatron-Bridge's flop_utils.py."""

    MEGATRON_LM = "megatron_lm"
    MEGATRON_BRIDGE = "megatron_bridge"


def padded_vocab_size(vocab: int, tp: int = 1, divisible_by: int = MEGATRON_VOCAB_DIVISIBLE_BY) -> int:
    """The vocabulary Megatron builds: rounded up to a multiple of divisible_by x tp
    (megatron-core 0.19.2 training/vocab_utils.py ``calculate_padded_vocab_size``)."""
    multiple = divisible_by * tp
    return math.ceil(vocab / multiple) * multiple


def _gated(spec: ModelSpec, counting: FlopCounting) -> bool:
    """Whether the count takes the MLP as gated (3 GEMMs of width f): Megatron-LM reads
    ``args.swiglu``, Megatron-Bridge ``gated_linear_unit``."""
    if counting is FlopCounting.MEGATRON_LM:
        return spec.activation is Activation.SWIGLU
    return spec.activation.is_gated


def _moe_layer_flags(spec: ModelSpec) -> list[bool]:
    """Megatron's ``moe_layer_pattern``: whether each decoder layer has a routed-expert MLP."""
    if not spec.is_moe:
        return [False] * spec.num_layers
    return [spec.is_moe_layer(i) for i in range(spec.num_layers)]


def _mlp_layer_counts(spec: ModelSpec) -> tuple[int, int]:
    """(dense MLP layers, MoE layers), the MTP layers counted as the last layer's kind."""
    flags = _moe_layer_flags(spec)
    moe, dense = sum(flags), spec.num_layers - sum(flags)
    if flags and flags[-1]:
        return dense, moe + spec.mtp_layers
    return dense + spec.mtp_layers, moe


def _routed_width(spec: ModelSpec, gate: int) -> float:
    """Routed-expert term per MoE layer in units of h (f_e k g, or the LatentMoE form)."""
    if not spec.moe_latent_dim:
        return float(spec.moe_ffn_hidden * spec.top_k * gate)
    latent = spec.moe_latent_dim
    return spec.moe_ffn_hidden * spec.top_k * gate * latent / spec.hidden + 2 * latent


def _mlp_flops_per_token(spec: ModelSpec, counting: FlopCounting) -> float:
    """MLP GEMM FLOPs per token over every layer (dense, routed experts, shared experts)."""
    gate = 3 if _gated(spec, counting) else 2
    dense, moe = _mlp_layer_counts(spec)
    width: float = spec.ffn_hidden * gate * dense
    if spec.is_moe:
        width += (_routed_width(spec, gate) + spec.shared_ffn_hidden * gate) * moe
    return GEMM_PASSES * FLOPS_PER_FMA * spec.hidden * width


def _mla_projection_flops_per_token(spec: ModelSpec) -> float:
    """One MLA layer's token-linear FLOPs: q (latent) and kv latent projections with their
    norms, the shared rope key, the output projection."""
    h, n = spec.hidden, spec.num_heads
    qk, rope, v = spec.qk_nope_head_dim, spec.qk_rope_head_dim, spec.v_head_dim
    if spec.q_lora_rank:
        q_term = spec.q_lora_rank * (h + n * (qk + rope) + 1)
    else:
        q_term = h * n * (qk + rope)
    kv_term = spec.kv_lora_rank * (h + n * (qk + v) + 1)
    return GEMM_PASSES * FLOPS_PER_FMA * (q_term + kv_term + h * rope + n * v * h)


def _mla_core_flops_per_token_per_key(spec: ModelSpec) -> float:
    """One MLA layer's core attention per token per sequence token (causal: halved)."""
    n = spec.num_heads
    qk = spec.qk_nope_head_dim + spec.qk_rope_head_dim
    return GEMM_PASSES * FLOPS_PER_FMA * (n * qk / 2 + n * spec.v_head_dim / 2)


def _gqa_projection_flops_per_token(spec: ModelSpec) -> float:
    """One GQA/MHA layer's QKV and output projection FLOPs per token."""
    q = spec.head_dim * spec.num_heads
    kv = spec.head_dim * spec.num_kv_heads
    return GEMM_PASSES * FLOPS_PER_FMA * (spec.hidden * (q + 2 * kv) + q * spec.hidden)


def _gqa_core_flops_per_token_per_key(spec: ModelSpec) -> float:
    """One GQA/MHA layer's QK^T and PV per token per attended key (x 2 GEMMs, x 1/2 causal)."""
    return GEMM_PASSES * FLOPS_PER_FMA * spec.head_dim * spec.num_heads / 2 * 2


def _window_keys(spec: ModelSpec, seq_len: int) -> float:
    """Megatron-Bridge's mean causal context of a sliding-window layer, in keys per token, as
    a multiple of the full layer's s / 2 is written: W - W (W - 1) / (2 s) with W = w + 1."""
    window = spec.sliding_window + 1  # window_size (w, 0): w + 0 + 1 keys
    if window < seq_len:
        return window - window * (window - 1) / (2 * seq_len)
    return seq_len / 2


def _is_window_layer(spec: ModelSpec, layer_number: int) -> bool:
    """Bridge's ``is_swa_layer`` of a 1-indexed layer: every layer windowed, except every
    ``window_attn_skip_freq``-th (paraplan's ``full_attention_every``)."""
    n = spec.full_attention_every
    return not n or layer_number % n != 0


def _attention_flops(
    spec: ModelSpec, counting: FlopCounting, *, seq_len: int, layers: int
) -> tuple[float, float]:
    """(token-linear attention FLOPs per token, core FLOPs per sequence per s^2) over
    ``layers`` attention layers (decoder + MTP)."""
    if spec.is_mla:
        return (
            _mla_projection_flops_per_token(spec) * layers,
            _mla_core_flops_per_token_per_key(spec) * layers,
        )
    proj = _gqa_projection_flops_per_token(spec) * layers
    core = _gqa_core_flops_per_token_per_key(spec)
    if counting is FlopCounting.MEGATRON_LM or not spec.sliding_window:
        return proj, core * layers
    windowed = sum(_is_window_layer(spec, i + 1) for i in range(layers))
    # over B s^2: a full layer adds core (q s per token), a windowed one core x 2 context / s
    # (Bridge: q x context x 2 GEMMs per token)
    full_per_s2 = core * (layers - windowed)
    window_per_s2 = core * windowed * 2 * _window_keys(spec, seq_len) / seq_len
    return proj, full_per_s2 + window_per_s2


def _transformer_flops_per_step(
    spec: ModelSpec, counting: FlopCounting, *, seq_len: int, global_batch: int, padded_vocab: int
) -> float:
    """``transformer_flops()`` of both sources (module docstring)."""
    tokens = global_batch * seq_len
    h, mtp = spec.hidden, spec.mtp_layers
    proj, core = _attention_flops(spec, counting, seq_len=seq_len, layers=spec.num_layers + mtp)
    per_token = (
        _mlp_flops_per_token(spec, counting)
        + proj
        + GEMM_PASSES * FLOPS_PER_FMA * mtp * (3 * h + 2 * h * h)
        + GEMM_PASSES * FLOPS_PER_FMA * h * padded_vocab * (mtp + 1)
    )
    return tokens * per_token + global_batch * seq_len * seq_len * core


def _hybrid_symbol_counts(spec: ModelSpec) -> dict[str, int]:
    """Layers per hybrid symbol (M, *, -, E), each MTP module counted as one more of the last
    block (paraplan's MTP module repeats the model's last block)."""
    counts = {symbol: spec.layer_pattern.count(symbol) for symbol in "M*-E"}
    if spec.mtp_layers:
        counts[spec.layer_pattern[-1]] += spec.mtp_layers
    return counts


def _mamba_flops_per_token(spec: ModelSpec) -> float:
    """Megatron's ``mamba_layer_flops`` per token, forward: in_proj, scan, out_proj, with
    d_inner = 2 h and heads = mamba_num_heads (else d_inner / head_dim)."""
    h, m = spec.hidden, spec.mamba
    d_in = 2 * h
    heads = m.num_heads or d_in // m.head_dim
    in_proj = 2 * h * (2 * d_in + 2 * m.num_groups * m.state_dim + heads)
    return in_proj + 7 * d_in * m.state_dim + 2 * d_in * h


def _hybrid_attention_forward_flops(
    spec: ModelSpec, counting: FlopCounting, *, seq_len: int, global_batch: int, layers: int
) -> float:
    """Megatron's ``attn_layer_flops`` forward over ``layers`` attention layers of a hybrid; under
    Megatron-Bridge, windowed layers (by their position in the pattern) count their context."""
    tokens = global_batch * seq_len
    q = spec.head_dim * spec.num_heads
    proj = 4 * tokens * q * (spec.hidden + spec.hidden * (spec.num_kv_heads / spec.num_heads))
    full_core = 2 * tokens * q * seq_len
    windowed = 0
    if counting is FlopCounting.MEGATRON_BRIDGE and spec.sliding_window:
        positions = [i + 1 for i, symbol in enumerate(spec.layer_pattern) if symbol == "*"]
        windowed = min(sum(_is_window_layer(spec, p) for p in positions), layers, len(positions))
    window_core = 2 * tokens * q * 2 * _window_keys(spec, seq_len) if windowed else 0.0
    return layers * proj + (layers - windowed) * full_core + windowed * window_core


def _hybrid_flops_per_step(
    spec: ModelSpec, counting: FlopCounting, *, seq_len: int, global_batch: int, padded_vocab: int
) -> float:
    """``hybrid_flops()`` of both sources (module docstring)."""
    tokens = global_batch * seq_len
    h = spec.hidden
    scale = 3 / 2 if _gated(spec, counting) else 1.0
    counts = _hybrid_symbol_counts(spec)
    moe_width = spec.moe_ffn_hidden * spec.top_k if spec.is_moe else 0
    routed = 4 * tokens * h * moe_width * scale
    if spec.is_moe and spec.moe_latent_dim:
        latent = spec.moe_latent_dim
        routed = 4 * tokens * latent * moe_width * scale + 4 * tokens * h * latent
    forward = (
        _hybrid_attention_forward_flops(
            spec, counting, seq_len=seq_len, global_batch=global_batch, layers=counts["*"]
        )
        + counts["-"] * 4 * tokens * spec.ffn_hidden * h * scale
        + counts["M"] * tokens * _mamba_flops_per_token(spec)
        + counts["E"] * (routed + 4 * tokens * h * spec.shared_ffn_hidden * scale)
        + 2 * tokens * h * padded_vocab * (1 + spec.mtp_layers)
    )
    return forward * GEMM_PASSES


def megatron_flops_per_step(
    spec: ModelSpec,
    *,
    seq_len: int,
    global_batch: int,
    padded_vocab: int,
    counting: FlopCounting = FlopCounting.MEGATRON_LM,
) -> float:
    """Model FLOPs of one step of ``global_batch`` sequences of ``seq_len`` tokens, as
    ``counting`` counts them (module docstring), logits over ``padded_vocab``
    (``padded_vocab_size``). Units: FLOPs per step."""
    if spec.is_hybrid:
        return _hybrid_flops_per_step(
            spec, counting, seq_len=seq_len, global_batch=global_batch, padded_vocab=padded_vocab
        )
    return _transformer_flops_per_step(
        spec, counting, seq_len=seq_len, global_batch=global_batch, padded_vocab=padded_vocab
    )
