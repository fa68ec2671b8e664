"""Memory on a TPU (XLA): no CUDA/NCCL reserve, no allocator fragmentation, logits and the
re-materialised block live at different times, and SELECTIVE is MaxText's ``minimal`` policy
(cost/memory.py and cost/recompute.py module docstrings)."""

from __future__ import annotations

import pytest
from paraplan.cost import Job, Plan, Recompute, stored_activation_bytes
from paraplan.cost.memory import stage_memory
from paraplan.cost.memory_reserve import runtime_reserve_bytes
from paraplan.cost.recompute import block_input_bytes
from paraplan.cost.stage_build import stage_terms
from paraplan.graph import Activation, ModelSpec, build_graph

from paraplan.instance import build_instance, fixed_plan
from paraplan.scenario.schema import load_scenario

# MaxText's Dec-2023 default decoder scaled (ReLU MLP, head_dim 256: q_dim 2048 != hidden 2560)
MODEL = {
    "name": "maxtext-small",
    "layers": 4,
    "hidden": 2560,
    "ffn_hidden": 8192,
    "heads": 8,
    "kv_heads": 8,
    "head_dim": 256,
    "vocab": 32768,
    "activation": "relu",
    "tied_embeddings": False,
    "dropout": False,
}


def _scenario(preset: str, recompute: str, tp: int = 1, mb: int = 4) -> dict:
    return {
        "model": MODEL,
        "cluster": {"preset": preset, "gpus": 8},
        "job": {"seq_len": 2048, "global_batch": 8 // tp * mb},
        "plan": {
            "dp": 8 // tp,
            "tp": tp,
            "pp": 1,
            "micro_batch": mb,
            "zero": 3,
            "sequence_parallel": tp > 1,
            "recompute": recompute,
        },
    }


def _terms(sc: dict):
    inst = build_instance(load_scenario(sc))
    plan = fixed_plan(inst)
    return inst, plan, stage_terms(inst.graph, plan, inst.job, inst.cluster)


def test_tpu_reserve_is_none_and_gpu_reserve_is_unchanged() -> None:
    plan = Plan(dp=4, tp=8, pp=2, layers_per_stage=(1, 1))
    assert runtime_reserve_bytes(plan, is_tpu=True) == 0.0
    assert runtime_reserve_bytes(plan) > 1e9  # CUDA context + 4 NCCL communicators
    tpu, _, _ = _terms(_scenario("v5p-16", "full"))
    gpu, _, _ = _terms(_scenario("dgx-h100", "full"))
    assert tpu.cluster.accelerator.is_tpu and not gpu.cluster.accelerator.is_tpu


@pytest.mark.parametrize("mb", [1, 8])
def test_tpu_full_recompute_holds_the_larger_of_logits_and_the_working_block(mb: int) -> None:
    """Activations = layers x block input + max(re-materialised block, logits), not their sum."""
    inst, plan, terms = _terms(_scenario("v5p-16", "full", mb=mb))
    m = stage_memory(terms, 0, 4, Recompute.FULL)
    block = terms.block[Recompute.FULL]
    logits = terms.last.activation_bytes
    stored = 4 * block_input_bytes(2560, plan, inst.job)
    assert m.activations_bytes == pytest.approx(stored + max(block.working_bytes, logits))
    assert m.activations_bytes < stored + block.working_bytes + logits
    assert m.reserve_bytes == 0.0


def test_tpu_selective_keeps_maxtexts_minimal_set() -> None:
    """Per token per layer: the carry and the MLP input (h/t each), q, k, v ((q+2kv)/t) and the
    MLP up-projection (f/t), in bf16 - fewer bytes than Megatron's selective set."""
    spec = ModelSpec(
        name="m",
        num_layers=1,
        hidden=2560,
        ffn_hidden=8192,
        num_heads=8,
        num_kv_heads=8,
        head_dim=256,
        vocab=32768,
        activation=Activation.RELU,
        dropout=False,
    )
    job = Job(seq_len=2048, global_batch=8)
    t, mb = 4, 8
    plan = Plan(dp=1, tp=t, pp=1, micro_batch=mb, sequence_parallel=True, layers_per_stage=(1,))
    layers = build_graph(spec).block_layers(0)
    tpu = sum(stored_activation_bytes(ly, plan, job, Recompute.SELECTIVE, is_tpu=True) for ly in layers)
    gpu = sum(stored_activation_bytes(ly, plan, job, Recompute.SELECTIVE) for ly in layers)
    tokens = mb * 2048
    assert tpu == pytest.approx(tokens * (2 * 2560 + 3 * 2048 + 8192) / t * 2)
    assert tpu < 0.6 * gpu
    assert stored_activation_bytes(
        layers[0], plan, job, Recompute.NONE, is_tpu=True
    ) == stored_activation_bytes(layers[0], plan, job, Recompute.NONE)


def test_gpu_memory_keeps_the_cuda_accounting() -> None:
    """The same plan on H100s: reserve > 0; the peak holds the larger of the loss's transient (the
    logits at 6 B and the head's two saved inputs) and the working block (cost/memory.py)."""
    inst, plan, terms = _terms(_scenario("dgx-h100", "full"))
    m = stage_memory(terms, 0, 4, Recompute.FULL)
    block = terms.block[Recompute.FULL]
    stored = 4 * block_input_bytes(2560, plan, inst.job)
    loss = terms.last.activation_bytes + 2 * block_input_bytes(2560, plan, inst.job)
    assert m.activations_bytes == pytest.approx(stored + max(block.working_bytes, loss))
    assert m.reserve_bytes > runtime_reserve_bytes(plan) > 0
