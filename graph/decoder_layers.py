"""The layers of a decoder block and of the model's ends, one constructor per kind: attention
(MHA/GQA/MQA, full, sliding-window or chunked), multi-head latent attention, the dense MLP, the
mixture-of-experts MLP, the final norm and the LM head. Each returns a :class:`Layer` whose
per-token numbers follow the module docstring of graph/layers.py (Korthikanti et al. 2022,
arXiv:2205.05198, Sec. 4, for the stored activations).
"""

from __future__ import annotations

from paraplan.graph.layer import Experts, Gemm, Layer, LayerKind
from paraplan.graph.spec import ModelSpec

__all__ = [
    "attention_layer",
    "mla_attention_layer",
    "mla_qkv_copy_elems",
    "mlp_layer",
    "moe_layer",
    "final_norm_layer",
    "lm_head_layer",
    "norm_params_of",
    "EXPERT_BIAS_ELEMS",
]

# Element-wise work, per routed copy and element of the expert output d, of Megatron-Core's
# expert fc2 bias (megatron-core 0.16.1 and 0.19.2 transformer/moe/experts.py TEGroupedMLP:
# fc2 is built with skip_bias_add=True and ``_apply_bias`` adds the bias scaled by the router's
# probability, ``t + b * p`` per local expert, then ``torch.cat`` and ``.to(dtype)``; the
# probabilities are fp32, so each step writes fp32). Forward, bytes per element: b * p writes 4,
# the add reads 2 + 4 and writes 4, the cat reads and writes 4, the cast reads 4 and writes 2: 28.
# Backward (autograd): the cast's gradient to fp32 (2 + 4), the add's to bf16 for t (4 + 2), the
# product's two gradients, each a fp32 product (4 + 4) and its reduction (4), and the per-expert
# gradients joined for the GEMM (2 + 2): 40. Entered as 2-byte elements of a forward whose
# backward the cost model charges twice (cost/compute.py LayerTime), so forward + backward move
# the tallied 68 bytes: (28 + 40) / 3 / 2.
EXPERT_BIAS_ELEMS = (28 + 40) / 3 / 2


def _local(spec: ModelSpec, i: int) -> tuple[int, int]:
    """(window, chunk) of block i's attention; (0, 0) when it is full attention."""
    if spec.is_full_attention(i):
        return 0, 0
    return spec.sliding_window, spec.attention_chunk


def attention_layer(spec: ModelSpec, i: int) -> Layer:
    """Self-attention (MHA/GQA/MQA): causal full, sliding-window or chunked local (``_local``);
    a NoPE layer (Llama 4's full-attention layers) skips the rotary element-wise work."""
    h, q, kv = spec.hidden, spec.q_dim, spec.kv_dim
    window, chunk = _local(spec, i)
    nope = spec.nope_full_attention and not (window or chunk)
    rotary = 0 if spec.position_embedding != "rope" or nope else 2 * (q + kv)
    gemms = (
        Gemm(name="qkv", in_dim=h, out_dim=q + 2 * kv, tp_split="out"),
        Gemm(name="proj", in_dim=q, out_dim=h, tp_split="in"),
    )
    norm_params = 2 * h if spec.norm == "layernorm" else h
    # Korthikanti 2022 Sec 4.1, generalised to GQA: Q,K (QK^T input), V, attention output (proj
    # input) are TP-sharded; norm input, QKV input and the dropout mask are not (without SP).
    act_tp = q + kv + kv + q
    act_sp = h + h + (h / 2 if spec.dropout else 0.0)  # norm in, qkv in, dropout mask (1 B of 2)
    return Layer(
        name=f"attn_{i}",
        kind=LayerKind.ATTENTION,
        block=i,
        params=sum(g.in_dim * g.out_dim for g in gemms) + norm_params,
        gemms=gemms,
        attn_core_flops_per_token_per_seq=4 * q,
        act_tp_elems=act_tp,
        act_sp_elems=act_sp,
        act_tp_gemm_elems=q,
        act_sp_gemm_elems=h,
        act_quadratic_heads=spec.num_heads,
        mem_bound_elems=2 * h + 3 * h + rotary,  # norm, residual add, rotary
        shardable=("tp", "sp", "cp"),
        window=window,
        chunk=chunk,
    )


def mlp_layer(spec: ModelSpec, i: int) -> Layer:
    h, f = spec.hidden, spec.ffn_hidden
    gated = spec.activation.is_gated
    up = 2 * f if gated else f
    gemms = (
        Gemm(name="fc1", in_dim=h, out_dim=up, tp_split="out"),
        Gemm(name="fc2", in_dim=f, out_dim=h, tp_split="in"),
    )
    norm_params = 2 * h if spec.norm == "layernorm" else h
    # Korthikanti: fc1 input (sp), activation input (up elems), activation output (f), dropout mask.
    act_tp = up + f
    act_sp = h + h + (h / 2 if spec.dropout else 0.0)
    return Layer(
        name=f"mlp_{i}",
        kind=LayerKind.MLP,
        block=i,
        params=sum(g.in_dim * g.out_dim for g in gemms) + norm_params,
        gemms=gemms,
        act_tp_elems=act_tp,
        act_sp_elems=act_sp,
        act_tp_gemm_elems=f,
        act_sp_gemm_elems=h,
        mem_bound_elems=2 * h + 3 * h + up + f,  # norm, residual add, activation
        shardable=("tp", "sp", "cp"),
    )


def mla_qkv_copy_elems(spec: ModelSpec) -> float:
    """Elements per token Megatron-Core's MLA moves to build the core attention's query, key and
    value beyond the rotary of the rope dims (counted in mem_bound_elems, 2 (heads rope + rope)):
    megatron-core 0.19.2 multi_latent_attention.py ``qkv_up_proj_and_rope_apply`` reads q_up's
    output (heads qk) and kv_up's (heads (nope + v)) and the shared k_pos (rope), and writes query
    and key (heads qk each) and value (heads v) contiguous, in one fused RoPE kernel per side
    (``fused_apply_mla_rope_for_q`` / ``_for_kv``, apply_rope_fusion) or in split / cat / contiguous
    copies without it: 2 heads qk + heads (nope + v) + rope + heads qk + heads v in all."""
    heads, nope, v = spec.num_heads, spec.qk_nope_head_dim, spec.v_head_dim
    rope = spec.qk_rope_head_dim
    qk = nope + rope
    whole = 2 * heads * qk + heads * (nope + v) + rope + heads * qk + heads * v
    return float(whole - 2 * (heads * rope + rope))


def mla_attention_layer(spec: ModelSpec, i: int) -> Layer:
    """Multi-head latent attention (DeepSeek-V2 arXiv:2405.04434 Sec. 2.1; V3 arXiv:2412.19437).

    Down-projections to the q and kv latents are replicated over TP (Megatron-Core MLA), the
    up-projections column-parallel, the output projection row-parallel. Core attention: q.k over
    qk_nope + qk_rope dims, softmax.v over v_head_dim, per head.
    """
    h, heads = spec.hidden, spec.num_heads
    qk = spec.qk_nope_head_dim + spec.qk_rope_head_dim
    rq, rkv, rope = spec.q_lora_rank, spec.kv_lora_rank, spec.qk_rope_head_dim
    q_gemms: tuple[Gemm, ...]
    if rq:
        q_gemms = (
            Gemm(name="q_down", in_dim=h, out_dim=rq, tp_split="none"),
            Gemm(name="q_up", in_dim=rq, out_dim=heads * qk, tp_split="out"),
        )
    else:
        q_gemms = (Gemm(name="q", in_dim=h, out_dim=heads * qk, tp_split="out"),)
    gemms = (
        *q_gemms,
        Gemm(name="kv_down", in_dim=h, out_dim=rkv + rope, tp_split="none"),
        Gemm(
            name="kv_up",
            in_dim=rkv,
            out_dim=heads * (spec.qk_nope_head_dim + spec.v_head_dim),
            tp_split="out",
        ),
        Gemm(name="proj", in_dim=spec.v_dim, out_dim=h, tp_split="in"),
    )
    norm_params = h + rq + rkv  # input RMSNorm + the q and kv latent RMSNorms
    # Q, K (q.k input), V, attention output (proj input) are TP-sharded; the block input, the
    # normed input and the latents (with their norm inputs) are stored per sequence shard.
    act_tp = 2 * heads * qk + 2 * spec.v_dim
    act_sp = 2 * h + 2 * rq + (rkv + rope) + rkv + (h / 2 if spec.dropout else 0.0)
    return Layer(
        name=f"attn_{i}",
        kind=LayerKind.ATTENTION,
        block=i,
        params=sum(g.params for g in gemms) + norm_params,
        gemms=gemms,
        attn_core_flops_per_token_per_seq=2 * heads * qk + 2 * spec.v_dim,
        act_tp_elems=act_tp,
        act_sp_elems=act_sp,
        act_tp_gemm_elems=spec.v_dim,
        act_sp_gemm_elems=h + rq + rkv,
        act_quadratic_heads=heads,
        mem_bound_elems=2 * h + 2 * rq + 2 * rkv + 3 * h + 2 * (heads * rope + rope),
        qkv_copy_elems=mla_qkv_copy_elems(spec),
        shardable=("tp", "sp", "cp"),
        window=_local(spec, i)[0],
        chunk=_local(spec, i)[1],
    )


def moe_layer(spec: ModelSpec, i: int) -> Layer:
    """Router, shared experts and routed experts (Megatron-Core MoELayer; Fedus et al. 2021,
    arXiv:2101.03961; DeepSeekMoE arXiv:2401.06066 for shared experts).

    Per token: router h x E GEMM (replicated over TP) and softmax/top-k; shared experts as a dense
    MLP of width shared_ffn_hidden; each of the top_k routed copies is permuted (d read + written),
    run through one expert, unpermuted (d read + written) and weighted into the output, d = h.
    LatentMoE (spec.moe_latent_dim = d < h; megatron-core 0.19.2 moe_layer.py): h -> d before the
    dispatch and d -> h after the combine, both replicated over TP ("duplicated"), each stored
    input kept; the experts run d -> f -> d (Megatron-Bridge 0.6.2 training/utils/flop_utils.py:
    routed 4 b s d f top_k + projections 4 b s h d forward FLOPs).
    """
    h, f, e = spec.hidden, spec.moe_ffn_hidden, spec.num_experts
    d = spec.moe_latent_dim or h  # the width tokens are dispatched and the experts run at
    gated = spec.activation.is_gated
    up = 2 * f if gated else f
    gemms: tuple[Gemm, ...] = (Gemm(name="router", in_dim=h, out_dim=e, tp_split="none"),)
    fs = spec.shared_ffn_hidden
    up_s = (2 * fs if gated else fs) if fs else 0
    if fs:
        gemms += (
            Gemm(name="shared_fc1", in_dim=h, out_dim=up_s, tp_split="out"),
            Gemm(name="shared_fc2", in_dim=fs, out_dim=h, tp_split="in"),
        )
    latent = d != h
    if latent:
        gemms += (
            Gemm(name="latent_down", in_dim=h, out_dim=d, tp_split="none"),
            Gemm(name="latent_up", in_dim=d, out_dim=h, tp_split="none"),
        )
    experts = Experts(
        num_experts=e,
        top_k=spec.top_k,
        gemms=(
            Gemm(name="expert_fc1", in_dim=d, out_dim=up, tp_split="out"),
            Gemm(name="expert_fc2", in_dim=f, out_dim=d, tp_split="in"),
        ),
        # per routed copy: fc1 input (kept as all-gathered over TP), the activation's input and
        # output (TP-sharded), the expert output kept for the combine (sequence shard)
        act_gathered_elems=d,
        act_tp_elems=up + f,
        act_sp_elems=d,
        act_gathered_gemm_elems=d,
        act_tp_gemm_elems=f,
        # permute + unpermute (read + write), activation
        mem_bound_elems=4 * d + up + f,
        # Megatron-Core's fp32 fc2 bias path (EXPERT_BIAS_ELEMS), costed by cost/ep.py
        bias_pass_elems=EXPERT_BIAS_ELEMS * d if spec.linear_bias else 0.0,
    )
    norm_params = 2 * h if spec.norm == "layernorm" else h
    # norm input, normed input (router and shared-expert input), router logits/probs (fp32: 2
    # elements of 2 B each), shared-expert activations; LatentMoE: latent_up's input (d)
    act_sp = 2 * h + 2 * 2 * e + (h / 2 if spec.dropout else 0.0) + (d if latent else 0.0)
    return Layer(
        name=f"mlp_{i}",
        kind=LayerKind.MOE,
        block=i,
        params=sum(g.params for g in gemms) + experts.params + norm_params,
        gemms=gemms,
        act_tp_elems=up_s + fs,
        act_sp_elems=act_sp,
        act_tp_gemm_elems=fs,
        act_sp_gemm_elems=(h if fs or latent else 0.0) + (d if latent else 0.0),
        mem_bound_elems=2 * h + 3 * h + up_s + fs + 4 * e,  # norm, residual, shared act., router
        shardable=("tp", "sp", "cp", "ep"),
        experts=experts,
    )


def norm_params_of(spec: ModelSpec) -> int:
    return 2 * spec.hidden if spec.norm == "layernorm" else spec.hidden


def lm_head_layer(spec: ModelSpec, name: str, shared: bool) -> Layer:
    """Logits and loss; ``shared``: the weight is the LM head's (or the tied embedding)."""
    h, v = spec.hidden, spec.vocab
    return Layer(
        name=name,
        kind=LayerKind.LM_HEAD,
        block=-1,
        params=0 if shared else v * h,
        gemms=(Gemm(name="logits", in_dim=h, out_dim=v, tp_split="out"),),
        act_sp_elems=h,
        mem_bound_elems=3 * v,
        shardable=("tp",),
    )


def final_norm_layer(spec: ModelSpec, name: str) -> Layer:
    h = spec.hidden
    return Layer(
        name=name,
        kind=LayerKind.FINAL_NORM,
        block=-1,
        params=norm_params_of(spec),
        act_sp_elems=h,
        mem_bound_elems=2 * h,
        shardable=("sp",),
    )
