"""The vision encoder in front of a multimodal decoder (``spec.vision``): a ViT's patch
embedding, its blocks and the merger that maps patches to decoder tokens, as head layers.
"""

from __future__ import annotations

from paraplan.graph.layer import Gemm, Layer, LayerKind
from paraplan.graph.spec import ModelSpec

__all__ = ["vision_layers"]


def vision_layers(spec: ModelSpec) -> list[Layer]:
    """A ViT encoder over image patch tokens (spec.vision): patch embedding, pre-norm blocks of
    bidirectional attention (windowed but every ``full_attention_every``-th) and a (gated) MLP,
    then the merger (norm, merge^2 patches concatenated, MLP to the decoder's hidden size).
    Per-token numbers are per patch token (the merger's per merged token); TP shards heads and
    MLP width as in a decoder block."""
    v = spec.vision
    h, f, tokens = v.hidden, v.ffn_hidden, v.image_tokens
    gated = v.activation.is_gated
    up = 2 * f if gated else f
    pixels = 3 * v.temporal_patch * v.patch_size**2
    out = [
        Layer(
            name="vision_patch_embed",
            kind=LayerKind.VISION,
            block=-1,
            params=pixels * h,
            gemms=(Gemm(name="patch", in_dim=pixels, out_dim=h, tp_split="none"),),
            act_sp_gemm_elems=pixels,
            act_sp_elems=pixels,
            mem_bound_elems=pixels + h,
            shardable=("tp",),
            causal=False,
            tokens_per_sample=tokens,
        )
    ]
    gemms: tuple[Gemm, ...]
    for j in range(v.num_layers):
        full = not v.window or (v.full_attention_every and (j + 1) % v.full_attention_every == 0)
        gemms = (
            Gemm(name="qkv", in_dim=h, out_dim=3 * h, tp_split="out"),
            Gemm(name="proj", in_dim=h, out_dim=h, tp_split="in"),
            Gemm(name="fc1", in_dim=h, out_dim=up, tp_split="out"),
            Gemm(name="fc2", in_dim=f, out_dim=h, tp_split="in"),
        )
        out.append(
            Layer(
                name=f"vision_block_{j}",
                kind=LayerKind.VISION,
                block=-1,
                params=sum(g.params for g in gemms) + 2 * h,  # + two RMSNorms
                gemms=gemms,
                attn_core_flops_per_token_per_seq=4 * h,
                act_tp_elems=4 * h + up + f,  # Q, K, V, attention out; MLP act in / out
                act_sp_elems=4 * h,  # two norm inputs, qkv and fc1 inputs
                act_tp_gemm_elems=h + f,
                act_sp_gemm_elems=2 * h,
                act_quadratic_heads=v.num_heads,
                mem_bound_elems=2 * (2 * h + 3 * h) + 4 * h + up + f,  # norms, residuals, rotary, act
                shardable=("tp", "sp"),
                window=0 if full else v.window,
                causal=False,
                tokens_per_sample=tokens,
            )
        )
    merged = h * v.merge**2
    width = v.projector_hidden or merged
    gemms = (
        Gemm(name="merger_fc1", in_dim=merged, out_dim=width, tp_split="out"),
        Gemm(name="merger_fc2", in_dim=width, out_dim=spec.hidden, tp_split="in"),
    )
    out.append(
        Layer(
            name="vision_merger",
            kind=LayerKind.PROJECTOR,
            block=-1,
            params=sum(g.params for g in gemms) + h,  # + the RMSNorm before merging
            gemms=gemms,
            act_tp_elems=2 * width,
            act_sp_elems=2 * merged,
            act_tp_gemm_elems=width,
            act_sp_gemm_elems=merged,
            mem_bound_elems=2 * merged + 2 * width,
            shardable=("tp", "sp"),
            causal=False,
            tokens_per_sample=tokens,
            tokens_merged=v.merge**2,
        )
    )
    return out
