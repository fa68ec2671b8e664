"""Model size limits (graph.spec.MODEL_LIMITS, README "Limits"; issue 16): every model source
(presets, Hugging Face import, explicit fields) passes them, each refusal names the scenario key,
the value and the limit, and absurd sizes are refused before anything walks the layers."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from paraplan.graph import ModelSpec, preset, preset_names
from paraplan.graph.spec import MODEL_LIMITS, scenario_key

DENSE = dict(name="t", num_layers=4, hidden=512, ffn_hidden=2048, num_heads=8, num_kv_heads=8, vocab=1000)
MOE_MLA = dict(
    DENSE,
    num_experts=8,
    top_k=2,
    num_shared_experts=1,
    moe_ffn_hidden=256,
    first_dense_layers=1,
    q_lora_rank=64,
    kv_lora_rank=64,
    qk_nope_head_dim=32,
    qk_rope_head_dim=16,
    v_head_dim=32,
    head_dim=48,
)


def test_every_limit_is_at_least_8x_the_largest_preset() -> None:
    # the README's reason for each limit: no real model is refused
    specs = [preset(n) for n in preset_names()]
    for field, limit in MODEL_LIMITS.items():
        largest = max(getattr(s, field) for s in specs)
        assert 8 * largest <= limit, (field, largest, limit)


@pytest.mark.parametrize("field", sorted(MODEL_LIMITS))
def test_a_size_over_its_limit_names_the_key_the_value_and_the_limit(field: str) -> None:
    limit = MODEL_LIMITS[field]
    with pytest.raises(
        ValueError,
        match=rf"model\.{scenario_key(field)}={limit + 1:,} exceeds "
        rf"paraplan's limit of {limit:,}",
    ):
        ModelSpec(**{**MOE_MLA, field: limit + 1})


def test_sizes_at_their_limits_are_accepted() -> None:
    spec = ModelSpec(
        name="big",
        num_layers=1_024,
        hidden=262_144,
        ffn_hidden=1_048_576,
        num_heads=4_096,
        num_kv_heads=4_096,
        vocab=16_777_216,
    )
    assert spec.num_layers == MODEL_LIMITS["num_layers"]
    assert spec.head_dim == 64


def test_issue16_a_billion_layers_is_refused_before_the_layers_are_walked() -> None:
    # a MoE model without ffn_hidden walks every layer to count its dense ones (ModelSpec
    # defaults); 10^9 layers hung there before the limits were checked first
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"model\.layers=1,000,000,000 exceeds"):
        ModelSpec(**{**MOE_MLA, "ffn_hidden": 0, "first_dense_layers": 0, "num_layers": 10**9})
    assert time.perf_counter() - start < 0.1


def test_a_huge_value_is_shown_by_its_magnitude() -> None:
    with pytest.raises(ValueError, match=r"model\.vocab=~10\^400 exceeds"):
        replace(preset("llama3-8b"), vocab=10**400)
