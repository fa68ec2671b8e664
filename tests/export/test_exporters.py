"""Exporters: key flags per framework, refusals that name the nearest plan, trace sums, CLI.

Plans are scored with ``paraplan.evaluate`` on small scenarios (Llama 3 8B on two 8-GPU nodes
unless stated), so these tests need no solver and no framework package.
"""

from __future__ import annotations

import ast
import json
from functools import cache
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from paraplan.cost import Axis, Plan

import paraplan
from paraplan.cli import main
from paraplan.errors import ConfigError, ExportError
from paraplan.export import (
    EXPORTERS,
    context,
    export,
    export_text,
    load_result,
    to_cost_plan,
    write_exports,
)
from paraplan.export.deepspeed import balanced_split, deepspeed_config
from paraplan.export.maxtext import maxtext_config, mesh_split
from paraplan.export.megatron import megatron_args, megatron_env, rank_groups
from paraplan.export.nemo import bridge_overrides, nemo2_overrides
from paraplan.export.torchtitan import model_parts, torchtitan_args
from paraplan.export.trace import CRITICAL_PATH_KEY, US_PER_S, build_trace
from paraplan.result import Result

LLAMA8B_2_NODES = {
    "model": {"preset": "llama3.1-8b"},
    "cluster": {"preset": "dgx-h100", "nodes": 2},
    "job": {"seq_len": 4096, "global_batch": 64, "precision": "bf16"},
}
UNIFORM = {"dp": 4, "tp": 2, "pp": 2, "micro_batch": 1, "zero": 1, "recompute": "selective"}
TARGETS = ("megatron", "deepspeed", "torchtitan", "maxtext", "nemo", "torch")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llama3-70b-h100.yaml"


@cache
def _result(plan_json: str, scenario_json: str) -> Result:
    return paraplan.evaluate({**json.loads(scenario_json), "plan": json.loads(plan_json)})


def result(scenario: dict | None = None, **plan: object) -> Result:
    """Scored result of ``plan`` on ``scenario`` (default: Llama 3 8B, 16 H100s)."""
    return _result(json.dumps(plan, sort_keys=True), json.dumps(scenario or LLAMA8B_2_NODES, sort_keys=True))


def flags(argv: list[str]) -> dict[str, str | None]:
    """``--flag value`` pairs of an argv (None for switches)."""
    out: dict[str, str | None] = {}
    for i, token in enumerate(argv):
        if token.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else "--"
            out[token] = None if nxt.startswith("--") else nxt
    return out


def refusal(res: Result, target: str) -> str:
    with pytest.raises(ExportError) as err:
        export_text(res, target)
    return str(err.value)


def assert_names_nearest_plan(message: str, *expected: str) -> None:
    """The message names the nearest expressible plan and both modelled step times."""
    assert "nearest plan" in message
    assert " s vs " in message and "for the original" in message
    for text in expected:
        assert text in message, (text, message)


# --------------------------------------------------------------------------- registry


def test_registry_lists_every_target_with_its_file() -> None:
    assert set(EXPORTERS) == {*TARGETS, "trace"}
    assert EXPORTERS["deepspeed"].filename == "deepspeed.json"
    assert EXPORTERS["torch"].filename == "torch_plan.py"


def test_unknown_target_names_the_valid_ones() -> None:
    with pytest.raises(ExportError, match="megatron, deepspeed, torchtitan, maxtext, nemo, torch"):
        export_text(result(**UNIFORM), "colossalai")


@pytest.mark.parametrize("target", ["megatron", "torchtitan", "nemo", "torch", "trace"])
def test_every_output_carries_version_plan_and_predicted_step_time(target: str) -> None:
    res = result(**UNIFORM)
    text = export(res, target)
    assert f"paraplan {paraplan.__version__}" in text
    if target != "trace":
        assert "plan: dp=4 tp=2 pp=2" in text
        assert f"predicted step time: {res.predicted.step_time_s:.4f} s" in text


# --------------------------------------------------------------------------- Megatron


def test_megatron_uniform_plan_key_flags() -> None:
    ctx = context(result(**UNIFORM))
    f = flags(megatron_args(ctx))
    assert f["--tensor-model-parallel-size"] == "2"
    assert f["--pipeline-model-parallel-size"] == "2"
    assert f["--micro-batch-size"] == "1" and f["--global-batch-size"] == "64"
    assert f["--num-query-groups"] == "8" and "--group-query-attention" in f
    assert "--sequence-parallel" in f and "--use-distributed-optimizer" in f
    assert f["--recompute-granularity"] == "selective" and f["--recompute-modules"] == "core_attn"
    for absent in (
        "--pipeline-model-parallel-layout",
        "--decoder-first-pipeline-num-layers",
        "--num-virtual-stages-per-pipeline-rank",
        "--use-tp-pp-dp-mapping",
        "--use-megatron-fsdp",
    ):
        assert absent not in f
    assert megatron_env(ctx) == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}


def test_megatron_script_is_a_torchrun_launch_over_every_node() -> None:
    text = export_text(result(**UNIFORM), "megatron")
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "torchrun --nnodes 2 --nproc-per-node 8" in text
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in text
    assert text.rstrip().endswith('"$@"')


def test_megatron_uneven_first_and_last_stages_use_decoder_flags() -> None:
    f = flags(
        megatron_args(
            context(
                result(
                    dp=2, tp=2, pp=4, micro_batch=1, zero=1, recompute="full", layers_per_stage=[7, 9, 9, 7]
                )
            )
        )
    )
    assert f["--decoder-first-pipeline-num-layers"] == "7"
    assert f["--decoder-last-pipeline-num-layers"] == "7"
    assert "--pipeline-model-parallel-layout" not in f


def test_megatron_uneven_middle_stages_use_an_explicit_layout() -> None:
    f = flags(
        megatron_args(
            context(
                result(
                    dp=2, tp=2, pp=4, micro_batch=1, zero=1, recompute="full", layers_per_stage=[8, 7, 9, 8]
                )
            )
        )
    )
    assert f["--pipeline-model-parallel-layout"] == "E,t*8|t*7|t*9|t*8,L"
    assert "--decoder-first-pipeline-num-layers" not in f


def test_megatron_interleaved_uneven_plan_uses_virtual_stages_per_rank() -> None:
    f = flags(
        megatron_args(
            context(
                result(
                    dp=2,
                    tp=2,
                    pp=4,
                    vp=2,
                    micro_batch=1,
                    zero=1,
                    recompute="none",
                    layers_per_stage=[6, 10, 10, 6],
                )
            )
        )
    )
    assert f["--num-virtual-stages-per-pipeline-rank"] == "2"
    assert f["--decoder-first-pipeline-num-layers"] == "6"
    assert "--num-layers-per-virtual-pipeline-stage" not in f  # rule 12: not with uneven PP


def test_megatron_full_recompute_names_method_and_layers() -> None:
    f = flags(megatron_args(context(result(**{**UNIFORM, "recompute": "full"}))))
    assert f["--recompute-granularity"] == "full"
    assert f["--recompute-method"] == "uniform" and f["--recompute-num-layers"] == "1"


def test_megatron_zero3_uses_megatron_fsdp_with_full_sharding() -> None:
    ctx = context(result(dp=8, tp=2, pp=1, micro_batch=1, zero=3, recompute="none"))
    f = flags(megatron_args(ctx))
    assert "--use-megatron-fsdp" in f
    assert f["--data-parallel-sharding-strategy"] == "optim_grads_params"
    assert f["--ckpt-format"] == "fsdp_dtensor"
    assert megatron_env(ctx) == {"CUDA_DEVICE_MAX_CONNECTIONS": None}
    assert "unset CUDA_DEVICE_MAX_CONNECTIONS" in export_text(ctx.result, "megatron")


def test_megatron_refuses_fsdp_with_pipeline_naming_distributed_optimizer_plan() -> None:
    message = refusal(result(dp=4, tp=2, pp=2, micro_batch=1, zero=3, recompute="none"), "megatron")
    assert "--use-megatron-fsdp" in message and "pp=2" in message
    assert_names_nearest_plan(message, "zero=", "pp=")


def test_megatron_refuses_per_stage_recompute_naming_a_uniform_plan() -> None:
    res = result(dp=4, tp=2, pp=2, micro_batch=1, zero=1, recompute=["full", "none"])
    message = refusal(res, "megatron")
    assert "recompute differs per stage" in message
    assert_names_nearest_plan(message, "recompute -> ", f"{res.predicted.step_time_s:.4g} s")


def test_megatron_tp_pp_dp_order_adds_the_mapping_flag() -> None:
    f = flags(
        megatron_args(
            context(
                result(
                    dp=2, tp=2, pp=4, micro_batch=1, zero=1, recompute="full", order=["tp", "cp", "pp", "dp"]
                )
            )
        )
    )
    assert "--use-tp-pp-dp-mapping" in f


def test_megatron_refuses_other_orders_naming_a_supported_one() -> None:
    message = refusal(
        result(dp=2, tp=2, pp=4, micro_batch=1, zero=1, recompute="full", order=["dp", "tp", "cp", "pp"]),
        "megatron",
    )
    assert "plan.order=dp-tp-cp-pp" in message
    assert_names_nearest_plan(message, "order -> tp-cp-ep-", "order=tp-cp-")


def test_megatron_order_ignores_axes_of_degree_one() -> None:
    res = result(dp=4, tp=2, pp=2, micro_batch=1, zero=1, recompute="none", order=["cp", "tp", "dp", "pp"])
    assert "--use-tp-pp-dp-mapping" not in megatron_args(context(res))


def test_megatron_refuses_ffn_not_divisible_by_tp() -> None:
    scenario = {
        **LLAMA8B_2_NODES,
        "model": {
            "layers": 8,
            "hidden": 1024,
            "ffn_hidden": 2730,
            "heads": 16,
            "kv_heads": 8,
            "vocab": 32000,
        },
    }
    message = refusal(result(scenario, dp=4, tp=4, pp=1, micro_batch=1, zero=1, recompute="none"), "megatron")
    assert "ffn_hidden=2730" in message
    assert_names_nearest_plan(message, "tp -> 2")


def test_rank_groups_match_the_documented_megatron_example() -> None:
    plan = Plan(
        dp=2, tp=2, pp=2, layers_per_stage=(1, 1), recompute=(), order=(Axis.TP, Axis.CP, Axis.DP, Axis.PP)
    )
    groups = rank_groups(plan)
    assert groups["tp"] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert groups["dp"] == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert groups["pp"] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    swapped = rank_groups(Plan(dp=2, tp=2, pp=2, order=(Axis.TP, Axis.CP, Axis.PP, Axis.DP)))
    assert swapped["pp"][0] == [0, 2] and swapped["dp"][0] == [0, 4]


# --------------------------------------------------------------------------- DeepSpeed


def test_deepspeed_config_keeps_the_batch_rule_and_pipeline_settings() -> None:
    res = result(dp=8, tp=1, pp=2, micro_batch=1, zero=1, recompute="full")
    config = deepspeed_config(context(res))
    assert config["train_batch_size"] == (
        config["train_micro_batch_size_per_gpu"] * config["gradient_accumulation_steps"] * 8
    )
    assert config["zero_optimization"]["stage"] == 1
    assert config["pipeline"]["stages"] == 2
    assert config["pipeline"]["activation_checkpoint_interval"] == 1
    assert config["bf16"] == {"enabled": True}
    assert res.predicted.step_time_s == config["_paraplan"]["predicted_step_time_s"]
    json.loads(export_text(res, "deepspeed"))


def test_deepspeed_zero3_without_pipeline() -> None:
    config = deepspeed_config(context(result(dp=16, tp=1, pp=1, micro_batch=2, zero=3, recompute="none")))
    assert config["zero_optimization"]["stage"] == 3
    assert config["gradient_accumulation_steps"] == 2
    assert "pipeline" not in config


def test_deepspeed_refuses_explicit_uneven_layers_naming_the_uniform_plan() -> None:
    res = result(dp=4, tp=1, pp=4, micro_batch=1, zero=1, recompute="full", layers_per_stage=[7, 9, 9, 7])
    message = refusal(res, "deepspeed")
    assert "no explicit layer counts" in message
    assert_names_nearest_plan(message, "layers_per_stage=[8, 8, 8, 8]")


def test_deepspeed_refuses_pipeline_with_zero2_naming_a_repaired_plan() -> None:
    message = refusal(result(dp=8, tp=1, pp=2, micro_batch=1, zero=2, recompute="none"), "deepspeed")
    assert "incompatible with pipeline parallelism" in message
    assert_names_nearest_plan(message)
    assert "(zero -> 1)" in message or "(pp -> 1, dp absorbs it)" in message


def test_deepspeed_refuses_interleaving_and_sequence_parallel() -> None:
    message = refusal(result(dp=4, tp=2, pp=2, vp=2, micro_batch=1, zero=1, recompute="none"), "deepspeed")
    assert "plan.vp=2" in message
    assert_names_nearest_plan(message, "vp=1", "sequence_parallel=off")


def test_deepspeed_balanced_split_puts_extra_blocks_first() -> None:
    assert balanced_split(32, 4) == (8, 8, 8, 8)
    assert balanced_split(30, 4) == (8, 8, 7, 7)
    assert balanced_split(126, 4) == (32, 32, 31, 31)


def test_nearest_plan_recomputes_to_fit_memory_when_the_repairs_alone_do_not() -> None:
    scenario = {
        "model": {"preset": "llama3-70b"},
        "cluster": {"preset": "dgx-h100", "nodes": 8},
        "job": {"seq_len": 8192, "global_batch": 128, "precision": "bf16"},
    }
    res = result(scenario, dp=4, tp=2, pp=4, cp=2, vp=4, micro_batch=1, zero=3, recompute="none")
    message = refusal(res, "deepspeed")
    assert_names_nearest_plan(message)
    assert "does NOT fit" not in message


# --------------------------------------------------------------------------- torchtitan


def test_torchtitan_flags_with_activation_checkpoint_subcommand_last() -> None:
    argv = torchtitan_args(context(result(**UNIFORM)))
    f = flags(argv)
    assert argv[:4] == ["--module", "llama3", "--config", "llama3_8b"]
    assert f["--parallelism.tensor-parallel-degree"] == "2"
    assert f["--parallelism.data-parallel-shard-degree"] == "4"
    assert f["--parallelism.fsdp-reshard-after-forward"] == "never"
    assert f["--parallelism.pipeline-parallel-schedule"] == "1F1B"
    assert f["--training.local-batch-size"] == "16"  # 16 micro-batches of 1 in one PP step
    assert "--training.disable-cuda-graphs" in f
    assert argv[-1] == "activation-checkpoint:selective"


def test_torchtitan_zero0_replicates_and_zero3_reshards() -> None:
    f0 = flags(torchtitan_args(context(result(dp=8, tp=2, pp=1, micro_batch=1, zero=0, recompute="none"))))
    assert f0["--parallelism.data-parallel-replicate-degree"] == "8"
    assert f0["--parallelism.data-parallel-shard-degree"] == "1"
    f3 = flags(torchtitan_args(context(result(dp=8, tp=2, pp=1, micro_batch=1, zero=3, recompute="full"))))
    assert f3["--parallelism.fsdp-reshard-after-forward"] == "always"
    assert "--training.disable-cuda-graphs" in f3  # plan.cuda_graphs none (torchtitan's default: on)
    graphs = result(dp=8, tp=2, pp=1, micro_batch=1, zero=3, recompute="full", cuda_graphs="full")
    assert "--training.disable-cuda-graphs" not in flags(torchtitan_args(context(graphs)))


def test_torchtitan_model_parts_follow_uneven_interleaved_stages() -> None:
    parts = model_parts(Plan(dp=1, tp=1, pp=4, vp=2, layers_per_stage=(6, 10, 10, 6)))
    assert len(parts) == 8
    assert parts[0] == ["tok_embeddings", "layers.0", "layers.1", "layers.2"]
    assert parts[1] == [f"layers.{i}" for i in range(3, 8)]
    assert parts[-1][-2:] == ["norm", "lm_head"]
    assert sum(len(p) for p in parts) == 32 + 3


def test_torchtitan_refuses_fp16_naming_the_bf16_plan() -> None:
    scenario = {**LLAMA8B_2_NODES, "job": {**LLAMA8B_2_NODES["job"], "precision": "fp16"}}
    message = refusal(result(scenario, **UNIFORM), "torchtitan")
    assert "mixed_precision_param" in message
    assert_names_nearest_plan(message, "precision=bf16")


# --------------------------------------------------------------------------- MaxText


def test_maxtext_splits_axes_into_ici_and_dcn_by_order_and_node_size() -> None:
    scenario = {**LLAMA8B_2_NODES, "cluster": {"preset": "dgx-h100", "nodes": 4}}
    config = maxtext_config(
        context(result(scenario, dp=8, tp=4, pp=1, micro_batch=1, zero=3, recompute="full"))
    )
    assert config["ici_tensor_parallelism"] == 4 and config["dcn_tensor_parallelism"] == 1
    assert config["ici_fsdp_parallelism"] == 2 and config["dcn_fsdp_parallelism"] == 4
    assert config["ici_data_parallelism"] == 1 and config["dcn_data_parallelism"] == 1
    assert config["num_slices"] == 4
    assert config["per_device_batch_size"] * 32 * config["gradient_accumulation_steps"] == 64


def test_maxtext_pipeline_keys_and_zero1() -> None:
    res = result(
        dp=4, tp=2, pp=2, vp=2, micro_batch=1, zero=1, recompute="full", order=["tp", "cp", "pp", "dp"]
    )
    config = maxtext_config(context(res))
    assert config["ici_pipeline_parallelism"] == 2
    assert config["num_pipeline_repeats"] == 2 and config["num_layers_per_pipeline_stage"] == 8
    assert config["num_pipeline_microbatches"] == 16
    assert config["shard_optimizer_over_data"] is True
    assert config["dcn_data_parallelism"] == 2
    assert yaml.safe_load(export_text(res, "maxtext")) == config


def test_maxtext_refuses_uneven_stages_naming_even_ones() -> None:
    message = refusal(
        result(
            dp=2,
            tp=2,
            pp=4,
            micro_batch=1,
            zero=1,
            recompute="full",
            layers_per_stage=[7, 9, 9, 7],
            order=["tp", "cp", "pp", "dp"],
        ),
        "maxtext",
    )
    assert_names_nearest_plan(message, "layers_per_stage=[8, 8, 8, 8]")


def test_mesh_split_rejects_an_axis_straddling_nodes_unevenly() -> None:
    plan = Plan(dp=4, tp=6, pp=1, order=(Axis.TP, Axis.CP, Axis.DP, Axis.PP))
    with pytest.raises(ValueError, match="straddles"):
        mesh_split(plan, devices_per_node=8, num_nodes=3)
    fits = Plan(dp=4, tp=4, pp=1, order=(Axis.TP, Axis.CP, Axis.DP, Axis.PP))
    assert mesh_split(fits, 8, 2) == {Axis.TP: (4, 1), Axis.CP: (1, 1), Axis.DP: (2, 2), Axis.PP: (1, 1)}


# --------------------------------------------------------------------------- NeMo


def test_nemo_file_runs_and_sets_bridge_paths() -> None:
    res = result(
        dp=2, tp=2, pp=4, vp=2, micro_batch=1, zero=1, recompute="full", layers_per_stage=[6, 10, 10, 6]
    )
    namespace: dict = {"__name__": "nemo_export"}
    exec(compile(export_text(res, "nemo"), "nemo.py", "exec"), namespace)  # noqa: S102
    tree = SimpleNamespace(**{k: SimpleNamespace() for k in ("model", "train", "ddp", "checkpoint", "dist")})
    namespace["apply"](tree)
    assert tree.model.tensor_model_parallel_size == 2
    assert tree.model.virtual_pipeline_model_parallel_size == 2
    assert tree.model.num_layers_in_first_pipeline_stage == 6
    assert tree.model.recompute_method == "uniform"
    assert tree.train.global_batch_size == 64
    assert "model.pipeline_model_parallel_size=4" in namespace["hydra_overrides"]()
    assert nemo2_overrides(context(res))["trainer.strategy.pipeline_model_parallel_size"] == 4


def test_nemo_zero3_uses_megatron_fsdp_paths() -> None:
    overrides = bridge_overrides(context(result(dp=8, tp=2, pp=1, micro_batch=1, zero=3, recompute="none")))
    assert overrides["ddp.use_megatron_fsdp"] is True
    assert overrides["ddp.data_parallel_sharding_strategy"] == "optim_grads_params"
    assert overrides["checkpoint.ckpt_format"] == "fsdp_dtensor"


def test_nemo_refuses_what_megatron_core_refuses() -> None:
    message = refusal(
        result(dp=4, tp=2, pp=2, micro_batch=1, zero=1, recompute=["full", "selective"]), "nemo"
    )
    assert message.startswith("NeMo 2 / Megatron-Bridge")
    assert_names_nearest_plan(message, "recompute -> ")


# --------------------------------------------------------------------------- torch


def test_torch_script_parses_and_carries_the_plan() -> None:
    text = export_text(result(**UNIFORM), "torch")
    ast.parse(text)
    assert "TP = 2" in text and "PP = 2" in text and "ZERO = 1" in text
    assert text.startswith("# Generated by paraplan")


def test_torch_refuses_context_parallel_naming_cp1() -> None:
    message = refusal(result(dp=4, tp=2, pp=1, cp=2, micro_batch=1, zero=1, recompute="none"), "torch")
    assert "no context parallelism" in message
    assert_names_nearest_plan(message, "cp -> 1", "dp=8")


# --------------------------------------------------------------------------- trace


TRACE_PLANS = [
    UNIFORM,
    {"dp": 16, "tp": 1, "pp": 1, "micro_batch": 1, "zero": 3, "recompute": "none"},
    {
        "dp": 2,
        "tp": 2,
        "pp": 4,
        "vp": 2,
        "micro_batch": 1,
        "zero": 1,
        "recompute": "none",
        "layers_per_stage": [6, 10, 10, 6],
    },
    {
        "dp": 1,
        "tp": 4,
        "pp": 4,
        "micro_batch": 1,
        "zero": 0,
        "recompute": "full",
        "layers_per_stage": [7, 9, 9, 7],
    },  # 64 micro-batches
    {
        "dp": 1,
        "tp": 8,
        "pp": 2,
        "micro_batch": 1,
        "zero": 1,
        "recompute": "full",
        "order": ["tp", "cp", "pp", "dp"],
    },
]


def _lane_total_s(trace: dict, tid: int) -> float:
    events = trace["traceEvents"]
    return sum(e["dur"] for e in events if e["ph"] == "X" and e["tid"] == tid) / US_PER_S


@pytest.mark.parametrize("plan", TRACE_PLANS, ids=lambda p: f"pp{p['pp']}-z{p['zero']}")
def test_trace_critical_lane_adds_up_to_the_step_time(plan: dict) -> None:
    res = result(**plan)
    trace = json.loads(export_text(res, "trace"))
    step = res.predicted.step_time_s
    assert _lane_total_s(trace, trace["otherData"][CRITICAL_PATH_KEY]) == pytest.approx(step, rel=1e-6)
    for stage in range(1, res.plan.pp + 1):  # every stage lane ends with the step
        assert _lane_total_s(trace, stage) == pytest.approx(step, rel=1e-6)


def test_trace_is_chrome_trace_event_json() -> None:
    trace = build_trace(context(result(**UNIFORM)))
    assert trace["displayTimeUnit"] == "ms"
    for event in trace["traceEvents"]:
        assert event["ph"] in ("X", "M") and event["pid"] == 1
        if event["ph"] == "X":
            assert event["dur"] > 0 and event["ts"] >= 0
            assert event["cat"] in ("compute", "comm", "bubble", "optimizer")


def test_trace_has_stage_and_link_lanes_and_marks_exposed_comm() -> None:
    trace = build_trace(context(result(**UNIFORM)))
    names = {
        e["tid"]: e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }
    assert names[1].startswith("pp stage 0") and names[2].startswith("pp stage 1")
    assert names[100].startswith("tp comm [nvlink]")
    assert names[101].startswith("pp p2p [")
    assert names[102].startswith("dp grad sync [")
    comm = [e for e in trace["traceEvents"] if e.get("cat") == "comm"]
    assert any(e["args"]["exposed"] and e["name"].startswith("exposed") for e in comm)
    assert any(e["args"]["exposed"] is False for e in comm)  # overlapped grad sync


def test_trace_aggregates_long_steady_states() -> None:
    res = result(dp=1, tp=8, pp=2, micro_batch=1, zero=1, recompute="full")  # 64 micro-batches
    big = result(
        {**LLAMA8B_2_NODES, "job": {**LLAMA8B_2_NODES["job"], "global_batch": 256}},
        dp=1,
        tp=8,
        pp=2,
        micro_batch=1,
        zero=1,
        recompute="full",
    )
    small_events = len(build_trace(context(res))["traceEvents"])
    big_trace = build_trace(context(big))
    assert len(big_trace["traceEvents"]) < small_events
    assert any("steady state" in e["name"] for e in big_trace["traceEvents"])


# --------------------------------------------------------------------------- files and CLI


def test_write_exports_writes_each_target_and_a_trace(tmp_path: Path) -> None:
    paths = write_exports(result(**UNIFORM), ["megatron", "torchtitan", "nemo"], tmp_path)
    assert sorted(p.name for p in paths) == ["megatron.sh", "nemo.py", "torchtitan.sh", "trace.json"]
    assert all(p.read_text() for p in paths)


def test_write_exports_writes_what_it_can_then_reports_refusals(tmp_path: Path) -> None:
    with pytest.raises(ExportError) as err:
        write_exports(result(**UNIFORM), ["megatron", "deepspeed"], tmp_path)
    assert "deepspeed:" in str(err.value) and "megatron.sh" in str(err.value)
    assert (tmp_path / "megatron.sh").exists() and (tmp_path / "trace.json").exists()
    assert not (tmp_path / "deepspeed.json").exists()


def test_write_exports_checks_names_before_writing(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="unknown export target"):
        write_exports(result(**UNIFORM), ["megatron", "nope"], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def _result_file(tmp_path: Path, res: Result) -> Path:
    path = tmp_path / "result.json"
    path.write_text(json.dumps(res.model_dump(mode="json")))
    return path


def test_load_result_round_trips_and_rejects_bad_files(tmp_path: Path) -> None:
    res = result(**UNIFORM)
    assert load_result(_result_file(tmp_path, res)) == res
    bad = tmp_path / "bad.json"
    bad.write_text('{"plan": 1}')
    with pytest.raises(ConfigError, match="not a paraplan result"):
        load_result(bad)
    bad.write_text("not json")
    with pytest.raises(ConfigError, match="not a JSON result"):
        load_result(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        load_result(tmp_path / "missing.json")


def test_cli_export_prints_the_target_text(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = _result_file(tmp_path, result(**UNIFORM))
    assert main(["export", str(path), "--to", "megatron"]) == 0
    assert "--tensor-model-parallel-size 2" in capsys.readouterr().out


def test_cli_export_out_writes_files(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = _result_file(tmp_path, result(**UNIFORM))
    assert main(["export", str(path), "--to", "torchtitan", "--out", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "torchtitan.sh").exists() and (tmp_path / "o" / "trace.json").exists()
    assert "wrote" in capsys.readouterr().err


def test_cli_export_evaluate_json_output(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["evaluate", str(EXAMPLE), "--json"]) == 0
    path = tmp_path / "r.json"
    path.write_text(capsys.readouterr().out)
    assert main(["export", str(path), "--to", "nemo"]) == 0
    assert "'model.virtual_pipeline_model_parallel_size': 5" in capsys.readouterr().out


def test_cli_export_unknown_target_exits_4(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = _result_file(tmp_path, result(**UNIFORM))
    assert main(["export", str(path), "--to", "colossalai"]) == 4
    assert "unknown export target" in capsys.readouterr().err


def test_cli_export_refusal_exits_4_with_nearest_plan(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = _result_file(tmp_path, result(**UNIFORM))
    assert main(["export", str(path), "--to", "deepspeed"]) == 4
    assert "nearest plan" in capsys.readouterr().err


def test_cli_export_bad_result_file_exits_1(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    assert main(["export", str(bad), "--to", "megatron"]) == 1


def test_cli_plan_export_writes_files(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    if not hasattr(paraplan.api, "solve"):
        pytest.skip("paraplan.api.solve (the planner) is not there yet")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        yaml.safe_dump(
            {
                "model": {"preset": "llama3-8b"},
                "cluster": {"preset": "dgx-h100", "nodes": 1},
                "job": {"seq_len": 2048, "global_batch": 32, "precision": "bf16"},
            }
        )
    )
    code = main(
        [
            "plan",
            str(scenario),
            "--json",
            "--time-limit",
            "10",
            "--export",
            "megatron,torchtitan",
            "--out",
            str(tmp_path / "o"),
        ]
    )
    assert code in (0, 4)  # 4: a target refused the plan it found; the rest is still written
    assert (tmp_path / "o" / "trace.json").exists()
    capsys.readouterr()


def test_to_cost_plan_round_trips_the_result_plan() -> None:
    res = result(
        dp=2, tp=2, pp=4, vp=2, micro_batch=1, zero=1, recompute="none", layers_per_stage=[6, 10, 10, 6]
    )
    assert to_cost_plan(res.plan).layers_per_stage == (6, 10, 10, 6)
    assert to_cost_plan(res.plan).order == (Axis.TP, Axis.CP, Axis.DP, Axis.PP)


BLOCK_SCALED = {
    "mxfp8": ("--fp8-recipe mxfp8", "bf16_with_mxfp8_mixed"),
    "nvfp4": ("--fp4-recipe nvfp4", "bf16_with_nvfp4_mixed"),
    "fp8_blockwise": ("--fp8-recipe blockwise", "bf16_with_fp8_subchannel_scaling_mixed"),
}


@pytest.mark.parametrize("precision", BLOCK_SCALED)
def test_block_scaled_precisions_plan_for_and_export_to_megatron_and_nemo(precision: str) -> None:
    """A Blackwell job in MXFP8, NVFP4 or FP8 blockwise plans runnable by default for the two
    frameworks that name the recipe; the others refuse, naming the field and where it exports."""
    res = paraplan.solve(
        {
            "model": {"preset": "llama3-8b"},
            "cluster": {"preset": "dgx-b200", "nodes": 2},
            "job": {"seq_len": 8192, "global_batch": 128, "precision": precision},
        }
    )
    assert res.runs_on == ["megatron", "nemo"]
    flag, recipe = BLOCK_SCALED[precision]
    assert flag in " ".join(megatron_args(context(res)))
    assert bridge_overrides(context(res))["mixed_precision"] == recipe
    with pytest.raises(ExportError, match=rf"job\.precision={precision} .*torchtitan.*megatron or nemo"):
        export_text(res, "torchtitan")
