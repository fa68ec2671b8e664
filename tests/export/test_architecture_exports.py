"""Each preset family's architecture reaches the Megatron and Megatron-Bridge exports (fast; the
oracle files check the same exports with the frameworks' own code)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from paraplan.export import context
from paraplan.export.megatron import megatron_args
from paraplan.export.nemo import bridge_overrides

sys.path.insert(0, str(Path(__file__).parent))
from architecture_plans import MEGATRON_CASES, result  # noqa: E402

EXPECTED_FLAGS = {  # case -> flags (with values) the Megatron command must carry
    "gpt3-1.3b-tp2": ["--position-embedding-type learned_absolute"],
    "llama3-8b-sp": ["--position-embedding-type rope", "--rotary-base 500000", "--disable-bias-linear"],
    "llama3.1-8b-zero3": ["--use-rope-scaling", "--rope-scaling-factor 8.0"],
    "qwen2.5-7b-tp4": ["--add-qkv-bias", "--rotary-base 1000000", "--norm-epsilon 1e-06"],
    "qwen3-32b-tp8": ["--qk-layernorm", "--kv-channels 128"],
    "nemotron4-340b": ["--rotary-percent 0.5", "--apply-layernorm-1p", "--squared-relu"],
    "mistral-7b-tp4": ["--window-size 4096,0"],
    "mixtral-8x7b-ep8": ["--moe-router-load-balancing-type aux_loss", "--moe-aux-loss-coeff 0.02"],
    "deepseek-v3-pp8-ep16": [
        "--moe-router-score-function sigmoid",
        "--moe-router-enable-expert-bias",
        "--moe-router-num-groups 8",
        "--moe-router-group-topk 4",
        "--moe-router-topk-scaling-factor 2.5",
        "--moe-router-load-balancing-type seq_aux_loss",
        "--rope-type yarn",
        "--rotary-scaling-factor 40.0",
        "--mscale-all-dim 1.0",
        "--qk-layernorm",
    ],
    "gpt-oss-120b-ep8-etp1": [
        "--softmax-type learnable",
        "--window-attn-skip-freq 2",
        "--position-embedding-type yarn",
        "--no-yarn-correction-range-round-to-int",
    ],
    "explicit-qwen2-moe-style": ["--moe-router-pre-softmax", "--add-qkv-bias"],
}
ABSENT_FLAGS = {
    "gpt3-1.3b-tp2": ["--disable-bias-linear", "--untie-embeddings-and-output-weights"],
    "gpt-oss-120b-ep8-etp1": ["--disable-bias-linear"],
    "llama3-8b-sp": ["--use-rope-scaling"],
}


@pytest.mark.parametrize("name", EXPECTED_FLAGS)
def test_megatron_command_carries_the_architecture(name: str) -> None:
    command = " ".join(megatron_args(context(result(MEGATRON_CASES[name]))))
    for flag in EXPECTED_FLAGS[name]:
        assert f"{flag} " in command + " ", flag
    for flag in ABSENT_FLAGS.get(name, []):
        assert f"{flag} " not in command + " ", flag


@pytest.mark.parametrize("name", ["qwen3-32b-tp8", "deepseek-v3-pp8-ep16", "llama3.1-8b-zero3"])
def test_bridge_overrides_carry_the_same_architecture(name: str) -> None:
    res = result(MEGATRON_CASES[name])
    model = {k.removeprefix("model."): v for k, v in bridge_overrides(context(res)).items()}
    spec = context(res).spec
    assert model["rotary_base"] == int(spec.rope.theta)
    assert model["qk_layernorm"] is (spec.qk_norm or spec.is_mla)
    assert model["num_query_groups"] == spec.num_kv_heads
    assert model.get("rope_scaling", False) is (spec.rope.scaling == "llama3")
