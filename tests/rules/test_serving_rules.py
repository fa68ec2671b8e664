"""The serving engines' rules (rules/serving.py): which engine runs which setting, refusals that name
the field, the value and the engines that run it, and each engine's KV memory knob (hand-checked)."""

from __future__ import annotations

import pytest
from paraplan.cost.kv import WorkerShape
from paraplan.cost.serving import (
    Engine,
    ServingPlan,
    WorkerPlan,
    Workload,
    evaluate_serving,
    memory_budget,
)
from paraplan.graph import build_graph, preset
from paraplan.hardware import build_cluster
from paraplan.hardware.serving import engine_memory
from paraplan.rules.serving import (
    GpuMemory,
    check_engine,
    engine_refusals,
    engines_running,
    kv_dtype,
    kv_fraction,
    kv_fractions,
    plan_workers,
    rank_limit,
)

GIB = 2**30
H200 = build_cluster("dgx-h200", nodes=1)
H100 = build_cluster("dgx-h100", nodes=1)
A100 = build_cluster("dgx-a100-80gb", nodes=1)
B200 = build_cluster("dgx-b200", nodes=1)
MI300 = build_cluster("mi300x", nodes=1)
BF16 = Workload(isl=1024, osl=1024)


def _messages(engine: str, plan: ServingPlan, workload: Workload, cluster, **kw) -> list[str]:
    return [r.message for r in engine_refusals(engine, plan, workload, cluster, **kw)]


# ------------------------------------------------------------------------------------ refusals


def test_a_plain_tp_plan_runs_on_every_engine() -> None:
    assert engines_running(ServingPlan(tp=8), BF16, H200) == ("vllm", "sglang", "trtllm")


def test_fp4_weights_on_hopper_are_refused_by_trtllm_only() -> None:
    fp4 = Workload(isl=1024, osl=1024, weights_precision="nvfp4")
    (msg,) = _messages("trtllm", ServingPlan(tp=8), fp4, H200)
    assert msg == (
        "workload.weights_precision=nvfp4: trtllm 1.2.1 runs nvfp4 weights from compute capability "
        "10.0 up (NVIDIA H200 SXM 141GB is 9.0, hopper); vllm 0.33.0, sglang 0.5.23 run it"
    )
    assert engines_running(ServingPlan(tp=8), fp4, H200) == ("vllm", "sglang")
    assert engines_running(ServingPlan(tp=8), fp4, B200) == ("vllm", "sglang", "trtllm")


def test_fp8_weights_on_ampere_run_on_vllm_and_sglang_not_trtllm() -> None:
    fp8 = Workload(isl=1024, osl=1024, weights_precision="fp8")
    assert engines_running(ServingPlan(tp=8), fp8, A100) == ("vllm", "sglang")
    assert "compute capability 8.9 up" in _messages("trtllm", ServingPlan(tp=8), fp8, A100)[0]
    assert engines_running(ServingPlan(tp=8), fp8, H100) == ("vllm", "sglang", "trtllm")


def test_trtllm_refuses_amd_and_names_the_engines_that_run_it() -> None:
    (msg,) = _messages("trtllm", ServingPlan(tp=8), BF16, MI300)
    assert msg.startswith("cluster.accelerator=mi300x: trtllm 1.2.1 runs on NVIDIA GPUs only")
    assert msg.endswith("vllm 0.33.0, sglang 0.5.23 run it")


def test_mxfp4_on_amd_runs_on_vllm_alone() -> None:
    mx = Workload(isl=1024, osl=1024, weights_precision="mxfp4")
    (msg,) = _messages("sglang", ServingPlan(tp=8), mx, MI300)
    assert msg.endswith("; vllm 0.33.0 runs it")


def test_vllm_cannot_split_experts_into_fewer_groups_than_its_ranks() -> None:
    plan = ServingPlan(tp=8, ep=4)
    (msg,) = _messages("vllm", plan, BF16, H200)
    assert msg.startswith("plan.ep=4: vllm 0.33.0 spreads experts over all 8 ranks")
    assert msg.endswith("sglang 0.5.23, trtllm 1.2.1 run it")
    for ep in (1, 8):
        assert engines_running(ServingPlan(tp=8, ep=ep), BF16, H200) == ("vllm", "sglang", "trtllm")


def test_disaggregated_refusals_name_the_pool() -> None:
    plan = ServingPlan(
        mode="disaggregated", prefill=WorkerPlan(tp=8, ep=2), decode=WorkerPlan(tp=8, ep=8, workers=2)
    )
    (refusal,) = engine_refusals("vllm", plan, BF16, H200)
    assert refusal.field == "plan.prefill.ep" and refusal.value == 2


def test_vllm_scheduler_rules_are_per_rank() -> None:
    # vLLM: max_num_batched_tokens >= max_num_seqs on each DP rank (SchedulerConfig)
    few = ServingPlan(tp=8, max_batch=512, max_num_tokens=256)
    (msg,) = _messages("vllm", few, BF16, H200)
    assert msg.startswith("plan.max_num_tokens=256: vllm 0.33.0 needs --max-num-batched-tokens (256)")
    # without chunking a whole prompt fits one step of one rank: 8192 / 8 DP ranks < 4096
    whole = ServingPlan(tp=8, ep=8, dp_attention=True, max_batch=64, chunked_prefill=False)
    (msg,) = _messages("vllm", whole, BF16, H200, max_model_len=4096)
    assert "(1024 on each rank) must reach --max-model-len (4096)" in msg
    assert msg.endswith("sglang 0.5.23, trtllm 1.2.1 run it")
    assert not _messages("vllm", whole, BF16, H200, max_model_len=1024)


def test_kv_dtype_names_each_engines_spelling() -> None:
    assert [kv_dtype(e, "fp8") for e in ("vllm", "sglang", "trtllm")] == ["fp8", "fp8_e4m3", "fp8"]
    assert kv_dtype("vllm", "bf16") == "auto"
    fp4_kv = Workload(isl=1024, osl=1024, kv_precision="nvfp4")
    (msg,) = _messages("vllm", ServingPlan(tp=8), fp4_kv, B200)
    assert msg.startswith("workload.kv_precision=nvfp4: vllm 0.33.0 has no nvfp4 KV-cache dtype")
    assert msg.endswith("sglang 0.5.23, trtllm 1.2.1 run it")


def test_check_engine_raises_every_refusal_and_the_expert_count() -> None:
    spec = preset("qwen3-30b-a3b")  # 128 experts
    plan = ServingPlan(tp=8, ep=4)
    with pytest.raises(ValueError) as e:
        check_engine("vllm", plan, Workload(isl=1, osl=1, weights_precision="nvfp4"), A100, spec)
    assert "plan.ep=4" in str(e.value)
    with pytest.raises(ValueError, match="ep must divide the model's 128 experts"):
        check_engine("sglang", ServingPlan(tp=6, ep=6), BF16, H200, spec)
    with pytest.raises(ValueError, match="engine.name='tgi'"):
        engine_refusals("tgi", plan, BF16, H200)


def test_plan_workers_and_rank_limits() -> None:
    plan = ServingPlan(
        mode="disaggregated",
        prefill=WorkerPlan(tp=4, workers=3),
        decode=WorkerPlan(tp=8, ep=8, dp_attention=True, workers=2),
        max_batch=300,
    )
    p, d = plan_workers(plan)
    assert (p.role, p.count, p.gpus, d.role, d.count, d.gpus) == ("prefill", 3, 4, "decode", 2, 8)
    assert rank_limit(300, p) == 300 and rank_limit(300, d) == 38  # ceil(300 / 8)


# ---------------------------------------------------------------------------- memory fractions

# Hand-checked: an H200 reports 140.4 GiB; weights 70, KV 50, activations 5, buffers 1.5 GiB.
MEM = GpuMemory(70 * GIB, 50 * GIB, 5 * GIB, 1.5 * GIB, 140.4 * GIB)


def test_fractions_by_hand() -> None:
    # vLLM: (70 + 50 + 5 + 1.5) / 140.4 = 0.90099 -> 0.900
    assert kv_fraction("vllm", MEM) == 0.900
    # SGLang: (70 + 50) / 140.4 = 0.85470 -> 0.854
    assert kv_fraction("sglang", MEM) == 0.854
    # TRT-LLM: 50 / (140.4 - 70 - 5 - 1.5) = 50 / 63.9 = 0.78247 -> 0.782
    assert kv_fraction("trtllm", MEM) == 0.782
    assert kv_fractions(MEM) == {"vllm": 0.9, "sglang": 0.854, "trtllm": 0.782}


def test_fractions_round_down_never_up() -> None:
    # 0.89999... of total stays 0.899: rounding up would hand the engine memory the plan did not count
    mem = GpuMemory(0.0, 0.8999 * 100 * GIB, 0.0, 0.0, 100 * GIB)
    assert kv_fraction("vllm", mem) == 0.899


def test_fractions_refuse_a_plan_that_does_not_fit() -> None:
    with pytest.raises(
        ValueError, match=r"predicted memory per GPU 150\.00 GiB .* exceeds the GPU's 140\.40 GiB"
    ):
        kv_fraction("vllm", GpuMemory(90 * GIB, 50 * GIB, 8 * GIB, 2 * GIB, 140.4 * GIB))
    with pytest.raises(ValueError, match="leaves no KV cache"):
        kv_fraction("sglang", GpuMemory(90 * GIB, 0.0, 8 * GIB, 2 * GIB, 140.4 * GIB))


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_fraction_is_the_inverse_of_the_cost_models_memory_rule(engine: str) -> None:
    # the knob written for a prediction, fed back into the cost model's memory budget, gives the
    # predicted KV cache back (to the 0.001 x total that rounding down gives away)
    spec, cluster = preset("llama3.1-70b"), H200
    plan = ServingPlan(tp=4, max_batch=128, max_num_tokens=8192)
    workload = Workload(isl=2048, osl=512, weights_precision="fp8")
    pred = evaluate_serving(spec, cluster, plan, workload, Engine(engine))
    mem = GpuMemory(
        pred.weights_bytes,
        pred.kv_cache_bytes,
        pred.activation_bytes,
        pred.buffer_bytes,
        cluster.memory_capacity_bytes,
    )
    knob = kv_fraction(engine, mem)
    rule = engine_memory(engine)
    again = memory_budget(
        build_graph(spec),
        cluster,
        WorkerShape(tp=4),
        workload,
        type(rule)(
            name=rule.name,
            kv_fraction=knob,
            kv_fraction_of=rule.kv_fraction_of,
            kv_reserved_output=rule.kv_reserved_output,
            buffer_bytes=rule.buffer_bytes,
        ),
        plan.max_num_tokens,
        plan.max_batch,
    )
    assert pred.kv_cache_bytes > 0
    assert again.kv_cache_bytes <= pred.kv_cache_bytes + 1.0
    assert again.kv_cache_bytes >= pred.kv_cache_bytes - 0.0011 * cluster.memory_capacity_bytes


def test_int8_runs_everywhere_on_ampere_and_an_unknown_format_nowhere() -> None:
    int8 = Workload(isl=1024, osl=1024, weights_precision="int8")
    assert engines_running(ServingPlan(tp=8), int8, A100) == ("vllm", "sglang", "trtllm")
    int2 = Workload(isl=1024, osl=1024, weights_precision="int2")
    (msg,) = _messages("sglang", ServingPlan(tp=8), int2, H200)
    assert (
        msg
        == "workload.weights_precision=int2: sglang 0.5.23 has no int2 weights format; no engine here runs it"
    )


def test_pool_memories_give_the_predicted_decode_pool_and_the_prefill_pools_own() -> None:
    from paraplan.rules.serving_memory import pool_memories

    spec, cluster = preset("llama3.1-70b"), build_cluster("dgx-h200", nodes=2)
    plan = ServingPlan(
        mode="disaggregated",
        prefill=WorkerPlan(tp=2, workers=2),
        decode=WorkerPlan(tp=4, workers=3),
        max_batch=256,
    )
    workload = Workload(isl=4096, osl=512, weights_precision="fp8", kv_precision="fp8")
    pred = evaluate_serving(spec, cluster, plan, workload, Engine("vllm"))
    pools = pool_memories(spec, cluster, plan, workload, Engine("vllm"))
    d, p = pools["decode"], pools["prefill"]
    assert (d.weights_bytes, d.kv_cache_bytes, d.activation_bytes) == (
        pred.weights_bytes,
        pred.kv_cache_bytes,
        pred.activation_bytes,
    )
    assert p.weights_bytes == pytest.approx(2 * d.weights_bytes, rel=0.05)  # tp 2 holds twice tp 4's
    agg = pool_memories(spec, cluster, ServingPlan(tp=4), workload, Engine("vllm"))["aggregated"]
    one = evaluate_serving(spec, cluster, ServingPlan(tp=4), workload, Engine("vllm"))
    assert agg.kv_cache_bytes == one.kv_cache_bytes
