"""The head and tail of a pipeline (the first stage's embedding and vision encoder, the last
stage's LM head and MTP modules): their activations per in-flight micro-batch like the blocks',
the MTP module's routed experts in the last stage's state, and the tied embedding's copy on the
last stage without the vision encoder."""

from __future__ import annotations

import pytest
from paraplan.cost import Job, Plan, Recompute
from paraplan.cost.block import block_params_per_device, end_work
from paraplan.cost.memory import stage_memory_model
from paraplan.cost.pp import in_flight_micro_batches
from paraplan.cost.stage_build import stage_terms
from paraplan.graph import ModelSpec, Vision, build_graph
from paraplan.hardware import build_cluster

CLUSTER = build_cluster("dgx-h100", nodes=1)
JOB = Job(seq_len=1024, global_batch=64)
BASE = dict(num_layers=8, hidden=256, ffn_hidden=512, num_heads=4, num_kv_heads=4, vocab=1000)
MOE = dict(num_experts=8, top_k=2, moe_ffn_hidden=128)
VISION = Vision(num_layers=2, hidden=128, ffn_hidden=256, num_heads=2, merge=2, image_tokens=256)


def _plan(pp: int, vp: int = 1, tp: int = 1, ep: int = 1) -> Plan:
    return Plan(
        dp=8 // (tp * pp),
        tp=tp,
        pp=pp,
        ep=ep,
        vp=vp,
        sequence_parallel=tp > 1,
        recompute=(Recompute.NONE,) * pp,
        layers_per_stage=(8 // pp,) * pp,
    )


def _fixed_activations(terms, stage: int) -> tuple[float, float]:
    """(modelled fixed activation bytes of ``stage``, the part its ends keep per micro-batch)."""
    mem = stage_memory_model(terms, stage, Recompute.NONE)
    return mem.fixed.activations_bytes, in_flight_micro_batches(stage, terms.plan, terms.num_micro_batches)


def test_vision_encoder_activations_are_held_per_in_flight_micro_batch() -> None:
    """Under 1F1B the first of pp stages holds pp micro-batches' activations; the ViT's stored
    activations (EndCost.stored_bytes) are kept for each of them, like its blocks'.
    Formula: fixed = working block + (first.activation - first.stored) + first.stored x held."""
    spec = ModelSpec(name="vl", **BASE, vision=VISION)
    terms = stage_terms(build_graph(spec), _plan(pp=4), JOB, CLUSTER)
    first = terms.first
    assert first.stored_bytes > 0
    fixed, held = _fixed_activations(terms, 0)
    assert held == 4
    working = max(b.working_bytes for b in terms.kind_blocks_at(0, Recompute.NONE))
    assert fixed == pytest.approx(
        working + first.activation_bytes - first.stored_bytes + held * first.stored_bytes
    )


def test_mtp_activations_scale_with_the_last_stages_in_flight_micro_batches() -> None:
    """With interleaving the last rank holds 1 + (p-1)/(p v) stage-units of micro-batches; the MTP
    block's stored activations follow the same count as the blocks'."""
    spec = ModelSpec(name="mtp", **BASE, **MOE, mtp_layers=1)
    terms = stage_terms(build_graph(spec), _plan(pp=2, vp=2), JOB, CLUSTER)
    last = terms.last
    assert last.stored_bytes > 0
    fixed, held = _fixed_activations(terms, 1)
    assert held == pytest.approx(1 + 1 / 4)
    # the transient part (a block's backward or the loss's peak, the larger: cost/memory.py) is
    # the same at vp 1, where the last rank holds one stage-unit: only the held count differs
    one = stage_terms(build_graph(spec), _plan(pp=2, vp=1), JOB, CLUSTER)
    fixed_one, held_one = _fixed_activations(one, 1)
    assert held_one == pytest.approx(1.0)
    assert fixed - fixed_one == pytest.approx((held - held_one) * last.stored_bytes)


def test_mtp_routed_experts_are_in_the_last_stages_state() -> None:
    """The MTP module's MoE layer holds num_experts experts / ep on the last stage: they count in
    its parameters, optimizer step, gradient sync and memory (regression: they were dropped)."""
    spec = ModelSpec(name="mtp", **BASE, **MOE, mtp_layers=1)
    g = build_graph(spec)
    plan = _plan(pp=2, ep=2)
    terms = stage_terms(g, plan, JOB, CLUSTER)
    mtp_experts = g.layer("mtp_0_mlp").expert_params / plan.ep
    assert terms.last.expert_params == pytest.approx(mtp_experts)
    blocks = terms.block_expert_params * 4
    assert terms.held_params(1, 4)[1] == pytest.approx(blocks + mtp_experts)
    assert terms.held_params(0, 4)[1] == pytest.approx(blocks)
    without = stage_terms(build_graph(ModelSpec(name="moe", **BASE, **MOE)), plan, JOB, CLUSTER)
    assert terms.optimizer_s(1, 4) > without.optimizer_s(1, 4)
    mem = stage_memory_model(terms, 1, Recompute.NONE).fixed
    mem_without = stage_memory_model(without, 1, Recompute.NONE).fixed
    # weights alone: the MTP module's dense part plus its experts, 2 bytes each (bf16)
    dense = terms.last.params - without.last.params
    assert mem.weights_bytes - mem_without.weights_bytes == pytest.approx(2 * (dense + mtp_experts))


def test_tied_embedding_copy_on_the_last_stage_leaves_the_vision_encoder_out() -> None:
    """With tied embeddings and pp > 1 the last stage keeps its own copy of the embedding for the
    LM head: vocab x hidden / tp, not the first stage's whole head (which holds the ViT)."""
    spec = ModelSpec(name="vl-tied", **BASE, vision=VISION, tied_embeddings=True)
    g = build_graph(spec)
    plan = _plan(pp=2, tp=2)
    terms = stage_terms(g, plan, JOB, CLUSTER)
    tail, _ = block_params_per_device([g.layer(n) for n in g.tail_names], plan)
    embedding, _ = block_params_per_device([g.layer("embedding")], plan)
    assert embedding == spec.vocab * spec.hidden / plan.tp
    assert terms.last.params == pytest.approx(tail + embedding)
    assert terms.first.params > embedding  # the ViT is there, on the first stage only
    assert end_work(g, g.tail_names, plan, JOB, CLUSTER).params == pytest.approx(tail)
