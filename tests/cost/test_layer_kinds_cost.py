"""Cost of the layer kinds (issue 13 item 3): windowed / chunked attention, Mamba blocks, vision
encoder over image tokens, MTP tail; each new preset evaluates with a simple plan."""

from __future__ import annotations

from dataclasses import replace

import pytest
from paraplan.cost import Job, Plan, Recompute
from paraplan.cost.block import block_costs, block_work, end_cost, end_work
from paraplan.cost.compute import attended_keys, layer_forward, layer_tokens, scan_times
from paraplan.cost.flops import model_flops_per_token
from paraplan.cost.recompute import stored_activation_bytes
from paraplan.cost.spans import Spans
from paraplan.cost.tp import tp_comm
from paraplan.cost.validity import check_layer_kinds
from paraplan.graph import LayerKind, build_graph, preset
from paraplan.hardware import build_cluster

import paraplan

CLUSTER = build_cluster("dgx-h100", nodes=1)
JOB = Job(seq_len=32768, global_batch=8)


def _plan(tp: int = 1, cp: int = 1, layers: int = 1) -> Plan:
    return Plan(
        dp=8 // (tp * cp),
        tp=tp,
        pp=1,
        cp=cp,
        sequence_parallel=tp > 1,
        recompute=(Recompute.NONE,),
        layers_per_stage=(layers,),
    )


@pytest.mark.parametrize("seq", [100, 4096, 32768, 40000])
def test_attended_keys_match_the_mask_sums(seq: int) -> None:
    """Mean keys per query = (1/s) sum_p keys(p), p = 1..s: causal p, window min(p, w), chunked
    the position inside its chunk; the continuous formulas are within 1/s of the sums."""
    g = build_graph(preset("llama4-scout"))
    full, chunked = g.layer("attn_3"), g.layer("attn_0")
    windowed = build_graph(preset("gpt-oss-120b")).layer("attn_0")
    w, c = windowed.window, chunked.chunk
    sums = {
        "full": sum(range(1, seq + 1)) / seq,
        "window": sum(min(p, w) for p in range(1, seq + 1)) / seq,
        "chunk": sum(((p - 1) % c) + 1 for p in range(1, seq + 1)) / seq,
    }
    for layer, key in ((full, "full"), (windowed, "window"), (chunked, "chunk")):
        assert attended_keys(layer, seq) == pytest.approx(sums[key], rel=0.01, abs=1.0)


def test_windowed_attention_is_cheaper_than_full_at_long_sequence() -> None:
    spec = preset("gpt-oss-120b")
    windowed, full = build_graph(spec), build_graph(replace(spec, sliding_window=0, full_attention_every=0))
    plan = _plan()
    accel, eff = CLUSTER.accelerator, CLUSTER.efficiency
    local = layer_forward(windowed.layer("attn_0"), plan, JOB, accel, eff).attention_s
    everywhere = layer_forward(full.layer("attn_0"), plan, JOB, accel, eff).attention_s
    # 128 keys per query instead of ~16K: 128x less attention work, at the lower efficiency of a
    # kernel iterating 128 keys (compute.attention_efficiency: 128 / (128 + 512))
    assert local < everywhere / 10
    assert model_flops_per_token(spec, 32768) < model_flops_per_token(full.spec, 32768)
    # below the window both are the same causal attention
    short = Job(seq_len=128, global_batch=8)
    assert layer_forward(windowed.layer("attn_0"), plan, short, accel, eff) == layer_forward(
        full.layer("attn_0"), plan, short, accel, eff
    )


def test_model_flops_count_each_kind() -> None:
    """6N + 3 x attention over the keys each layer attends (gemma3: 52 windowed layers at 1024,
    10 global ones at s/2)."""
    spec = preset("gemma3-27b")
    g = build_graph(spec)
    s = 32768
    gemm = sum(ly.gemm_flops_per_token for ly in g.layers())
    core = 4 * spec.q_dim
    attention = 52 * core * (1024 - 1024**2 / (2 * s)) + 10 * core * s / 2
    assert model_flops_per_token(spec, s) == pytest.approx(3 * (gemm + attention))


def test_mamba_block_has_one_tp_collective_and_no_attention() -> None:
    g = build_graph(preset("nemotron-h-56b"))
    plan = _plan(tp=8, layers=g.num_blocks)
    spans = Spans.of(plan, CLUSTER)
    mamba, attention, mlp = 0, 7, 1  # pattern "M-M-M-M*-...": block 7 is attention
    assert [g.block_layers(i)[0].kind for i in (mamba, mlp, attention)] == [
        LayerKind.MAMBA,
        LayerKind.MLP,
        LayerKind.ATTENTION,
    ]
    one = tp_comm(g.spec.hidden, 1.0, plan, JOB, CLUSTER, span=spans.tp)
    for i in (mamba, attention, mlp):
        work = block_work(g, i, plan, JOB, CLUSTER)
        assert sum(e.tp_collectives for e in work.exchanges) == 1.0
        cost = block_costs(work, g, plan, JOB, CLUSTER, spans)[Recompute.NONE]
        assert cost.comm_s == pytest.approx(one.forward_s + one.backward_s)
    assert block_work(g, mamba, plan, JOB, CLUSTER).attention is None


def test_mamba_scan_is_costed_and_stored_activations_follow_the_layer() -> None:
    g = build_graph(preset("nemotron-h-56b"))
    ly = g.layer("mamba_0")
    plan = _plan(tp=8)
    t = layer_forward(ly, plan, JOB, CLUSTER.accelerator, CLUSTER.efficiency)
    without_scan = layer_forward(
        replace(ly, scan_flops_per_token=0), plan, JOB, CLUSTER.accelerator, CLUSTER.efficiency
    )
    assert t.gemm_s == without_scan.gemm_s and t.attention_s == 0.0
    assert t.scan_s > 0.0 and without_scan.scan_s == 0.0
    # the SSD backward (16 kernels, the fp32 chunk states re-read) outweighs twice the forward
    assert t.scan_backward_s > 2.0 * t.scan_s
    assert t.forward_backward_s - without_scan.forward_backward_s == pytest.approx(
        t.scan_s + t.scan_backward_s
    )
    n = JOB.seq_len  # micro_batch 1, cp 1
    stored = stored_activation_bytes(ly, plan, JOB, Recompute.NONE)
    assert stored == pytest.approx(n * (ly.act_tp_elems / 8 + ly.act_sp_elems / 8) * 2)


def test_cp_is_refused_for_mamba_models_and_tp_must_split_groups() -> None:
    spec = preset("nemotron-h-56b")
    with pytest.raises(ValueError, match=r"plan\.cp=2: .*Mamba layers"):
        check_layer_kinds(_plan(tp=4, cp=2), spec)
    with pytest.raises(ValueError, match=r"plan\.tp=16 must divide mamba\.num_groups=8"):
        check_layer_kinds(replace(_plan(tp=8), tp=16), spec)
    check_layer_kinds(_plan(tp=8), spec)
    check_layer_kinds(_plan(tp=4, cp=2), preset("gpt-oss-120b"))  # windows: cp allowed


def test_vision_layers_run_on_the_jobs_image_tokens() -> None:
    g = build_graph(preset("qwen2.5-vl-72b"))
    block, merger = g.layer("vision_block_7"), g.layer("vision_merger")  # block 7: whole image
    plan = replace(_plan(), micro_batch=2)
    assert layer_tokens(block, plan, JOB) == 2 * 1024  # the preset's default: one 448 px image
    more = replace(JOB, image_tokens=4096)
    assert layer_tokens(block, plan, more) == 2 * 4096
    assert layer_tokens(merger, plan, more) == 2 * 4096 / 4  # 2 x 2 patches per decoder token
    t1 = layer_forward(block, plan, JOB, CLUSTER.accelerator, CLUSTER.efficiency)
    t4 = layer_forward(block, plan, more, CLUSTER.accelerator, CLUSTER.efficiency)
    assert t4.elementwise_s == pytest.approx(4 * t1.elementwise_s)
    # 4x the tokens: 4x the GEMM work, 16x the bidirectional attention work (4x keys per query)
    assert t4.gemm_s > 3 * t1.gemm_s and t4.attention_s > 8 * t1.attention_s


def test_vision_head_is_costed_on_the_first_stage() -> None:
    g = build_graph(preset("qwen2.5-vl-72b"))
    plan = _plan(tp=8, layers=g.num_blocks)
    spans = Spans.of(plan, CLUSTER)
    head = end_work(g, g.head_names, plan, JOB, CLUSTER)
    embedding_only = end_work(g, ("embedding",), plan, JOB, CLUSTER)
    assert head.forward_s > 10 * embedding_only.forward_s
    cost = end_cost(head, plan, JOB, CLUSTER, spans)
    assert cost.stored_bytes > 0 and cost.activation_bytes >= cost.stored_bytes
    vision_params = sum(g.layer(n).params for n in g.head_names if n != "embedding")
    assert cost.params == pytest.approx(
        (vision_params - g.layer("vision_patch_embed").params) / 8
        + g.layer("vision_patch_embed").params
        + g.spec.vocab * g.spec.hidden / 8
    )
    assert cost.comm_s > end_cost(embedding_only, plan, JOB, CLUSTER, spans).comm_s  # TP of 32 blocks


def test_mtp_tail_runs_its_block_and_a_second_lm_head() -> None:
    g = build_graph(preset("deepseek-v3"))
    plan = replace(_plan(tp=8, layers=g.num_blocks), ep=8, dp=1)
    tail = end_work(g, g.tail_names, plan, JOB, CLUSTER)
    main = end_work(g, ("final_norm", "lm_head"), plan, JOB, CLUSTER)
    assert tail.working_bytes == pytest.approx(2 * main.working_bytes)  # two heads' logits
    assert tail.expert_params == pytest.approx(g.layer("mtp_0_mlp").expert_params / 64)
    assert tail.top_k == 8 and tail.forward_s > main.forward_s


PRESET_NODES = {
    "llama4-scout": 2,
    "llama4-maverick": 8,
    "gpt-oss-120b": 2,
    "gemma3-27b": 2,
    "deepseek-v3": 32,
    "nemotron-h-56b": 2,
    "qwen2.5-vl-72b": 2,
    "jamba-1.5-mini": 2,
}


@pytest.mark.parametrize("name", sorted(PRESET_NODES))
@pytest.mark.parametrize("pp", [1, 2])
def test_each_new_preset_evaluates(name: str, pp: int) -> None:
    nodes = PRESET_NODES[name]
    scenario = {
        "model": {"preset": name},
        "cluster": {"preset": "dgx-h100", "nodes": nodes},
        "job": {"seq_len": 8192, "global_batch": 64, "precision": "bf16"},
        "plan": {"dp": nodes // pp, "tp": 8, "pp": pp, "micro_batch": 1, "zero": 1, "recompute": "full"},
    }
    predicted = paraplan.evaluate(scenario).predicted
    assert predicted.step_time_s > 0 and 0 < predicted.mfu < 1


def test_a_yaml_hybrid_model_and_image_tokens_reach_the_cost_model() -> None:
    """Explicit model fields (layer_pattern, mamba) and job.image_tokens through the scenario."""
    hybrid = {
        "layers": 8,
        "hidden": 1024,
        "ffn_hidden": 4096,
        "heads": 8,
        "vocab": 32000,
        "layer_pattern": "M-M*M-M-",
        "mamba": {"version": 2, "num_heads": 32, "head_dim": 64, "num_groups": 8, "state_dim": 128},
    }
    base = {
        "cluster": {"preset": "dgx-h100", "gpus": 8},
        "job": {"seq_len": 4096, "global_batch": 32, "precision": "bf16"},
        "plan": {"dp": 8, "tp": 1, "pp": 1, "micro_batch": 1, "zero": 1, "recompute": "none"},
    }
    assert paraplan.evaluate({"model": hybrid, **base}).predicted.step_time_s > 0
    with pytest.raises(paraplan.ConfigError, match="layer_pattern"):
        paraplan.evaluate({"model": {**hybrid, "layer_pattern": "M-M*"}, **base})
    vl = {**base, "model": {"preset": "qwen2.5-vl-72b"}, "cluster": {"preset": "dgx-h100", "nodes": 2}}
    vl["plan"] = {**base["plan"], "dp": 1, "tp": 8, "pp": 2}
    one = paraplan.evaluate(vl).predicted.step_time_s
    four = paraplan.evaluate({**vl, "job": {**vl["job"], "image_tokens": 4096}}).predicted.step_time_s
    assert four > one  # the vision encoder runs on 4x the default patches


def test_ssd_state_traffic_is_costed_at_hbm_bandwidth() -> None:
    """The SSD's chunk states move through HBM (graph.mamba_layers.ssd_traffic): a part with half the
    bandwidth spends the traffic's time twice; the FLOP part of the time does not change."""
    ly = build_graph(preset("nemotron-h-56b")).layer("mamba_0")
    accel, eff = CLUSTER.accelerator, CLUSTER.efficiency
    slow = replace(accel, hbm_bytes_per_s=accel.hbm_bytes_per_s / 2)
    tokens, tp = 8192.0, 8
    fast_fwd, _ = scan_times(ly, tokens, tp, accel, eff)
    slow_fwd, _ = scan_times(ly, tokens, tp, slow, eff)
    memory_s = tokens * ly.scan_bytes_per_token / tp / (accel.hbm_bytes_per_s * eff.hbm)
    assert slow_fwd - fast_fwd == pytest.approx(memory_s)
