"""Megatron's --recompute-modules (job.recompute_modules, cost/recompute_modules.py): what each
module stores and re-runs, the EP overlap's extra in-flight chunk, the row mapping."""

from __future__ import annotations

from dataclasses import replace

import pytest
from paraplan.cost import Job, Plan, Precision, Recompute, stage_terms
from paraplan.cost.block import block_work, layer_time
from paraplan.cost.compute import ACTIVATION_BYTES, gemm_s, gemm_shape, tokens_per_device
from paraplan.cost.ep import expert_stored_bytes
from paraplan.cost.plan import RecomputeModule
from paraplan.cost.pp import in_flight_micro_batches
from paraplan.cost.recompute import stored_activation_bytes
from paraplan.cost.recompute_modules import modules_recompute_s, modules_saved_bytes
from paraplan.graph import LayerKind, build_graph, preset
from paraplan.hardware import build_cluster

from benchmarks.calibration_set import recompute_modules

QWEN = build_graph(preset("qwen3-30b-a3b"))
DSV3 = build_graph(preset("deepseek-v3"))
CLUSTER = build_cluster("dgx-h100", nodes=2)
JOB = Job(seq_len=4096, global_batch=64, precision=Precision.BF16, expert_imbalance=1.0)
M = RecomputeModule


def _plan(graph, ep: int = 8, pp: int = 1, vp: int = 1, **kw) -> Plan:
    layers = graph.spec.num_layers
    return Plan(
        dp=16 // pp,
        tp=1,
        pp=pp,
        vp=vp,
        ep=ep,
        sequence_parallel=False,
        recompute=(Recompute.SELECTIVE,) * pp,
        layers_per_stage=(layers // pp,) * pp,
        **kw,
    )


def _layer(graph, kind: LayerKind):
    return next(ly for ly in graph.block_layers(graph.kind_blocks[-1]) if ly.kind is kind)


def test_no_modules_keeps_the_default_selective_policy() -> None:
    plan, moe = _plan(QWEN), _layer(QWEN, LayerKind.MOE)
    with_none = replace(JOB, recompute_modules=frozenset())
    assert stored_activation_bytes(moe, plan, with_none, Recompute.SELECTIVE) == stored_activation_bytes(
        moe, plan, JOB, Recompute.SELECTIVE
    )


def test_moe_module_keeps_only_the_layer_inputs() -> None:
    plan, moe = _plan(QWEN), _layer(QWEN, LayerKind.MOE)
    job = replace(JOB, recompute_modules=frozenset({M.MOE}))
    n, h = tokens_per_device(plan, job), QWEN.spec.hidden
    # the norm input and the normed input stay (the checkpoint's input and the residual)
    assert stored_activation_bytes(moe, plan, job, Recompute.SELECTIVE) == pytest.approx(
        n * 2 * h * ACTIVATION_BYTES
    )
    assert modules_saved_bytes(moe, plan, job, job.recompute_modules) > expert_stored_bytes(
        moe.experts, plan, job
    )
    t = layer_time(moe, plan, job, CLUSTER.accelerator, CLUSTER.efficiency)
    rerun = modules_recompute_s(
        moe, t, plan, job, CLUSTER.accelerator, CLUSTER.efficiency, job.recompute_modules
    )
    assert rerun == pytest.approx(t.total_s)


def test_moe_module_runs_the_forward_all_to_all_again() -> None:
    plan = _plan(QWEN)
    light = replace(JOB, recompute_modules=frozenset({M.MOE_ACT}))
    heavy = replace(JOB, recompute_modules=frozenset({M.MOE}))
    lt = stage_terms(QWEN, plan, light, CLUSTER).block[Recompute.SELECTIVE]
    ht = stage_terms(QWEN, plan, heavy, CLUSTER).block[Recompute.SELECTIVE]
    assert ht.comm_s > lt.comm_s  # the dispatch and combine of the recomputed forward
    assert ht.backward_s > lt.backward_s


def test_layernorm_drops_one_normed_input_per_sublayer() -> None:
    plan = _plan(QWEN)
    job = replace(JOB, recompute_modules=frozenset({M.LAYERNORM}))
    n, h = tokens_per_device(plan, job), QWEN.spec.hidden
    for kind in (LayerKind.ATTENTION, LayerKind.MOE):
        ly = _layer(QWEN, kind)
        assert modules_saved_bytes(ly, plan, job, job.recompute_modules) == pytest.approx(
            n * h * ACTIVATION_BYTES
        )


def test_moe_act_drops_the_experts_fc2_input() -> None:
    plan, moe = _plan(QWEN), _layer(QWEN, LayerKind.MOE)
    job = replace(JOB, recompute_modules=frozenset({M.MOE_ACT}))
    copies = tokens_per_device(plan, job) * QWEN.spec.top_k
    f = QWEN.spec.moe_ffn_hidden
    assert modules_saved_bytes(moe, plan, job, job.recompute_modules) == pytest.approx(
        copies * f * ACTIVATION_BYTES
    )


def test_mla_up_proj_drops_q_k_v_and_reruns_the_up_projections() -> None:
    plan = _plan(DSV3, ep=16)
    attn = _layer(DSV3, LayerKind.ATTENTION)
    job = replace(JOB, recompute_modules=frozenset({M.MLA_UP_PROJ}))
    s = DSV3.spec
    qk = s.num_heads * (s.qk_nope_head_dim + s.qk_rope_head_dim)
    n = tokens_per_device(plan, job)
    assert modules_saved_bytes(attn, plan, job, job.recompute_modules) == pytest.approx(
        n * (2 * qk + s.v_dim) * ACTIVATION_BYTES
    )
    t = layer_time(attn, plan, job, CLUSTER.accelerator, CLUSTER.efficiency)
    rerun = modules_recompute_s(
        attn, t, plan, job, CLUSTER.accelerator, CLUSTER.efficiency, job.recompute_modules
    )
    assert 0 < rerun < t.gemm_s + t.elementwise_s
    # re-runs (issue 22): the q_up and kv_up GEMMs, their latent RMSNorms (2 (q_lora + kv_lora)),
    # the RoPE (2 (heads rope + rope)) and the query / key / value materialisation
    gemms = sum(
        gemm_s(gemm_shape(g, n, plan.tp), job.precision, CLUSTER.accelerator, CLUSTER.efficiency)
        for g in attn.gemms
        if g.name in ("q_up", "kv_up")
    )
    elems = 2 * (s.q_lora_rank + s.kv_lora_rank) + 2 * (s.num_heads * s.qk_rope_head_dim + s.qk_rope_head_dim)
    hbm = CLUSTER.accelerator.hbm_bytes_per_s * CLUSTER.efficiency.hbm
    assert rerun == pytest.approx(gemms + n * (elems + attn.qkv_copy_elems) * ACTIVATION_BYTES / hbm)
    # a GQA attention layer has no up-projection: the module does nothing there
    gqa = _layer(QWEN, LayerKind.ATTENTION)
    assert modules_saved_bytes(gqa, _plan(QWEN), job, job.recompute_modules) == 0.0


def test_mla_up_proj_without_a_q_lora_takes_q_from_the_q_projection() -> None:
    """MLA with q_lora_rank 0 (Moonlight, DeepSeek-V2-Lite) has no q_up GEMM: Q comes from the
    plain q projection, which Megatron's qkv_up_proj_and_rope_apply runs instead."""
    graph = build_graph(replace(preset("deepseek-v3"), q_lora_rank=0))
    attn = _layer(graph, LayerKind.ATTENTION)
    assert not any(g.name == "q_up" for g in attn.gemms)
    plan = _plan(graph, ep=16)
    job = replace(JOB, recompute_modules=frozenset({M.MLA_UP_PROJ}))
    s = graph.spec
    qk = s.num_heads * (s.qk_nope_head_dim + s.qk_rope_head_dim)
    n = tokens_per_device(plan, job)
    assert modules_saved_bytes(attn, plan, job, job.recompute_modules) == pytest.approx(
        n * (2 * qk + s.v_dim) * ACTIVATION_BYTES
    )
    # the q projection runs inside the checkpoint in q_up's place, so it is re-run too
    t = layer_time(attn, plan, job, CLUSTER.accelerator, CLUSTER.efficiency)
    q = next(g for g in attn.gemms if g.name == "q")
    q_s = gemm_s(gemm_shape(q, n, plan.tp), job.precision, CLUSTER.accelerator, CLUSTER.efficiency)
    assert (
        modules_recompute_s(
            attn, t, plan, job, CLUSTER.accelerator, CLUSTER.efficiency, job.recompute_modules
        )
        > q_s
    )


def test_mla_materialises_query_key_and_value_whole() -> None:
    """Megatron-Core's MLA writes query, key and value contiguous from the up-projections'
    outputs (issue 22): 2 heads qk + heads (nope + v) + rope + heads qk + heads v elements per
    token, the rotary's 2 (heads rope + rope) of it counted in mem_bound_elems."""
    s = DSV3.spec
    h, qk, rope = s.num_heads, s.qk_nope_head_dim + s.qk_rope_head_dim, s.qk_rope_head_dim
    whole = 2 * h * qk + h * (s.qk_nope_head_dim + s.v_head_dim) + rope + h * qk + h * s.v_head_dim
    attn = _layer(DSV3, LayerKind.ATTENTION)
    assert attn.qkv_copy_elems == whole - 2 * (h * rope + rope)
    assert _layer(QWEN, LayerKind.ATTENTION).qkv_copy_elems == 0.0  # GQA: none


def test_selective_modules_enter_the_block_work() -> None:
    plan = _plan(QWEN)
    job = replace(JOB, recompute_modules=frozenset({M.LAYERNORM, M.MOE_ACT}))
    w = block_work(QWEN, QWEN.kind_blocks[-1], plan, job, CLUSTER)
    default = block_work(QWEN, QWEN.kind_blocks[-1], plan, JOB, CLUSTER)
    # no core-attention recompute among these modules: less re-run than the default policy
    assert w.recompute_s[Recompute.SELECTIVE] < default.recompute_s[Recompute.SELECTIVE]
    assert w.stored_bytes[Recompute.SELECTIVE] < w.stored_bytes[Recompute.NONE]


def test_ep_overlap_holds_one_more_chunk_under_pipelining() -> None:
    base = _plan(QWEN, pp=2, vp=4)
    over = replace(base, moe_overlap=True)
    assert in_flight_micro_batches(0, over, 32) == pytest.approx(in_flight_micro_batches(0, base, 32) + 1 / 4)
    # without pipelining the merged forward/backward frees as it allocates: nothing added
    flat = _plan(QWEN)
    assert in_flight_micro_batches(0, replace(flat, moe_overlap=True), 32) == in_flight_micro_batches(
        0, flat, 32
    )


@pytest.mark.parametrize(
    ("column", "notes", "modules"),
    [
        ("selective (layernorm, moe)", "", ["layernorm", "moe"]),
        ("selective (norm, act, shared_expert)", "", ["layernorm", "moe_act", "shared_experts"]),
        ("selective (dense-layer mlp + MLA up_proj)", "", ["mlp", "mla_up_proj"]),
        ("", "x; recompute selective moe_act + layernorm; y", ["moe_act", "layernorm"]),
        ("selective (op)", "", []),
        ("selective (attention core)", "", []),
        ("full", "", []),
    ],
)
def test_row_mapping_reads_the_modules(column: str, notes: str, modules: list[str]) -> None:
    assert recompute_modules({"recompute": column, "notes": notes}) == modules
