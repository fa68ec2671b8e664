"""Nemotron 3 Nano 30B-A3B: the preset, its published parameter counts and its HF import."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from paraplan.graph import LayerKind, build_graph, from_fields, from_hf_config, preset, to_fields

HF = Path(__file__).resolve().parents[2] / "graph" / "data" / "hf"
NANO = "nemotron3-nano-30b-a3b"


def test_nano_matches_the_published_parameter_counts() -> None:
    """Megatron-Bridge docs/models/nemotron/nemotron3-nano.md: 30B total (31.6B in the model
    listings), 3.5B active (docs/data/models.json). Formula check: 2 V h embeddings + 23 Mamba-2
    (in_proj h x (2 d + 2 g N + heads), out_proj d x h) + 6 GQA attention + 23 MoE (128 experts
    of 2 h f, shared 2 h f_s, router h E) = 31.58B with V = 131072."""
    g = build_graph(preset(NANO))
    assert g.num_params / 1e9 == pytest.approx(31.6, rel=0.01)
    assert g.num_active_params / 1e9 == pytest.approx(3.5, rel=0.03)


def test_nano_layer_pattern_counts() -> None:
    kinds = [ly.kind for ly in build_graph(preset(NANO)).layers() if ly.block >= 0]
    assert (kinds.count(LayerKind.MAMBA), kinds.count(LayerKind.MOE), kinds.count(LayerKind.ATTENTION)) == (
        23,
        23,
        6,
    )
    assert LayerKind.MLP not in kinds


def test_nano_moe_layer_is_top6_of_128_relu2_experts_with_a_shared_one() -> None:
    moe = build_graph(preset(NANO)).layer("mlp_1")
    h, f, fs = 2688, 1856, 3712
    assert moe.experts is not None and (moe.experts.num_experts, moe.experts.top_k) == (128, 6)
    assert moe.experts.params_per_expert == 2 * h * f  # non-gated squared ReLU: fc1 + fc2
    # router h x E, shared expert 2 h f_s, one RMSNorm
    assert moe.params == 128 * 2 * h * f + h * 128 + 2 * h * fs + h


def test_nano_round_trips_through_fields() -> None:
    spec = preset(NANO)
    assert from_fields(NANO, to_fields(spec)) == spec


def test_nano_hf_config_imports_to_the_preset() -> None:
    """The nemotron_h config.json (transformers 5.24 NemotronHConfig keys) gives the preset's spec,
    the router included (sigmoid, expert bias, routed_scaling_factor 2.5)."""
    hf = from_hf_config(HF / f"{NANO}.json")
    assert replace(hf, name=NANO) == preset(NANO)
    assert build_graph(hf).layers() == build_graph(preset(NANO)).layers()


def test_nano_hf_import_refuses_mtp_layers() -> None:
    """Nemotron 3's MTP layers have their own hybrid pattern ("*E", repeated): not modelled."""
    cfg = json.loads((HF / f"{NANO}.json").read_text())
    with pytest.raises(ValueError, match="num_nextn_predict_layers"):
        from_hf_config({**cfg, "num_nextn_predict_layers": 1})
