"""Mixture-of-experts and latent-attention models: presets, parameter counts, HF import, layers."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from paraplan.graph import LayerKind, ModelSpec, build_graph, from_fields, from_hf_config, preset

HF = Path(__file__).resolve().parents[2] / "graph" / "data" / "hf"
MOE_PRESETS = [
    "mixtral-8x7b",
    "mixtral-8x22b",
    "deepseek-v3",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
    "gpt-oss-120b",
]


# Totals / active from docs/data/models.json params_computed_check (weights, no biases):
# Mixtral 8x7B 46.70B / 12.88B, 8x22B 140.63B / 39.16B, DeepSeek-V3 671.03B / 37.55B (incl. the
# 1.85B embedding + head), Qwen3-30B-A3B 30.53B / 3.35B, Qwen3-235B-A22B 235.09B / 22.19B,
# gpt-oss-120b 116.79B / 5.71B incl. the 0.58B input embedding. The published figures exclude
# DeepSeek-V3's multi-token-prediction module (models.json notes), so its mtp_* layers are left out.
@pytest.mark.parametrize(
    ("name", "total_b", "active_b"),
    [
        ("mixtral-8x7b", 46.70, 12.88),
        ("mixtral-8x22b", 140.63, 39.16),
        ("deepseek-v3", 671.03, 37.55),
        ("qwen3-30b-a3b", 30.53, 3.35),
        ("qwen3-235b-a22b", 235.09, 22.19),
        ("gpt-oss-120b", 116.79, 5.71),
    ],
)
def test_moe_parameter_counts_match_the_sources(name: str, total_b: float, active_b: float) -> None:
    main = [ly for ly in build_graph(preset(name)).layers() if not ly.name.startswith("mtp_")]
    assert sum(ly.params for ly in main) / 1e9 == pytest.approx(total_b, rel=0.002)
    assert sum(ly.active_params for ly in main) / 1e9 == pytest.approx(active_b, rel=0.002)


@pytest.mark.parametrize("name", MOE_PRESETS)
def test_hf_config_matches_the_moe_preset(name: str) -> None:
    hf, p = from_hf_config(HF / f"{name}.json"), preset(name)
    for f in dataclasses.fields(ModelSpec):
        if f.name != "name":
            assert getattr(hf, f.name) == getattr(p, f.name), f.name


def test_deepseek_v3_first_three_layers_are_dense() -> None:
    g = build_graph(preset("deepseek-v3"))
    kinds = [ly.kind for ly in g.layers() if ly.name.startswith("mlp_")]
    assert kinds[:3] == [LayerKind.MLP] * 3 and set(kinds[3:]) == {LayerKind.MOE}
    assert (g.dense_block, g.moe_block) == (0, 3)
    dense_mlp = g.layer("mlp_0")
    assert dense_mlp.params == 3 * 7168 * 18432 + 7168  # gated FFN + RMSNorm


def test_moe_layer_counts_routed_and_shared_experts() -> None:
    spec = preset("deepseek-v3")
    moe = build_graph(spec).layer("mlp_3")
    h, f = 7168, 2048
    # 256 routed experts of 3*h*f, one shared expert of the same width, router h x 256, norm h
    assert moe.expert_params == 256 * 3 * h * f
    assert moe.params == 257 * 3 * h * f + h * 256 + h
    assert moe.experts is not None and moe.experts.top_k == 8
    # active GEMM FLOPs per token: 2 x (8 routed + 1 shared) x 3hf + router 2 h E
    assert moe.gemm_flops_per_token == 2 * 9 * 3 * h * f + 2 * h * 256


def test_mla_attention_shapes() -> None:
    spec = preset("deepseek-v3")
    attn = build_graph(spec).layer("attn_0")
    dims = {g.name: (g.in_dim, g.out_dim, g.tp_split) for g in attn.gemms}
    assert dims == {
        "q_down": (7168, 1536, "none"),
        "q_up": (1536, 128 * 192, "out"),
        "kv_down": (7168, 512 + 64, "none"),
        "kv_up": (512, 128 * 256, "out"),
        "proj": (128 * 128, 7168, "in"),
    }
    # q.k over 192 dims, softmax.v over 128, per head: 2*(128*192) + 2*(128*128) per token per key
    assert attn.attn_core_flops_per_token_per_seq == 2 * 128 * 192 + 2 * 128 * 128
    assert attn.replicated_params == 7168 * 1536 + 7168 * 576
    assert spec.q_dim == 128 * 192


def test_qwen_decoder_sparse_step_maps_to_dense_then_every_kth() -> None:
    cfg = {
        "model_type": "qwen3_moe",
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_hidden_layers": 6,
        "vocab_size": 1000,
        "hidden_act": "silu",
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 128,
        "intermediate_size": 512,
        "decoder_sparse_step": 2,
    }
    spec = from_hf_config(cfg)
    # Qwen: layer i is sparse when (i + 1) % step == 0 -> layers 1, 3, 5
    assert [spec.is_moe_layer(i) for i in range(6)] == [False, True, False, True, False, True]
    assert spec.ffn_hidden == 512


def test_dense_models_have_no_expert_parameters() -> None:
    g = build_graph(preset("llama3-8b"))
    assert g.moe_block is None and g.num_active_params == g.num_params
    assert all(ly.expert_params == 0 for ly in g.layers())


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"experts": 8, "top_k": 9, "moe_ffn_hidden": 64}, "top_k=9"),
        ({"experts": 8, "top_k": 2}, "moe_ffn_hidden"),
        ({"top_k": 2, "moe_ffn_hidden": 64, "ffn_hidden": 64}, "experts > 0"),
        ({"experts": 8, "top_k": 2, "moe_ffn_hidden": 64, "first_dense_layers": 4}, "no MoE layer"),
        ({"ffn_hidden": 64, "kv_lora_rank": 32}, "qk_nope_head_dim"),
    ],
)
def test_moe_and_mla_shape_errors_name_the_field(fields: dict, match: str) -> None:
    base = {"layers": 4, "hidden": 128, "heads": 4, "vocab": 100}
    with pytest.raises(ValueError, match=match):
        from_fields("bad", base | fields)


def test_biased_experts_pay_megatron_s_fp32_fc2_bias_pass() -> None:
    """Issue 22: megatron-core's TEGroupedMLP adds the fc2 bias scaled by the router probability
    per local expert in fp32 (``_apply_bias``): forward 28 B and backward 40 B per element of the
    expert output, charged as (28 + 40) / 3 / 2 forward elements (backward counted twice)."""
    from paraplan.graph.decoder_layers import EXPERT_BIAS_ELEMS

    spec = preset("gpt-oss-120b")
    h, f = spec.hidden, spec.moe_ffn_hidden
    plain = 4 * h + 2 * f + f  # permute + unpermute read + write, gated activation in and out
    biased = build_graph(spec).layer("mlp_0").experts
    unbiased = build_graph(dataclasses.replace(spec, linear_bias=False)).layer("mlp_0").experts
    assert biased is not None and unbiased is not None
    assert EXPERT_BIAS_ELEMS == pytest.approx(68 / 6)
    assert unbiased.mem_bound_elems == plain
    assert unbiased.bias_pass_elems == 0.0
    # a training framework's pass, apart from the layer's own element-wise work (serving engines
    # fuse the bias into the GEMM: cost/serving_step.py reads mem_bound_elems alone)
    assert biased.mem_bound_elems == plain
    assert biased.bias_pass_elems == pytest.approx(68 / 6 * h)
