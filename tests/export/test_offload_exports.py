"""job.offload_modules in the exports (issue 22, row 2058): Megatron-LM's
--fine-grained-activation-offloading --offload-modules and Transformer Engine's
NVTE_CPU_OFFLOAD_V1, Megatron-Bridge's TransformerConfig fields, refusals by name elsewhere.
Megatron-LM 0.19.2's own parser reads the flags back in tests/export/test_megatron_lm_oracle.py
(architecture_plans.MOE_STATE_CASES, the offload cases)."""

from __future__ import annotations

import pytest

from paraplan.export import context
from paraplan.export.megatron import megatron_args, megatron_env
from paraplan.export.nemo import bridge_overrides, nemo2_overrides
from tests.export.test_exporters import refusal, result

QWEN = {
    "model": {"preset": "qwen3-30b-a3b"},
    "cluster": {"preset": "dgx-h100", "nodes": 2},
    "job": {
        "seq_len": 4096,
        "global_batch": 256,
        "precision": "bf16",
        "recompute_modules": ["moe_act", "layernorm"],
        "offload_modules": ["moe_act", "expert_fc1"],
    },
}
EP8 = {"dp": 16, "tp": 1, "pp": 1, "ep": 8, "micro_batch": 1, "zero": 1, "recompute": "selective"}


def test_megatron_writes_the_flags_in_its_order_and_the_te_variable() -> None:
    ctx = context(result(QWEN, **EP8))
    argv = megatron_args(ctx)
    i = argv.index("--offload-modules")
    assert "--fine-grained-activation-offloading" in argv
    assert argv[i + 1 : i + 3] == ["expert_fc1", "moe_act"]  # Megatron's order of choices
    assert megatron_env(ctx)["NVTE_CPU_OFFLOAD_V1"] == "1"


def test_no_offloading_writes_neither() -> None:
    plain = {**QWEN, "job": {k: v for k, v in QWEN["job"].items() if k != "offload_modules"}}
    ctx = context(result(plain, **EP8))
    assert "--fine-grained-activation-offloading" not in megatron_args(ctx)
    assert "NVTE_CPU_OFFLOAD_V1" not in megatron_env(ctx)


def test_bridge_and_nemo2_set_the_transformer_config_fields() -> None:
    ctx = context(result(QWEN, **EP8))
    bridge, nemo2 = bridge_overrides(ctx), nemo2_overrides(ctx)
    assert bridge["model.fine_grained_activation_offloading"] is True
    assert bridge["model.offload_modules"] == ["expert_fc1", "moe_act"]
    assert nemo2["model.config.offload_modules"] == ["expert_fc1", "moe_act"]


@pytest.mark.parametrize("target", ["torchtitan", "deepspeed", "maxtext"])
def test_other_frameworks_refuse_it_by_name(target: str) -> None:
    alone = {**QWEN, "job": {k: v for k, v in QWEN["job"].items() if k != "recompute_modules"}}
    assert "job.offload_modules" in refusal(result(alone, **EP8), target)


@pytest.mark.oracle
def test_megatron_core_takes_the_bridge_fields() -> None:
    """megatron-core 0.16.1's TransformerConfig (what Bridge's model provider is) accepts the
    fields and runs its own offload checks on them."""
    pytest.importorskip("torch")
    pytest.importorskip("megatron.core")
    from megatron.core.transformer.transformer_config import TransformerConfig

    bridge = bridge_overrides(context(result(QWEN, **EP8)))
    config = TransformerConfig(
        num_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        num_moe_experts=8,
        fine_grained_activation_offloading=bridge["model.fine_grained_activation_offloading"],
        offload_modules=bridge["model.offload_modules"],
    )
    assert config.offload_modules == ["expert_fc1", "moe_act"]
    with pytest.raises(ValueError, match="attn_proj"):
        TransformerConfig(
            num_layers=2,
            hidden_size=64,
            num_attention_heads=4,
            fine_grained_activation_offloading=True,
            offload_modules=["attn_proj"],
        )
