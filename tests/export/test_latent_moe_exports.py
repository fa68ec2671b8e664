"""LatentMoE (ModelSpec.moe_latent_dim) in the exports: Megatron-LM's --moe-latent-size and
Megatron-Bridge's moe_latent_size (megatron-core 0.19.2 TransformerConfig.moe_latent_size)
express it; exporters whose model code has no latent projection refuse the model."""

from __future__ import annotations

from paraplan.graph import preset, to_fields

from paraplan.export import context
from paraplan.export.megatron import megatron_args
from paraplan.export.nemo_model import model_fields
from tests.export.test_exporters import flags, refusal, result

LATENT_QWEN = {
    "model": {**to_fields(preset("qwen3-30b-a3b")), "name": "qwen3-latent", "moe_latent_dim": 1024},
    "cluster": {"preset": "dgx-h100", "nodes": 2},
    "job": {"seq_len": 4096, "global_batch": 256, "precision": "bf16"},
}
EP8 = {"dp": 16, "tp": 1, "pp": 1, "ep": 8, "micro_batch": 1, "zero": 1, "recompute": "full"}


def test_megatron_and_bridge_set_the_latent_size() -> None:
    ctx = context(result(LATENT_QWEN, **EP8))
    assert flags(megatron_args(ctx))["--moe-latent-size"] == "1024"
    assert dict(model_fields(ctx))["moe_latent_size"] == 1024


def test_torchtitan_refuses_a_latent_moe_model() -> None:
    assert "LatentMoE (experts at latent width 1024)" in refusal(result(LATENT_QWEN, **EP8), "torchtitan")
