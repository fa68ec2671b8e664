"""Layer graph, presets and Hugging Face import."""

from __future__ import annotations

from pathlib import Path

import pytest
from paraplan.graph import LayerKind, build_graph, from_hf_config, preset, preset_names

HF = Path(__file__).resolve().parents[2] / "graph" / "data" / "hf"

REQUIRED = ["gpt3-175b", "llama2-7b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3.1-405b"]


@pytest.mark.parametrize("name", REQUIRED)
def test_required_presets_exist(name: str) -> None:
    assert name in preset_names()


# Published totals: Llama 3 8B 8.03B, 70B 70.6B, 405B 405.9B (Meta model cards); GPT-3 175B.
@pytest.mark.parametrize(
    ("name", "billions"),
    [
        ("llama3-8b", 8.03),
        ("llama3-70b", 70.6),
        ("llama3.1-405b", 405.9),
        ("gpt3-175b", 174.6),
        ("llama2-7b", 6.74),
        ("llama2-70b", 69.0),
    ],
)
def test_parameter_counts_match_the_published_totals(name: str, billions: float) -> None:
    assert build_graph(preset(name)).num_params / 1e9 == pytest.approx(billions, rel=0.01)


def test_graph_is_embedding_blocks_head_in_order() -> None:
    g = build_graph(preset("llama3-8b"))
    kinds = [ly.kind for ly in g.layers()]
    assert kinds[0] is LayerKind.EMBEDDING and kinds[-1] is LayerKind.LM_HEAD
    assert kinds.count(LayerKind.ATTENTION) == kinds.count(LayerKind.MLP) == 32
    assert g.graph.number_of_edges() == len(kinds) - 1
    assert set(g.block_layers(0)[0].shardable) == {"tp", "sp", "cp"}


def test_gqa_projection_is_smaller_than_mha() -> None:
    gqa = build_graph(preset("llama3-8b")).block_layers(0)[0]
    qkv = next(g for g in gqa.gemms if g.name == "qkv")
    assert qkv.out_dim == 4096 + 2 * 8 * 128


def test_hf_config_matches_the_preset() -> None:
    hf = from_hf_config(HF / "llama3-8b.json")
    p = preset("llama3-8b")
    for field in (
        "num_layers",
        "hidden",
        "ffn_hidden",
        "num_heads",
        "num_kv_heads",
        "vocab",
        "head_dim",
        "activation",
        "tied_embeddings",
    ):
        assert getattr(hf, field) == getattr(p, field), field


def test_hf_head_dim_not_hidden_over_heads() -> None:
    spec = from_hf_config(HF / "qwen3-32b.json")
    assert spec.head_dim == 128 and spec.hidden // spec.num_heads == 80


@pytest.mark.parametrize("name", ["gpt2-xl.json", "gpt-neox-20b.json", "mistral-7b.json"])
def test_hf_styles_import(name: str) -> None:
    spec = from_hf_config(HF / name)
    assert spec.num_layers > 0 and build_graph(spec).num_params > 1e9


def test_gpt2_ties_embeddings_by_default() -> None:
    assert from_hf_config(HF / "gpt2-xl.json").tied_embeddings is True


def test_unknown_preset_names_the_choices() -> None:
    with pytest.raises(ValueError, match="model.preset='llama9'.*llama3-8b"):
        preset("llama9")
