"""Megatron's fine-grained activation offloading (job.offload_modules, cost/offload.py; issue 22
"none predicted out of memory", row 2058): what leaves the GPU, what stays, the copies' time,
the scenario's errors, the frameworks that refuse it and the row mapping."""

from __future__ import annotations

from dataclasses import replace

import pytest
from paraplan.cost import Job, MoEProbs, Plan, Precision, Recompute, evaluate, stage_terms
from paraplan.cost.compute import ACTIVATION_BYTES, gemm_input_bytes, tokens_per_device
from paraplan.cost.offload import offload_exposed_s, offload_link_bytes_per_s, offloaded_bytes
from paraplan.cost.plan import OffloadModule, RecomputeModule
from paraplan.cost.pp import in_flight_micro_batches
from paraplan.graph import LayerKind, build_graph, preset
from paraplan.hardware import build_cluster

import paraplan.api
from benchmarks.calibration_set import offload_modules
from paraplan.errors import ConfigError, InfeasibleError

QWEN = build_graph(preset("qwen3-30b-a3b"))
LLAMA = build_graph(preset("llama3-8b"))
H100 = build_cluster("dgx-h100", nodes=2)
GB200 = build_cluster("gb200-nvl72", nodes=4)
JOB = Job(seq_len=4096, global_batch=64, precision=Precision.BF16, expert_imbalance=1.0)
OM = OffloadModule


def _plan(graph, *, ep: int = 8, pp: int = 2, recompute: Recompute = Recompute.SELECTIVE) -> Plan:
    layers = graph.spec.num_layers
    return Plan(
        dp=16 // pp,
        tp=1,
        pp=pp,
        ep=ep,
        sequence_parallel=False,
        recompute=(recompute,) * pp,
        layers_per_stage=(layers // pp,) * pp,
    )


def _layer(graph, kind: LayerKind):
    return next(ly for ly in graph.block_layers(graph.kind_blocks[-1]) if ly.kind is kind)


def test_expert_modules_move_the_routed_copies_fc1_input_and_activation_input() -> None:
    plan, moe = _plan(QWEN), _layer(QWEN, LayerKind.MOE)
    job = replace(JOB, precision=Precision.FP8, offload_modules=frozenset({OM.EXPERT_FC1, OM.MOE_ACT}))
    copies = tokens_per_device(plan, job) * QWEN.spec.top_k  # etp = tp = 1
    h, f = QWEN.spec.hidden, QWEN.spec.moe_ffn_hidden
    # fc1 input (d = h) at the FP8 GEMM-input bytes + the gated fc1 output (2 f) in bf16
    expected = copies * (h * gemm_input_bytes(Precision.FP8) + 2 * f * ACTIVATION_BYTES)
    assert offloaded_bytes(moe, plan, job, Recompute.SELECTIVE) == pytest.approx(expected)


def test_attention_modules_move_the_norm_q_k_v_and_projection_inputs() -> None:
    plan, attn = _plan(LLAMA, ep=1), _layer(LLAMA, LayerKind.ATTENTION)
    s = LLAMA.spec
    n, h, q, kv = tokens_per_device(plan, JOB), s.hidden, s.q_dim, s.kv_dim
    every = replace(JOB, offload_modules=frozenset({OM.ATTN_NORM, OM.QKV_LINEAR, OM.CORE_ATTN, OM.ATTN_PROJ}))
    # norm input h + QKV input h + Q, K, V (q + 2 kv) + projection input q, all bf16
    assert offloaded_bytes(attn, plan, every, Recompute.SELECTIVE) == pytest.approx(
        n * (2 * h + q + 2 * kv + q) * ACTIVATION_BYTES
    )
    # layernorm recompute frees the normed input: qkv_linear has nothing left to move
    freed = replace(every, recompute_modules=frozenset({RecomputeModule.LAYERNORM}))
    assert offloaded_bytes(attn, plan, freed, Recompute.SELECTIVE) == pytest.approx(
        n * (h + q + 2 * kv + q) * ACTIVATION_BYTES
    )


def test_full_recompute_and_other_layers_move_nothing() -> None:
    plan, moe = _plan(QWEN), _layer(QWEN, LayerKind.MOE)
    job = replace(JOB, offload_modules=frozenset({OM.EXPERT_FC1, OM.MLP_NORM}))
    assert offloaded_bytes(moe, plan, job, Recompute.FULL) == 0.0
    assert offloaded_bytes(_layer(QWEN, LayerKind.ATTENTION), plan, job, Recompute.SELECTIVE) == 0.0
    assert offloaded_bytes(moe, plan, JOB, Recompute.SELECTIVE) == 0.0  # none asked


def test_a_stage_keeps_one_layer_of_the_offloaded_inputs() -> None:
    """Per layer and in-flight micro-batch the stored bytes fall by the offloaded ones; the
    block's transient (working_bytes) holds one layer's offloaded inputs."""
    plan = _plan(QWEN)
    job = replace(JOB, offload_modules=frozenset({OM.EXPERT_FC1, OM.MOE_ACT}))
    moved = offloaded_bytes(_layer(QWEN, LayerKind.MOE), plan, job, Recompute.SELECTIVE)
    base = stage_terms(QWEN, plan, JOB, H100).block[Recompute.SELECTIVE]
    off = stage_terms(QWEN, plan, job, H100).block[Recompute.SELECTIVE]
    assert base.activation_bytes - off.activation_bytes == pytest.approx(moved)
    assert off.working_bytes - base.working_bytes == pytest.approx(moved)
    held = in_flight_micro_batches(0, plan, plan.num_micro_batches(job))
    layers = plan.layers_per_stage[0]
    a = evaluate(QWEN, H100, JOB, plan).stage_memory[0].activations_bytes
    b = evaluate(QWEN, H100, job, plan).stage_memory[0].activations_bytes
    assert a - b == pytest.approx(moved * (held * layers - 1), rel=1e-6)


def test_copies_hide_behind_compute_up_to_the_host_link() -> None:
    """exposed = max(0, bytes/link - forward) + max(0, bytes/link - backward)."""
    accel = H100.accelerator
    link = offload_link_bytes_per_s(accel)
    assert link == pytest.approx(64e9)  # PCIe Gen5 x16, hardware/data/storage.yaml
    # 15.6 ms of copy: 5.6 ms past a 10 ms forward, none past a 40 ms backward
    assert offload_exposed_s(1e9, 0.01, 0.04, accel) == pytest.approx(1e9 / link - 0.01)
    assert offload_exposed_s(1e9, 1.0, 2.0, accel) == 0.0
    assert offload_link_bytes_per_s(GB200.accelerator) == pytest.approx(450e9)  # NVLink-C2C


def test_offload_time_enters_the_step_only_where_the_link_is_short() -> None:
    plan = _plan(QWEN)
    job = replace(JOB, offload_modules=frozenset({OM.EXPERT_FC1, OM.MOE_ACT}))
    base = stage_terms(QWEN, plan, JOB, H100).block[Recompute.SELECTIVE]
    off = stage_terms(QWEN, plan, job, H100).block[Recompute.SELECTIVE]
    moved = offloaded_bytes(_layer(QWEN, LayerKind.MOE), plan, job, Recompute.SELECTIVE)
    expected = offload_exposed_s(moved, base.forward_s, base.backward_s, H100.accelerator)
    assert off.comm_s - base.comm_s == pytest.approx(expected)
    assert off.compute_s == base.compute_s


def _scenario(**job: object) -> dict:
    return {
        "model": {"preset": "qwen3-30b-a3b"},
        "cluster": {"preset": "dgx-h100", "nodes": 2},
        "job": {"seq_len": 4096, "global_batch": 256, **job},
        "plan": {"tp": 1, "pp": 1, "dp": 16, "ep": 8, "recompute": "selective", "micro_batch": 1, "zero": 1},
    }


@pytest.mark.parametrize(
    ("job", "words"),
    [
        ({"offload_modules": ["fc2"]}, "job.offload_modules"),
        ({"offload_modules": ["fused_group_mlp"]}, "job.offload_modules"),
        ({"offload_modules": ["attn_proj"]}, "needs core_attn"),
        (
            {"offload_modules": ["moe_act"], "recompute_modules": ["moe"]},
            "job.recompute_modules containing moe",
        ),
    ],
)
def test_bad_offload_modules_name_the_field_and_the_rule(job: dict, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        paraplan.api.evaluate(_scenario(**job))


def test_only_megatron_and_nemo_run_it() -> None:
    result = paraplan.api.evaluate(_scenario(offload_modules=["expert_fc1", "moe_act"]))
    assert set(result.runs_on) == {"megatron", "nemo"}


def test_a_torchtitan_target_refuses_it_by_name() -> None:
    scenario = {**_scenario(offload_modules=["moe_act"]), "solver": {"target": "torchtitan"}}
    del scenario["plan"]
    with pytest.raises(InfeasibleError, match="job.offload_modules"):
        paraplan.api.solve(scenario)


@pytest.mark.parametrize(
    ("notes", "modules"),
    [
        (
            'fine-grained activation offloading of expert_fc1 + moe_act ("required")',
            ["expert_fc1", "moe_act"],
        ),
        ("NumParams=64862437376; activation CPU offload=False", []),
        ("", []),
    ],
)
def test_row_mapping_reads_the_offloaded_modules(notes: str, modules: list[str]) -> None:
    assert offload_modules({"notes": notes}) == modules


def test_row_2058_runs_with_its_offloading_and_needs_less_memory() -> None:
    """Issue 22: the ModelZoo's Qwen3-235B MXFP8 row states expert_fc1 + moe_act offloading."""
    import paraplan
    from benchmarks.fidelity import load_cases
    from paraplan.instance import build_instance, fixed_plan

    case = next(c for c in load_cases(kind="moe")[0] if c.row_id == 2058)
    assert case.scenario["job"]["offload_modules"] == ["expert_fc1", "moe_act"]
    inst = build_instance(paraplan.load_scenario(case.scenario))
    with_offload = evaluate(inst.graph, inst.cluster, inst.job, fixed_plan(inst))
    without = evaluate(
        inst.graph, inst.cluster, replace(inst.job, offload_modules=frozenset()), fixed_plan(inst)
    )
    assert with_offload.peak_memory_bytes < 0.7 * without.peak_memory_bytes
    assert with_offload.step_time_s == pytest.approx(without.step_time_s)  # hidden behind compute on C2C
    # megatron-core keeps no routed output (job.moe_probs_applied: activation, the row's framework):
    # it fits only with the offloading, as its source says (117.8 GiB of 173.2; 221.6 without)
    assert inst.job.moe_probs_applied is MoEProbs.ACTIVATION
    assert with_offload.fits and not without.fits


def test_row_2059_fits_with_megatrons_probabilities_in_the_activation() -> None:
    """Issue 22: the Megatron-Core MoE report's Qwen3-235B row at 131K tokens (no offloading
    stated) fits once the routed output the combine does not keep is not counted (131.1 GiB)."""
    import paraplan
    from benchmarks.fidelity import load_cases
    from paraplan.instance import build_instance, fixed_plan

    case = next(c for c in load_cases(kind="moe")[0] if c.row_id == 2059)
    inst = build_instance(paraplan.load_scenario(case.scenario))
    kept = replace(inst.job, moe_probs_applied=MoEProbs.COMBINE)
    assert evaluate(inst.graph, inst.cluster, inst.job, fixed_plan(inst)).fits
    assert not evaluate(inst.graph, inst.cluster, kept, fixed_plan(inst)).fits


def test_a_device_without_a_host_link_figure_is_a_config_error() -> None:
    """TPUs (XLA places activations itself; hardware/data/storage.yaml has no link for them)."""
    scenario = {
        "model": {"preset": "llama3-8b"},
        "cluster": {"preset": "v5p-16", "gpus": 8},
        "job": {"seq_len": 2048, "global_batch": 8, "offload_modules": ["attn_norm"]},
        "plan": {"dp": 8, "tp": 1, "pp": 1, "micro_batch": 1, "zero": 3, "recompute": "selective"},
    }
    with pytest.raises(ConfigError, match="job.offload_modules: no device-to-host link"):
        paraplan.api.evaluate(scenario)
