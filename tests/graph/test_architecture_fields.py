"""Architecture fields of the presets and of Hugging Face imports (issue 15 item 2).

Expected values: docs/data/models.json (position_encoding, attention_variant, norm, extra)
for each preset's model, and the config.json files under graph/data/hf.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from paraplan.graph import from_hf_config, preset

HF = Path(__file__).resolve().parents[2] / "graph" / "data" / "hf"

PUBLISHED = {  # preset: (positions, rope theta, rope scaling, qkv bias, qk norm, all biases)
    "gpt3-175b": ("learned", None, "", False, False, True),
    "llama2-70b": ("rope", 10_000, "", False, False, False),
    "llama3-70b": ("rope", 500_000, "", False, False, False),
    "llama3.1-405b": ("rope", 500_000, "llama3", False, False, False),
    "mistral-7b": ("rope", 10_000, "", False, False, False),
    "qwen2.5-72b": ("rope", 1_000_000, "", True, False, False),
    "qwen3-32b": ("rope", 1_000_000, "", False, True, False),
    "qwen3-235b-a22b": ("rope", 1_000_000, "", False, True, False),
    "mixtral-8x22b": ("rope", 1_000_000, "", False, False, False),
    "deepseek-v3": ("rope", 10_000, "yarn", False, False, False),
    "gpt-oss-120b": ("rope", 150_000, "yarn", False, False, True),
    "bloom-176b": ("alibi", None, "", False, False, True),
    "gpt-neox-20b": ("rope", 10_000, "", False, False, True),
    "nemotron4-340b": ("rope", 10_000, "", False, False, False),
}


@pytest.mark.parametrize("name", PUBLISHED)
def test_preset_architecture_is_the_published_one(name: str) -> None:
    position, theta, scaling, qkv_bias, qk_norm, linear_bias = PUBLISHED[name]
    s = preset(name)
    assert s.position_embedding == position
    if theta is not None:
        assert s.rope.theta == theta
    assert (s.rope.scaling, s.qkv_bias, s.qk_norm, s.linear_bias) == (scaling, qkv_bias, qk_norm, linear_bias)


def test_deepseek_v3_router_and_yarn_are_the_published_ones() -> None:
    s = preset("deepseek-v3")  # models.json extra.router; config.json rope_scaling
    assert (
        s.router.score,
        s.router.expert_bias,
        s.router.groups,
        s.router.group_topk,
        s.router.scaling_factor,
    ) == ("sigmoid", True, 8, 4, 2.5)
    assert (s.rope.factor, s.rope.original_max_positions, s.rope.mscale_all_dim) == (40, 4096, 1)


@pytest.mark.parametrize("name", ["llama3-8b", "mistral-7b", "qwen3-32b", "gpt-neox-20b"])
def test_hf_config_gives_the_dense_presets_architecture(name: str) -> None:
    hf, p = from_hf_config(HF / f"{name}.json"), preset(name)
    for f in dataclasses.fields(p):
        if f.name not in ("name", "norm_eps"):  # the trimmed files keep rms_norm_eps only
            assert getattr(hf, f.name) == getattr(p, f.name), f.name


def test_hf_gpt2_has_learned_positions_and_biases() -> None:
    s = from_hf_config(HF / "gpt2-xl.json")
    assert (s.position_embedding, s.linear_bias) == ("learned", True)


def test_hf_import_refuses_a_rope_scaling_it_does_not_model() -> None:
    cfg = {
        "model_type": "llama",
        "hidden_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "vocab_size": 1000,
        "hidden_act": "silu",
        "rope_scaling": {"rope_type": "linear", "factor": 4},
    }
    with pytest.raises(ValueError, match="rope_scaling type 'linear' is not modelled"):
        from_hf_config(cfg)


def test_hf_import_reads_the_window_pattern_of_layer_types() -> None:
    base = {
        "model_type": "mistral",
        "hidden_size": 256,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "vocab_size": 1000,
        "hidden_act": "silu",
        "sliding_window": 64,
    }
    every_other = ["sliding_attention", "full_attention"] * 2
    assert from_hf_config({**base, "layer_types": every_other}).full_attention_every == 2
    odd = ["full_attention", "sliding_attention", "sliding_attention", "full_attention"]
    with pytest.raises(ValueError, match="layer_types"):
        from_hf_config({**base, "layer_types": odd})


def test_unknown_rope_field_names_the_field() -> None:
    from paraplan.graph import from_fields

    with pytest.raises(ValueError, match="model.rope.thta is not a known field"):
        from_fields(
            "x", {"layers": 2, "hidden": 64, "ffn_hidden": 128, "heads": 4, "vocab": 100, "rope": {"thta": 1}}
        )
