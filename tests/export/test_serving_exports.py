"""The serving renderers (paraplan/export/serving/): exact argv for aggregated plans, both pools of
disaggregated ones, TensorRT-LLM's YAML keys, the Dynamo manifest, refusals, and the front door
(``paraplan.export(result, "vllm")`` on a serving result). The engines' own parsers judge the same
renders in test_vllm_parser.py and test_sglang_parser.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from paraplan.cost.serving import Engine, ServingPlan, WorkerPlan, Workload
from paraplan.graph import preset
from paraplan.hardware import build_cluster
from paraplan.rules.serving import GpuMemory, plan_workers

import paraplan.export
from paraplan.errors import ExportError
from paraplan.export import write_exports
from paraplan.export.registry import lookup
from paraplan.export.serving import (
    SERVING_TARGETS,
    dynamo_deployment,
    render_serving,
    render_sglang,
    render_trtllm,
    render_vllm,
    sglang_launches,
    trtllm_launches,
    vllm_launches,
)
from paraplan.export.serving.dynamo import DYNAMO_ONLY_FLAGS, dynamo_worker_args
from paraplan.export.serving.trtllm import KV_CACHE_CONFIG_KEYS, TORCH_LLM_ARGS_KEYS, disagg_config

GIB = 2**30
# weights 70, KV 50, activations 5, buffers 1.5 GiB on a 140.4 GiB H200: vLLM 0.900, SGLang 0.854,
# TensorRT-LLM 0.782 (tests/rules/test_serving_rules.py works them out)
MEM = GpuMemory(70 * GIB, 50 * GIB, 5 * GIB, 1.5 * GIB, 140.4 * GIB)
H200 = build_cluster("dgx-h200", nodes=4)
WL = Workload(isl=1024, osl=1024, kv_precision="fp8")
DSV3 = "deepseek-ai/DeepSeek-V3"
DP_EP = ServingPlan(tp=8, ep=8, dp_attention=True, max_batch=512, max_num_tokens=8192)
DISAGG = ServingPlan(
    mode="disaggregated",
    prefill=WorkerPlan(tp=8, ep=8, workers=2),
    decode=WorkerPlan(tp=16, ep=16, dp_attention=True, workers=1),
    max_batch=1024,
    max_num_tokens=16384,
)


def test_vllm_aggregated_argv() -> None:
    argv = render_vllm(DP_EP, WL, Engine("vllm"), DSV3, MEM, cluster=H200, max_model_len=4096)
    assert argv == [
        "vllm", "serve", DSV3,
        "--tensor-parallel-size", "1", "--data-parallel-size", "8",
        "--pipeline-parallel-size", "1", "--enable-expert-parallel",
        "--max-num-seqs", "64", "--max-num-batched-tokens", "1024",  # per DP rank: 512 / 8, 8192 / 8
        "--gpu-memory-utilization", "0.9", "--kv-cache-dtype", "fp8", "--max-model-len", "4096",
    ]  # fmt: skip
    dense = render_vllm(
        ServingPlan(tp=4, pp=2, chunked_prefill=False), Workload(isl=1, osl=1), Engine(), "m", MEM
    )
    assert dense == [
        "vllm", "serve", "m", "--tensor-parallel-size", "4", "--pipeline-parallel-size", "2",
        "--max-num-seqs", "256", "--max-num-batched-tokens", "8192", "--no-enable-chunked-prefill",
        "--gpu-memory-utilization", "0.9",
    ]  # fmt: skip


def test_sglang_aggregated_argv() -> None:
    argv = render_sglang(DP_EP, WL, Engine("sglang"), DSV3, MEM, cluster=H200)
    assert argv == [
        "python", "-m", "sglang.launch_server", "--model-path", DSV3,
        "--tp-size", "8", "--pp-size", "1", "--attn-dp-size", "8", "--ep-size", "8",
        "--max-running-requests", "512", "--chunked-prefill-size", "8192", "--max-prefill-tokens", "8192",
        "--mem-fraction-static", "0.854", "--kv-cache-dtype", "fp8_e4m3",
    ]  # fmt: skip
    off = render_sglang(ServingPlan(tp=2, chunked_prefill=False), Workload(isl=1, osl=1), Engine(), "m", MEM)
    assert off[off.index("--chunked-prefill-size") + 1] == "-1"


def test_trtllm_yaml_holds_torch_llm_args_keys_and_the_free_fraction() -> None:
    argv, text = render_trtllm(DP_EP, WL, Engine("trtllm"), DSV3, MEM, cluster=H200)
    assert argv == [
        "trtllm-serve", DSV3, "--backend", "pytorch", "--tp_size", "8", "--pp_size", "1", "--ep_size", "8",
        "--max_batch_size", "64", "--max_num_tokens", "1024", "--extra_llm_api_options", "extra-llm-api.yaml",
    ]  # fmt: skip
    options = yaml.safe_load(text)
    assert options == {
        "enable_attention_dp": True,
        "enable_chunked_prefill": True,
        "moe_expert_parallel_size": 8,
        "moe_tensor_parallel_size": 1,
        "kv_cache_config": {"dtype": "fp8", "free_gpu_memory_fraction": 0.782},
    }
    assert set(options) <= set(TORCH_LLM_ARGS_KEYS)
    assert set(options["kv_cache_config"]) <= set(KV_CACHE_CONFIG_KEYS)
    # the fraction is the YAML's only: a YAML kv_cache_config replaces the CLI-made one whole
    assert not any("fraction" in a for a in argv)


def test_disaggregated_pools_render_for_each_engine() -> None:
    v = vllm_launches(DISAGG, WL, DSV3, MEM, cluster=H200)
    assert [(x.role, x.count, x.gpus) for x in v] == [("prefill", 2, 8), ("decode", 1, 16)]
    for launch in v:
        config = json.loads(launch.argv[launch.argv.index("--kv-transfer-config") + 1])
        assert config == {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
    decode = v[1].argv
    assert decode[decode.index("--data-parallel-size") + 1] == "16"
    assert decode[decode.index("--max-num-seqs") + 1] == "64"  # 1024 / 16 DP ranks
    s = sglang_launches(DISAGG, WL, DSV3, MEM, cluster=H200)
    for launch in s:
        a = launch.argv
        assert a[a.index("--disaggregation-mode") + 1] == launch.role
        assert a[a.index("--disaggregation-transfer-backend") + 1] == "nixl"
    t = trtllm_launches(DISAGG, WL, DSV3, MEM, cluster=H200)
    for launch in t:
        (options,) = [yaml.safe_load(x) for x in launch.files.values()]
        assert options["cache_transceiver_config"] == {"backend": "DEFAULT"}
    cfg = disagg_config(t)
    assert cfg["context_servers"]["num_instances"] == 2 and len(cfg["context_servers"]["urls"]) == 2
    assert cfg["generation_servers"]["num_instances"] == 1
    assert "trtllm-serve disaggregated -c disagg_config.yaml" in render_serving(
        "trtllm", DISAGG, WL, DSV3, MEM
    )
    with pytest.raises(ExportError, match="use vllm_launches, or export to dynamo"):
        render_vllm(DISAGG, WL, Engine(), DSV3, MEM)


def test_dynamo_manifest_has_both_pools_their_sizes_and_the_engine_flags() -> None:
    (dgd,) = dynamo_deployment("vllm", DISAGG, WL, DSV3, MEM, cluster=H200)
    assert (dgd["apiVersion"], dgd["kind"]) == ("nvidia.com/v1alpha1", "DynamoGraphDeployment")
    services = dgd["spec"]["services"]
    assert list(services) == ["Frontend", "VllmPrefillWorker", "VllmDecodeWorker"]
    p, d = services["VllmPrefillWorker"], services["VllmDecodeWorker"]
    assert (p["subComponentType"], p["replicas"], p["resources"]["limits"]["gpu"]) == ("prefill", 2, "8")
    # a 16-GPU decode worker spans two 8-GPU nodes
    assert (d["subComponentType"], d["replicas"], d["multinode"], d["resources"]["limits"]["gpu"]) == (
        "decode",
        1,
        {"nodeCount": 2},
        "8",
    )
    args = d["extraPodSpec"]["mainContainer"]["args"]
    assert d["extraPodSpec"]["mainContainer"]["command"] == ["python3", "-m", "dynamo.vllm"]
    assert args[args.index("--disaggregation-mode") + 1] == "decode"
    assert "--is-prefill-worker" not in args  # not mixed with the legacy role flag
    # what is left after the Dynamo-only flags is exactly what `vllm serve` gets
    w = plan_workers(DISAGG)[1]
    stripped = [
        a for i, a in enumerate(args) if a not in DYNAMO_ONLY_FLAGS and args[i - 1] not in DYNAMO_ONLY_FLAGS
    ]
    assert ["vllm", "serve", *stripped[1:]] == vllm_launches(DISAGG, WL, DSV3, MEM, cluster=H200)[1].argv
    assert dynamo_worker_args("vllm", w, WL, DSV3, MEM) == args


def test_dynamo_trtllm_mounts_each_pools_engine_yaml() -> None:
    config, dgd = dynamo_deployment("trtllm", DISAGG, WL, DSV3, MEM, cluster=H200)
    assert config["kind"] == "ConfigMap" and set(config["data"]) == {"prefill.yaml", "decode.yaml"}
    decode = yaml.safe_load(config["data"]["decode.yaml"])
    assert (decode["tensor_parallel_size"], decode["enable_attention_dp"], decode["max_batch_size"]) == (
        16,
        True,
        64,
    )
    assert set(decode) <= {"backend", *TORCH_LLM_ARGS_KEYS}
    worker = dgd["spec"]["services"]["TrtllmDecodeWorker"]["extraPodSpec"]["mainContainer"]
    assert worker["args"][worker["args"].index("--extra-engine-args") + 1] == "/config/decode.yaml"
    text = render_serving("dynamo", DP_EP, WL, DSV3, MEM, engine="sglang")
    agg = list(yaml.safe_load_all(text))[0]["spec"]["services"]
    assert list(agg) == ["Frontend", "SglangWorker"] and "subComponentType" not in agg["SglangWorker"]


def test_renders_refuse_with_the_field_and_the_engines_that_run_it() -> None:
    fp4 = Workload(isl=1024, osl=1024, weights_precision="nvfp4")
    with pytest.raises(ExportError, match=r"workload\.weights_precision=nvfp4: trtllm 1\.2\.1 .* run it"):
        render_serving("trtllm", ServingPlan(tp=8), fp4, "m", MEM, cluster=H200)
    with pytest.raises(
        ExportError, match=r"plan\.prefill\.ep=4: vllm 0\.33\.0 .*sglang 0\.5\.23, trtllm 1\.2\.1"
    ):
        render_serving(
            "dynamo",
            ServingPlan(mode="disaggregated", prefill=WorkerPlan(tp=8, ep=4), decode=WorkerPlan(tp=8)),
            WL,
            "m",
            MEM,
            engine="vllm",
            cluster=H200,
        )
    too_big = GpuMemory(100 * GIB, 50 * GIB, 5 * GIB, 1.5 * GIB, 140.4 * GIB)
    with pytest.raises(
        ExportError, match=r"sglang, replica workers \(plan\): predicted memory per GPU 156.50 GiB"
    ):
        render_serving("sglang", ServingPlan(tp=8), WL, "m", too_big)
    with pytest.raises(ExportError, match="unknown serving export target 'tgi'"):
        render_serving("tgi", ServingPlan(), WL, "m", MEM)


def _result(plan: dict, model: dict) -> dict:
    """A serving result's JSON as paraplan.serving writes it (the fields the exporters read)."""
    return {
        "kind": "serving",
        "plan": {**plan, "num_devices": 8},
        "predicted": {
            "memory_per_gpu": {
                "weights": 70 * GIB,
                "kv_cache": 50 * GIB,
                "activations": 5 * GIB,
                "buffers": 1.5 * GIB,
            },
            "memory_capacity_bytes": 140.4 * GIB,
        },
        "scenario": {
            "model": model,
            "cluster": {"preset": "dgx-h200", "gpus": 8},
            "workload": {
                "isl": {"mean": 1024, "p90": 2048},
                "osl": 512,
                "slo": {"ttft_ms": 2000},
                "kv_precision": "fp8",
            },
            "engine": {"name": "sglang"},
        },
    }


AGG_OUT = {"mode": "aggregated", "tp": 8, "pp": 1, "ep": 8, "dp_attention": True, "replicas": 1}
AGG_OUT |= {"max_batch": 512, "max_num_tokens": 8192, "chunked_prefill": True}


def test_paraplan_export_reaches_the_serving_exporters(tmp_path: Path) -> None:
    result = _result(AGG_OUT, {"preset": "deepseek-v3"})
    text = paraplan.export(result, "vllm")  # type: ignore[operator]
    assert f"vllm serve {DSV3} --tensor-parallel-size 1 --data-parallel-size 8" in text
    assert "--gpu-memory-utilization 0.9 --kv-cache-dtype fp8" in text
    manifest = paraplan.export(result, "dynamo")  # type: ignore[operator]
    assert "dynamo.sglang" in manifest and "--mem-fraction-static" in manifest
    # a preset without a shipped HF config keeps its name, with a note to replace it
    other = paraplan.export(_result(AGG_OUT, {"preset": "llama3.1-70b"}), "sglang")  # type: ignore[operator]
    assert other.splitlines()[1].startswith("# llama3.1-70b is paraplan's preset name")
    paths = write_exports(result, ["vllm", "sglang", "trtllm", "dynamo"], tmp_path)
    assert [p.name for p in paths] == [t.filename for t in SERVING_TARGETS.values()]


def test_a_disaggregated_result_sizes_each_pool_by_its_own_memory() -> None:
    from paraplan.rules.serving import kv_fraction
    from paraplan.rules.serving_memory import pool_memories

    plan = {"mode": "disaggregated", "max_batch": 256, "max_num_tokens": 8192, "chunked_prefill": True}
    plan |= {"prefill": {"tp": 8, "pp": 1, "ep": 8, "dp_attention": False, "workers": 1}}
    plan |= {"decode": {"tp": 8, "pp": 1, "ep": 8, "dp_attention": True, "workers": 1}}
    result = _result(plan, {"preset": "deepseek-v3"})
    result["scenario"]["cluster"] = {"preset": "dgx-h200", "gpus": 16}
    result["scenario"]["workload"]["weights_precision"] = "fp8"
    text = paraplan.export(result, "sglang")  # type: ignore[operator]
    fractions = [
        line.split("--mem-fraction-static ")[1].split()[0]
        for line in text.splitlines()
        if "launch_server" in line
    ]
    wl = Workload(isl=1024, osl=512, isl_p90=2048, ttft_ms=2000, weights_precision="fp8", kv_precision="fp8")
    prefill = pool_memories(
        preset("deepseek-v3"),
        build_cluster("dgx-h200", gpus=16),
        ServingPlan(
            mode="disaggregated",
            prefill=WorkerPlan(tp=8, ep=8),
            decode=WorkerPlan(tp=8, ep=8, dp_attention=True),
            max_batch=256,
        ),
        wl,
        Engine("sglang"),
    )["prefill"]
    assert fractions == [f"{kv_fraction('sglang', prefill):g}", "0.854"]  # decode: the result's MEM
    assert fractions[0] != fractions[1]


def test_a_training_result_cannot_take_a_serving_target() -> None:
    with pytest.raises(ExportError, match="'vllm' launches a serving plan"):
        lookup("vllm")
