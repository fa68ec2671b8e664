"""LatentMoE (Nemotron 3 Super; ModelSpec.moe_latent_dim): the routed path projects h -> latent
before the dispatch and back after the combine, the experts run at the latent width. Checked
against Megatron's own accounting (megatron-core 0.19.2 moe_layer.py; Megatron-Bridge 0.6.2
training/utils/flop_utils.py and theoretical_memory_utils.py) and through the cost model."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from paraplan.cost import Job, Plan, Recompute
from paraplan.cost.block import block_work, layer_exchange
from paraplan.cost.ep import ep_layer_comm
from paraplan.cost.flops import model_flops_per_token
from paraplan.graph import Activation, Mamba, ModelSpec, build_graph, from_fields, from_hf_config, to_fields
from paraplan.hardware import build_cluster

HF = Path(__file__).resolve().parents[2] / "graph" / "data" / "hf"
H, L, F, E, K, FS = 1024, 256, 512, 16, 4, 1024
SPEC = ModelSpec(
    name="latent",
    num_layers=4,
    hidden=H,
    ffn_hidden=0,
    num_heads=8,
    num_kv_heads=2,
    vocab=4096,
    num_experts=E,
    top_k=K,
    num_shared_experts=1,
    moe_ffn_hidden=F,
    shared_ffn_hidden=FS,
    moe_latent_dim=L,
    activation=Activation.RELU2,
    layer_pattern="M*EE",
    mamba=Mamba(version=2, num_heads=16, head_dim=64),
)
PLAIN = replace(SPEC, moe_latent_dim=0)


def test_latent_moe_params_are_megatrons() -> None:
    """theoretical_memory_utils: experts 2 x latent x f x E (non-gated: fc1 + fc2) + latent
    projections 2 x h x latent per MoE layer; router h x E and shared expert 2 h f_s unchanged."""
    moe = build_graph(SPEC).layer("mlp_2")
    assert moe.expert_params == E * 2 * L * F
    assert moe.params == E * 2 * L * F + 2 * H * L + H * E + 2 * H * FS + H
    assert moe.replicated_params == H * E + 2 * H * L  # router and both projections: "duplicated"


def test_latent_moe_flops_are_megatron_bridges() -> None:
    """flop_utils: routed 4 b s latent f top_k + projections 4 b s h latent forward FLOPs, i.e.
    per token 3 x that for the step (model_flops_per_token)."""
    routed_fwd = 4 * L * F * K + 4 * H * L
    plain_routed_fwd = 4 * H * F * K
    diff = model_flops_per_token(SPEC, 2048) - model_flops_per_token(PLAIN, 2048)
    assert diff == pytest.approx(2 * 3 * (routed_fwd - plain_routed_fwd))  # two MoE layers


def test_latent_moe_dispatches_at_the_latent_width() -> None:
    """The all-to-all moves top_k copies of latent-wide tokens (the dispatcher's hidden_dim is
    moe_latent_size, megatron-core 0.19.2 token_dispatcher.py): L / h of the plain layer's bytes."""
    cluster = build_cluster("dgx-h100", nodes=2)
    plan = Plan(dp=16, tp=1, pp=1, ep=16, layers_per_stage=(4,), recompute=(Recompute.NONE,))
    job = Job(seq_len=4096, global_batch=64)
    g, gp = build_graph(SPEC), build_graph(PLAIN)
    work, plain = (block_work(x, 2, plan, job, cluster) for x in (g, gp))
    ex = layer_exchange(g.layer("mlp_2"), g, work.times[0], plan, job)
    assert ex.dispatch_hidden == L
    latent_s = ep_layer_comm(L, K, plan, job, cluster).forward_s
    plain_s = ep_layer_comm(H, K, plan, job, cluster).forward_s
    assert latent_s < plain_s
    assert work.stored_bytes[Recompute.NONE] < plain.stored_bytes[Recompute.NONE]


def test_latent_moe_round_trips_and_imports_from_a_nemotron_h_config() -> None:
    assert from_fields("latent", to_fields(SPEC)) == SPEC
    cfg = json.loads((HF / "nemotron3-nano-30b-a3b.json").read_text())
    spec = from_hf_config({**cfg, "moe_latent_size": 1024})
    assert spec.moe_latent_dim == 1024
    moe = build_graph(spec).layer("mlp_1")
    assert moe.experts is not None and moe.experts.gemms[0].in_dim == 1024


def test_latent_dim_needs_experts() -> None:
    with pytest.raises(ValueError, match="moe_latent_dim need model.experts"):
        ModelSpec(
            name="x",
            num_layers=2,
            hidden=64,
            ffn_hidden=128,
            num_heads=2,
            num_kv_heads=2,
            vocab=100,
            moe_latent_dim=16,
        )
