"""Layer kinds (issue 13 item 3): windowed and chunked attention, Mamba-1/2, vision encoder,
multi-token prediction, hybrid patterns; the presets of their families and their HF import."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from paraplan.graph import LayerKind, ModelSpec, build_graph, from_fields, from_hf_config, preset, to_fields
from paraplan.graph.mamba_layers import ssd_traffic

HF = Path(__file__).resolve().parents[2] / "graph" / "data" / "hf"
NEW_PRESETS = [
    "llama4-scout",
    "llama4-maverick",
    "gpt-oss-120b",
    "gemma3-27b",
    "deepseek-v3",
    "nemotron-h-56b",
    "qwen2.5-vl-72b",
    "jamba-1.5-mini",
]


def _main(name: str) -> list:
    """The preset's layers without the MTP modules (published totals exclude them)."""
    return [ly for ly in build_graph(preset(name)).layers() if not ly.name.startswith("mtp_")]


# Published totals / active (docs/data/models.json total_params_published /
# active_params_published): Llama 4 Scout 109B / 17B (the text tower computes to 107.8B: the
# published total includes the 0.8B vision encoder, not modelled), Maverick 400B / 17B, gpt-oss-120b
# 117B / 5.1B (active without the input embedding), Gemma 3 27B, DeepSeek-V3 671B / 37B (without
# MTP), Nemotron-H 56B, Jamba 1.5 Mini 52B / 12B. Qwen2.5-VL-72B has no published figure ("72B
# class"): its computed check 73.41B (LLM 72.71B + ViT 0.64B + merger 0.07B).
@pytest.mark.parametrize(
    ("name", "total_b", "active_b", "rel"),
    [
        ("llama4-scout", 109.0, 17.0, 0.02),
        ("llama4-maverick", 400.0, 17.0, 0.02),
        ("gpt-oss-120b", 117.0, 5.1, 0.01),
        ("gemma3-27b", 27.0, None, 0.01),
        ("deepseek-v3", 671.0, 37.0, 0.02),
        ("nemotron-h-56b", 56.0, None, 0.01),
        ("jamba-1.5-mini", 52.0, 12.0, 0.01),
        ("qwen2.5-vl-72b", 73.41, None, 0.002),
    ],
)
def test_new_presets_match_the_published_parameter_counts(
    name: str, total_b: float, active_b: float | None, rel: float
) -> None:
    layers = _main(name)
    assert sum(ly.params for ly in layers) / 1e9 == pytest.approx(total_b, rel=rel)
    if active_b is not None:
        active = sum(ly.active_params for ly in layers)
        if name == "gpt-oss-120b":  # published active count leaves out the input embedding
            active -= preset(name).vocab * preset(name).hidden
        assert active / 1e9 == pytest.approx(active_b, rel=rel)


@pytest.mark.parametrize("name", NEW_PRESETS)
def test_new_presets_round_trip_through_fields(name: str) -> None:
    spec = preset(name)
    assert from_fields(name, to_fields(spec)) == spec


@pytest.mark.parametrize("name", NEW_PRESETS)
def test_hf_config_builds_the_preset_graph(name: str) -> None:
    """The config.json written from models.json imports to the preset's exact layers."""
    hf = from_hf_config(HF / f"{name}.json")
    assert build_graph(hf).layers() == build_graph(preset(name)).layers()
    assert replace(hf, name=name) == preset(name)


def test_gpt_oss_windows_every_even_layer() -> None:
    """openai/gpt-oss model.py: sliding window 128 on even layers (0, 2, ...), full on odd."""
    g = build_graph(preset("gpt-oss-120b"))
    assert [g.layer(f"attn_{i}").window for i in range(4)] == [128, 0, 128, 0]
    assert len(set(g.block_kinds)) == 2  # windowed MoE block, full MoE block


def test_gemma3_five_local_layers_per_global_one() -> None:
    g = build_graph(preset("gemma3-27b"))
    windows = [g.layer(f"attn_{i}").window for i in range(62)]
    assert [i for i, w in enumerate(windows) if w == 0] == [5, 11, 17, 23, 29, 35, 41, 47, 53, 59]
    assert set(windows) == {0, 1024}
    # gated GELU: two up-projections like SwiGLU (3 h f weights + RMSNorm)
    assert g.layer("mlp_0").params == 3 * 5376 * 21504 + 5376


def test_llama4_chunked_layers_and_global_nope_layers() -> None:
    """llama-models model.py: layer i global and NoPE when (i + 1) % 4 == 0, else chunked."""
    spec = preset("llama4-maverick")
    g = build_graph(spec)
    chunks = [g.layer(f"attn_{i}").chunk for i in range(8)]
    assert chunks == [8192, 8192, 8192, 0, 8192, 8192, 8192, 0]
    q, kv, h = spec.q_dim, spec.kv_dim, spec.hidden
    assert g.layer("attn_0").mem_bound_elems == 5 * h + 2 * (q + kv)  # norm, residual, rotary
    assert g.layer("attn_3").mem_bound_elems == 5 * h  # NoPE: no rotary
    # Maverick: dense FFN on even layers, MoE (128 experts + 1 shared) on odd ones
    assert [g.layer(f"mlp_{i}").kind for i in range(4)] == [LayerKind.MLP, LayerKind.MOE] * 2
    assert g.layer("mlp_1").experts is not None and g.layer("mlp_1").experts.num_experts == 128


def test_nemotron_h_pattern_expands_to_one_layer_per_block() -> None:
    spec = preset("nemotron-h-56b")
    g = build_graph(spec)
    kinds = [g.block_layers(i)[0].kind for i in range(spec.num_layers)]
    assert all(len(g.block_layers(i)) == 1 for i in range(spec.num_layers))
    assert (kinds.count(LayerKind.MAMBA), kinds.count(LayerKind.ATTENTION), kinds.count(LayerKind.MLP)) == (
        54,
        10,
        54,
    )
    assert g.num_blocks == 118 and len(g.kind_blocks) == 3


def test_mamba2_layer_matches_megatron_mixer_shapes() -> None:
    """Nemotron-H 56B Mamba-2 mixer (megatron-core 0.16.1 ssm/mamba_mixer.py): in_proj h -> 2d +
    2GN + H, conv (d + 2GN) x 4 + bias, dt_bias / A_log / D per head, gated norm d, out_proj
    d -> h, plus the pre-norm h; d = 256 x 64, G = 8, N = 256."""
    g = build_graph(preset("nemotron-h-56b"))
    ly = g.layer("mamba_0")
    h, d, gn, heads = 8192, 256 * 64, 8 * 256, 256
    conv = d + 2 * gn
    assert ly.params == h * (2 * d + 2 * gn + heads) + conv * 4 + conv + 3 * heads + d + d * h + h
    # SSD scan (arXiv:2405.21060 Sec. 6, Q = 128): 2QGN + 2Qd + 4Nd, conv 2 * 4 * conv_dim
    assert ly.scan_flops_per_token == 2 * 128 * 8 * 256 + 2 * 128 * d + 4 * 256 * d + 8 * conv
    assert ly.state_elems_per_seq == 4 * conv + d * 256
    assert "cp" not in ly.shardable and ly.kind is LayerKind.MAMBA
    # mamba_ssm's SSD kernels: fp32 chunk states S = d N / Q per token dominate the traffic
    states = d * 256 / 128
    assert ly.scan_bytes_per_token == 12 * states + 8 * 8 * 128 + 8 * gn + 10 * d
    assert ly.scan_backward_bytes_per_token == 44 * states + 24 * 8 * 128 + 30 * gn + 34 * d


def test_ssd_traffic_follows_the_chunk_length() -> None:
    """A longer SSD chunk holds fewer chunk states (traffic down) and larger C.B^T blocks (FLOPs
    up): the trade-off mamba_ssm's chunk_size sets."""
    short, long = ssd_traffic(64, 64, 128, 8, 128), ssd_traffic(64, 64, 128, 8, 256)
    assert long.forward_bytes < short.forward_bytes and long.backward_bytes < short.backward_bytes
    assert long.backward_flops > short.backward_flops


def test_jamba_mamba1_mixer_matches_the_published_size() -> None:
    """models.json: 105.3M parameters per Jamba Mamba mixer (in_proj, conv, x_proj, dt_proj, A,
    D, out_proj, dt/B/C norms); the layer adds its 4096-wide pre-norm."""
    g = build_graph(preset("jamba-1.5-mini"))
    assert (g.layer("mamba_0").params - 4096) / 1e6 == pytest.approx(105.3, abs=0.05)
    # selective scan: ~9 FLOPs per channel per state element + the conv (Gu & Dao 2023)
    assert g.layer("mamba_0").scan_flops_per_token == 9 * 8192 * 16 + 2 * 4 * 8192


def test_jamba_pattern_pairs_a_mixer_and_an_ffn() -> None:
    spec = preset("jamba-1.5-mini")
    symbols = spec.layer_pattern
    mixers, ffns = symbols[0::2], symbols[1::2]
    assert [i for i, c in enumerate(mixers) if c == "*"] == [4, 12, 20, 28]
    assert ffns == "-E" * 16
    assert (spec.num_moe_layers, spec.num_dense_layers) == (16, 16)


def test_qwen25_vl_vision_encoder_is_the_first_stage_head() -> None:
    g = build_graph(preset("qwen2.5-vl-72b"))
    head = g.head_names
    assert head[0] == "vision_patch_embed" and head[-2:] == ("vision_merger", "embedding")
    assert len(head) == 1 + 32 + 1 + 1
    block = g.layer("vision_block_0")
    # RMSNorm, QKV 1280 -> 3 x 1280, proj, gated SiLU MLP 3456, second RMSNorm (biases not counted)
    assert block.params == 1280 * 3840 + 1280 * 1280 + 3 * 1280 * 3456 + 2 * 1280
    assert g.layer("vision_merger").params == 5120 * 5120 + 5120 * 8192 + 1280
    assert g.layer("vision_patch_embed").params == 3 * 2 * 14 * 14 * 1280
    # windows of 8 x 8 patches in all blocks but 7, 15, 23, 31
    assert [j for j in range(32) if g.layer(f"vision_block_{j}").window == 0] == [7, 15, 23, 31]
    assert not block.causal and block.tokens_per_sample == 1024
    assert g.layer("vision_merger").tokens_merged == 4


def test_deepseek_v3_mtp_module_is_the_last_stage_tail() -> None:
    """README_WEIGHTS: one MTP module, 11.5B unique params (models.json computes 11.61B: one
    MLA + MoE layer + eh_proj 2h -> h + norms); embedding and head shared (no params)."""
    g = build_graph(preset("deepseek-v3"))
    tail = g.tail_names
    assert tail == (
        "final_norm",
        "lm_head",
        "mtp_0_proj",
        "mtp_0_attn",
        "mtp_0_mlp",
        "mtp_0_norm",
        "mtp_0_head",
    )
    mtp = sum(g.layer(n).params for n in tail if n.startswith("mtp_"))
    assert mtp / 1e9 == pytest.approx(11.61, rel=0.005)
    assert g.layer("mtp_0_head").params == 0 and g.layer("mtp_0_mlp").kind is LayerKind.MOE
    assert g.num_blocks == 61  # MTP layers are not blocks


def test_pattern_and_kind_fields_are_checked() -> None:
    base = dict(name="x", num_layers=4, hidden=256, ffn_hidden=512, num_heads=4, num_kv_heads=4, vocab=1000)
    with pytest.raises(ValueError, match="model.layer_pattern has 'X'"):
        ModelSpec(**base, layer_pattern="M*-X")
    with pytest.raises(ValueError, match="one per layer"):
        ModelSpec(**base, layer_pattern="M*-")
    with pytest.raises(ValueError, match="model.mamba.version"):
        ModelSpec(**base, layer_pattern="M*-M")
    with pytest.raises(ValueError, match="set model.experts"):
        ModelSpec(**base, layer_pattern="*E*E")
    with pytest.raises(ValueError, match="exclude each other"):
        ModelSpec(**base, sliding_window=64, attention_chunk=128)


def test_hf_import_refuses_what_it_does_not_model() -> None:
    scout = json.loads((HF / "llama4-scout.json").read_text())
    with pytest.raises(ValueError, match=r"model\.hf_config: vision_config \(Llama 4's vision encoder\)"):
        from_hf_config({**scout, "vision_config": {"hidden_size": 1408}})
    gemma = json.loads((HF / "gemma3-27b.json").read_text())
    capped = {**gemma, "text_config": {**gemma["text_config"], "final_logit_softcapping": 30.0}}
    with pytest.raises(ValueError, match="final_logit_softcapping=30.0"):
        from_hf_config(capped)
    silu = {**gemma, "text_config": {**gemma["text_config"], "hidden_activation": "silu"}}
    with pytest.raises(ValueError, match="hidden_activation='silu'"):
        from_hf_config(silu)
    nemotron = json.loads((HF / "nemotron-h-56b.json").read_text())
    with pytest.raises(ValueError, match="num_nextn_predict_layers"):
        from_hf_config({**nemotron, "num_nextn_predict_layers": 1})
    with pytest.raises(ValueError, match="hybrid_override_pattern or layers_block_type"):
        from_hf_config({k: v for k, v in nemotron.items() if k != "hybrid_override_pattern"})
    with pytest.raises(ValueError, match="model_type='mamba2'"):
        from_hf_config({**nemotron, "model_type": "mamba2"})
    llama = json.loads((HF / "llama3-8b.json").read_text())
    with pytest.raises(ValueError, match="sliding_window=512 without layer_types"):
        from_hf_config({**llama, "sliding_window": 512})
    qwen_vl = json.loads((HF / "qwen2.5-vl-72b.json").read_text())
    wide = {**qwen_vl, "vision_config": {**qwen_vl["vision_config"], "out_hidden_size": 4096}}
    with pytest.raises(ValueError, match="out_hidden_size=4096"):
        from_hf_config(wide)


def test_hf_import_reads_nemotron_layer_type_lists() -> None:
    """transformers 5.24 NemotronHConfig writes the pattern as layers_block_type names."""
    nemotron = json.loads((HF / "nemotron-h-56b.json").read_text())
    names = {"M": "mamba", "*": "attention", "-": "mlp"}
    listed = {k: v for k, v in nemotron.items() if k != "hybrid_override_pattern"}
    listed["layers_block_type"] = [names[c] for c in nemotron["hybrid_override_pattern"]]
    assert from_hf_config(listed).layer_pattern == preset("nemotron-h-56b").layer_pattern


def test_jamba_dt_rank_auto_is_ceil_hidden_over_16() -> None:
    jamba = json.loads((HF / "jamba-1.5-mini.json").read_text())
    spec = from_hf_config({**jamba, "mamba_dt_rank": "auto"})
    assert spec.mamba.dt_rank == math.ceil(4096 / 16)


def test_llama4_layer_types_give_the_same_layout_as_the_interval() -> None:
    """transformers 5 writes Llama 4's layout as layer_types (chunked_attention / full_attention)."""
    cfg = json.loads((HF / "llama4-maverick.json").read_text())
    text = {**cfg["text_config"], "layer_types": ["chunked_attention"] * 3 + ["full_attention"]}
    with pytest.raises(ValueError, match="for each of the 48 layers"):
        from_hf_config({**cfg, "text_config": text})
    text["layer_types"] = (["chunked_attention"] * 3 + ["full_attention"]) * 12
    spec = from_hf_config({**cfg, "text_config": text})
    assert build_graph(spec).layers() == build_graph(preset("llama4-maverick")).layers()


def test_moe_pattern_places_moe_blocks_anywhere() -> None:
    spec = from_fields(
        "x",
        {
            "layers": 4,
            "hidden": 256,
            "ffn_hidden": 512,
            "heads": 4,
            "vocab": 1000,
            "experts": 4,
            "top_k": 2,
            "moe_ffn_hidden": 128,
            "moe_pattern": "-EE-",
        },
    )
    g = build_graph(spec)
    assert [g.layer(f"mlp_{i}").kind for i in range(4)] == [
        LayerKind.MLP,
        LayerKind.MOE,
        LayerKind.MOE,
        LayerKind.MLP,
    ]
    assert g.block_kinds == (0, 1, 1, 0) and (g.dense_block, g.moe_block) == (0, 1)
    with pytest.raises(ValueError, match="model.moe_pattern needs one 'E'"):
        replace(spec, moe_pattern="-E")
    nemotron = json.loads((HF / "nemotron-h-56b.json").read_text())
    # LatentMoE is modelled (tests/graph/test_latent_moe.py); without MoE layers it changes nothing
    assert from_hf_config({**nemotron, "moe_latent_size": 1024}) == from_hf_config(nemotron)
