"""The serving cost model (cost/serving.py): physics sanity, memory arithmetic, queueing limits,
refusals that name the field."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from paraplan.cost.kv import WorkerShape, kv_bytes_per_sequence, weights_bytes_per_gpu
from paraplan.cost.queueing import closed_loop_wait_s, finite_run_wait_s, md1_wait_s, wait_quantile_s
from paraplan.cost.serving import (
    Engine,
    ServingPlan,
    WorkerPlan,
    Workload,
    check_serving_plan,
    evaluate_serving,
    memory_budget,
)
from paraplan.cost.serving_step import StepInput, layer_groups, step_time
from paraplan.graph import build_graph, preset
from paraplan.hardware import build_cluster
from paraplan.hardware.serving import engine_memory, is_serial_pp_host, serving_fit

H100 = build_cluster("dgx-h100", nodes=1)
LLAMA8 = preset("llama3.1-8b")
LLAMA70 = preset("llama3.1-70b")


def _decode(spec, cluster, shape, batch, precision="bf16"):
    graph = build_graph(spec)
    w = {"bf16": 2.0, "fp8": 1.0}[precision]
    return step_time(
        graph,
        cluster,
        shape,
        StepInput(batch, 1024.0),
        w_bytes=w,
        weights_precision=precision,
        kv_bytes=2.0,
        fit=serving_fit(),
    )


def test_decode_at_batch_one_is_the_weight_read() -> None:
    # at batch 1 every GEMM streams its weights: gemm time = weight bytes / (HBM eff) + kernels
    graph = build_graph(LLAMA8)
    shape = WorkerShape()
    t = _decode(LLAMA8, H100, shape, 1)
    kernels = sum(len(ly.gemms) * n for ly, n in layer_groups(graph) if ly.gemms)
    overhead = kernels * serving_fit().graph_kernel_overhead_s
    embedding = LLAMA8.vocab * LLAMA8.hidden * 2.0  # looked up, not streamed
    streamed = weights_bytes_per_gpu(graph, shape, 2.0) - embedding
    bw = H100.accelerator.hbm_bytes_per_s * H100.efficiency.hbm
    assert t.gemm_s - overhead == pytest.approx(streamed / bw, rel=0.02)


def test_decode_time_follows_the_bytes_read() -> None:
    # fp8 weights halve the bytes a small-batch decode step streams
    shape = WorkerShape()
    bf16 = _decode(LLAMA70, H100, shape, 1)
    fp8 = _decode(LLAMA70, H100, shape, 1, "fp8")
    oh = serving_fit().graph_kernel_overhead_s * 7 * 80
    assert (fp8.gemm_s - oh) / (bf16.gemm_s - oh) == pytest.approx(0.5, rel=0.03)
    # and the decode step grows with the batch's KV reads, far less than the batch
    big = _decode(LLAMA70, H100, shape, 64)
    assert bf16.total_s < big.total_s < 8 * bf16.total_s


def test_tp_divides_the_weights_per_gpu() -> None:
    graph = build_graph(LLAMA70)
    one = weights_bytes_per_gpu(graph, WorkerShape(tp=1), 2.0)
    two = weights_bytes_per_gpu(graph, WorkerShape(tp=2), 2.0)
    eight = weights_bytes_per_gpu(graph, WorkerShape(tp=8), 2.0)
    assert one == pytest.approx(2.0 * graph.num_params, rel=1e-3)  # bf16, nothing replicated but norms
    assert two / one == pytest.approx(0.5, rel=0.01)
    assert eight / one == pytest.approx(0.125, rel=0.01)
    assert weights_bytes_per_gpu(graph, WorkerShape(tp=4, pp=2), 2.0) == pytest.approx(eight, rel=1e-9)


def test_kv_capacity_by_hand_for_llama_3_1_8b_on_h100_vllm() -> None:
    # Llama 3.1 8B: 32 layers x K and V x 8 KV heads x 128 dims x 2 bytes = 131,072 bytes a token
    graph = build_graph(LLAMA8)
    per_token = 32 * 2 * 8 * 128 * 2
    assert kv_bytes_per_sequence(graph, WorkerShape(), 2.0, 1000.0) == pytest.approx(1000 * per_token)
    w = Workload(isl=1000, osl=1000)
    mem = engine_memory("vllm")
    b = memory_budget(graph, H100, WorkerShape(), w, mem, 8192, 256)
    # vLLM: 0.9 x total - weights - activations - buffers
    hbm = 79.65 * 2**30
    weights = 2.0 * graph.num_params
    expected_kv = 0.9 * hbm - weights - b.activation_bytes - 1.5 * 2**30
    assert b.weights_bytes == pytest.approx(weights, rel=1e-6)
    assert b.kv_cache_bytes == pytest.approx(expected_kv, rel=1e-6)
    assert b.kv_cache_tokens == int(expected_kv / per_token)
    # a running sequence holds isl + osl / 2 tokens on average under vLLM's on-demand blocks
    assert b.max_sequences == pytest.approx(expected_kv / (1500 * per_token), rel=1e-6)


def test_gqa_kv_heads_replicate_past_their_count_and_mla_does_not_split() -> None:
    graph = build_graph(LLAMA70)  # 8 KV heads
    at8 = kv_bytes_per_sequence(graph, WorkerShape(tp=8), 2.0, 100.0)
    at16 = kv_bytes_per_sequence(graph, WorkerShape(tp=16), 2.0, 100.0)
    assert at16 == pytest.approx(at8)  # one head per GPU either way
    ds = build_graph(preset("deepseek-v3"))
    per_token = 61 * (512 + 64) * 2  # the latent and the rotary key, every layer
    for tp in (1, 8):
        assert kv_bytes_per_sequence(ds, WorkerShape(tp=tp), 2.0, 1.0) == pytest.approx(per_token)
    # attention DP: each rank holds its own sequences, so the worker holds tp times as many
    cluster = build_cluster("dgx-h200", nodes=1)
    w = Workload(isl=1024, osl=1024, weights_precision="fp8")
    mem = engine_memory("sglang")
    tp8 = memory_budget(ds, cluster, WorkerShape(tp=8, ep=8), w, mem, 8192, 256)
    dp8 = memory_budget(ds, cluster, WorkerShape(tp=8, ep=8, dp_attention=True), w, mem, 8192, 256)
    assert dp8.max_sequences > 4 * tp8.max_sequences


def test_sliding_window_layers_hold_at_most_the_window() -> None:
    graph = build_graph(preset("gpt-oss-120b"))  # every other layer a 128-token window
    short = kv_bytes_per_sequence(graph, WorkerShape(), 1.0, 128.0)
    long = kv_bytes_per_sequence(graph, WorkerShape(), 1.0, 128.0 * 100)
    assert long / short == pytest.approx((100 + 1) / 2, rel=0.01)


def test_queueing_limits() -> None:
    assert md1_wait_s(0.0, 10.0) == 0.0
    waits = [md1_wait_s(r, 10.0) for r in (1.0, 5.0, 9.0, 9.9)]
    assert waits == sorted(waits) and waits[-1] > 40 * waits[0]
    # M/D/1 at rho = 0.5: rho / (2 mu (1 - rho)) = 0.5 / (2 * 10 * 0.5) = 0.05 s
    assert md1_wait_s(5.0, 10.0) == pytest.approx(0.05)
    assert wait_quantile_s(0.05, 0.05, 0.9) == 0.0  # light load: the 90th percentile waits for nothing
    assert closed_loop_wait_s(64, 64, 10.0) == 0.0
    assert closed_loop_wait_s(128, 64, 10.0) == pytest.approx(6.4)  # Little: (C - B) / X
    # a finite burst: n requests at once, slots admitted, the rest drained at mu
    assert finite_run_wait_s(math.inf, 10.0, 100, 0) == pytest.approx(100 / 20)
    assert finite_run_wait_s(math.inf, 10.0, 100, 100) == 0.0


def test_ttft_is_a_queueing_result() -> None:
    plan = ServingPlan(tp=8, max_batch=256)

    def at(rate: float):
        w = Workload(isl=1024, osl=256, request_rate=rate)
        return evaluate_serving(LLAMA70, H100, plan, w, Engine("vllm"))

    light, mid, heavy = at(0.1), at(4.0), at(40.0)
    assert light.ttft_ms_mean < mid.ttft_ms_mean < heavy.ttft_ms_mean
    assert light.tpot_ms_p50 < mid.tpot_ms_p50
    assert not light.overloaded and heavy.overloaded
    # light load: the prompt's own prefill and half a step; throughput = offered rate
    assert light.requests_per_s == pytest.approx(0.1, rel=1e-3)
    assert light.ttft_ms_p90 >= light.ttft_ms_p50


def test_closed_loop_concurrency_past_the_batch_waits() -> None:
    plan = ServingPlan(tp=8, max_batch=64)
    w64 = Workload(isl=512, osl=512, concurrency=64)
    w256 = Workload(isl=512, osl=512, concurrency=256)
    a = evaluate_serving(LLAMA70, H100, plan, w64, Engine("vllm"))
    b = evaluate_serving(LLAMA70, H100, plan, w256, Engine("vllm"))
    assert a.batch == b.batch == 64
    assert b.output_tokens_per_s == pytest.approx(a.output_tokens_per_s, rel=1e-6)
    # Little's law: 192 more requests wait (C - B) / X
    assert b.ttft_ms_mean - a.ttft_ms_mean == pytest.approx(192 / b.requests_per_s * 1e3, rel=1e-6)


def _closed(engine: str, share: float, isl: float = 1024.0):
    w = Workload(isl=isl, osl=1024, concurrency=32)
    fit = replace(serving_fit(), closed_loop_burst=share)
    return evaluate_serving(LLAMA70, H100, ServingPlan(tp=8, max_batch=64), w, Engine(engine), fit)


def test_closed_loop_steady_state_returns_in_cohorts() -> None:
    # issue 23: past the first wave a mixing engine (vLLM) gets each cohort back at once: TTFT =
    # front + 1/2 a decode-only round + one round of B decode tokens and q = min(chunk, B isl)
    # prompt tokens (chunk = max_num_tokens - B); TPOT the decode-only round
    pred = _closed("vllm", 0.0)
    batch = pred.batch
    assert batch == 32
    q = min(8192.0 - batch, batch * 1024.0)
    carried = step_time(
        build_graph(LLAMA70),
        H100,
        WorkerShape(tp=8),
        StepInput(batch, 1024.0 + 512.0, q, 1024.0, q / 1024.0),
        w_bytes=2.0,
        weights_precision="bf16",
        kv_bytes=2.0,
        fit=serving_fit(),
    ).total_s
    front = serving_fit().ttft_overhead_s
    assert pred.ttft_ms_mean == pytest.approx((front + 0.5 * pred.tpot_ms_mean * 1e-3 + carried) * 1e3)
    # the first wave (share 1) queues 32 x 1024 prompt tokens over 8,192-token steps: longer
    assert _closed("vllm", 1.0).ttft_ms_mean > 1.5 * pred.ttft_ms_mean
    assert _closed("vllm", 1.0).tpot_ms_mean == pytest.approx(pred.tpot_ms_mean)


def test_prefill_first_engine_sees_the_wave_every_round() -> None:
    # issue 23: SGLang runs a waiting prefill batch before decoding (hardware/serving.py
    # is_prefill_first): a closed loop's wave decodes and comes back together, so its TTFT is the
    # wave's whatever the fitted share; a mixing engine at share 1 sees the same wave
    sgl0, sgl1, vllm1 = _closed("sglang", 0.0), _closed("sglang", 1.0), _closed("vllm", 1.0)
    assert sgl0.batch == sgl1.batch == vllm1.batch == 32
    assert sgl0.ttft_ms_mean == pytest.approx(sgl1.ttft_ms_mean)
    assert sgl0.ttft_ms_mean == pytest.approx(vllm1.ttft_ms_mean)
    assert _closed("vllm", 0.0).ttft_ms_mean < sgl0.ttft_ms_mean


def test_replicas_scale_throughput_and_quantised_weights_help() -> None:
    cluster = build_cluster("dgx-h100", nodes=2)
    w = Workload(isl=1024, osl=1024)
    one = evaluate_serving(LLAMA70, cluster, ServingPlan(tp=8), w, Engine("vllm"))
    two = evaluate_serving(LLAMA70, cluster, ServingPlan(tp=8, replicas=2), w, Engine("vllm"))
    assert two.output_tokens_per_s == pytest.approx(2 * one.output_tokens_per_s)
    assert two.output_tokens_per_s_per_gpu == pytest.approx(one.output_tokens_per_s_per_gpu)
    fp8 = evaluate_serving(
        LLAMA70,
        cluster,
        ServingPlan(tp=8),
        Workload(isl=1024, osl=1024, weights_precision="fp8"),
        Engine("vllm"),
    )
    # the GEMM weights halve; the embedding and LM head stay bf16 (1.05 GB of 17.6 per GPU)
    table = 2 * LLAMA70.vocab * LLAMA70.hidden * 2.0 / 8
    assert fp8.weights_bytes == pytest.approx((one.weights_bytes - table) / 2 + table, rel=0.005)
    assert fp8.output_tokens_per_s > one.output_tokens_per_s


def test_disaggregated_kv_transfer_takes_the_tier_it_crosses() -> None:
    spec = preset("deepseek-v3")
    w = Workload(isl=4096, osl=512, concurrency=64, weights_precision="nvfp4", kv_precision="fp8")
    plan = ServingPlan(
        mode="disaggregated",
        prefill=WorkerPlan(tp=8, ep=8, dp_attention=True),
        decode=WorkerPlan(tp=8, ep=8, dp_attention=True),
    )
    rack = evaluate_serving(spec, build_cluster("gb200-nvl72", nodes=1), plan, w, Engine("sglang"))
    nodes = evaluate_serving(spec, build_cluster("dgx-b200", nodes=2), plan, w, Engine("sglang"))
    assert rack.gpus == nodes.gpus == 16
    assert rack.breakdown["kv_transfer_s"] * 5 < nodes.breakdown["kv_transfer_s"]
    assert rack.fits and nodes.fits


def test_model_that_does_not_fit_says_so() -> None:
    one_gpu = build_cluster("dgx-h100", gpus=1)
    p = evaluate_serving(LLAMA70, one_gpu, ServingPlan(), Workload(isl=128, osl=128), Engine("vllm"))
    assert not p.fits and "GiB" in p.reasons[0]


@pytest.mark.parametrize(
    ("plan", "field"),
    [
        (ServingPlan(tp=8, ep=3), "plan.ep"),
        (ServingPlan(tp=3), "plan.tp"),
        (ServingPlan(tp=8, replicas=2), "GPUs"),
        (ServingPlan(mode="disaggregated"), "plan.prefill"),
        (ServingPlan(max_batch=0), "plan.max_batch"),
        (ServingPlan(prefill=WorkerPlan()), "plan.prefill"),
    ],
)
def test_refusals_name_the_field(plan: ServingPlan, field: str) -> None:
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        check_serving_plan(preset("mixtral-8x7b"), H100, plan)


@pytest.mark.parametrize(
    ("workload", "engine", "field"),
    [
        (Workload(isl=10, osl=10, weights_precision="fp3"), Engine(), "workload.weights_precision"),
        (Workload(isl=10, osl=10, kv_precision="int2"), Engine(), "workload.kv_precision"),
        (Workload(isl=10, osl=10, concurrency=4, request_rate=1.0), Engine(), "workload.concurrency"),
        (Workload(isl=0, osl=10), Engine(), "workload.isl"),
        (Workload(isl=10, osl=10), Engine(name="tgi"), "engine.name"),  # type: ignore[arg-type]
        (Workload(isl=10, osl=10), Engine(kv_fraction=1.5), "engine.kv_fraction"),
    ],
)
def test_bad_workload_and_engine_name_the_field(workload: Workload, engine: Engine, field: str) -> None:
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        evaluate_serving(LLAMA8, H100, ServingPlan(), workload, engine)


def test_the_scheduler_hides_under_the_gpu_step_until_it_is_longer() -> None:
    fit = serving_fit()
    small = _decode(LLAMA8, H100, WorkerShape(), 1)
    assert small.host_s == pytest.approx(fit.step_overhead_s)  # one sequence: hidden
    huge = _decode(LLAMA8, H100, WorkerShape(), 20000)
    gpu = huge.total_s - huge.host_s
    assert huge.host_s == pytest.approx(fit.step_overhead_s + max(0.0, 20000 * fit.per_sequence_s - gpu))


def test_trtllm_pipeline_parallel_steps_show_the_whole_scheduler_time() -> None:
    # TensorRT-LLM's PyTorch executor has no overlap loop under pp > 1 (is_serial_pp_host): the
    # per-sequence host time adds to the step, host = step_overhead + per_sequence x sequences;
    # without pp, or with another engine, it hides under the GPU step
    fit = serving_fit()
    graph = build_graph(LLAMA70)

    def step(pp: int, serial: bool):
        return step_time(
            graph,
            H100,
            WorkerShape(tp=1, pp=pp),
            StepInput(64.0, 1024.0),
            w_bytes=1.0,
            weights_precision="fp8",
            kv_bytes=1.0,
            fit=fit,
            serial_pp_host=serial,
        )

    assert step(2, True).host_s == pytest.approx(fit.step_overhead_s + 64 * fit.per_sequence_s)
    assert step(2, False).host_s == pytest.approx(fit.step_overhead_s)  # 64 x 38.5 us < the GPU step
    assert step(1, True).host_s == pytest.approx(fit.step_overhead_s)
    assert is_serial_pp_host("trtllm", "1.0") and is_serial_pp_host("trtllm", None)
    assert not is_serial_pp_host("trtllm", "0.17.0") and not is_serial_pp_host("vllm", "0.11")


@pytest.mark.parametrize("rate", [4.0, 40.0])
@pytest.mark.parametrize("mode", ["aggregated", "disaggregated"])
def test_the_p90_keys_hold_the_90th_percentile_whatever_the_slo_percentile(rate: float, mode: str) -> None:
    # the SLO percentile picks which prediction the SLO is judged on, never what ttft_ms.p90 means:
    # an SLO at the median leaves every predicted key as it is at p90
    if mode == "aggregated":
        plan = ServingPlan(tp=8, max_batch=256)
    else:
        plan = ServingPlan(mode="disaggregated", prefill=WorkerPlan(tp=4), decode=WorkerPlan(tp=4))

    def at(percentile: int):
        w = Workload(isl=1024, osl=256, isl_p90=1800, request_rate=rate, percentile=percentile, ttft_ms=1e9)
        return evaluate_serving(LLAMA70, H100, plan, w, Engine("vllm"))

    p50, p90 = at(50), at(90)
    keys = ("ttft_ms_p50", "ttft_ms_p90", "tpot_ms_p50", "tpot_ms_p90", "ttft_ms_mean")
    assert {k: getattr(p50, k) for k in keys} == {k: getattr(p90, k) for k in keys}
    assert p90.ttft_ms_p90 > p90.ttft_ms_p50  # a queue and longer p90 prompts: the keys differ


def test_goodput_judges_the_slo_at_its_own_percentile() -> None:
    # a TTFT target between the predicted median and 90th percentile: met at p50, missed at p90
    plan = ServingPlan(tp=8, max_batch=256)
    base = Workload(isl=1024, osl=256, isl_p90=1800, request_rate=6.0)
    pred = evaluate_serving(LLAMA70, H100, plan, base, Engine("vllm"))
    target = 0.5 * (pred.ttft_ms_p50 + pred.ttft_ms_p90)

    def goodput(percentile: int) -> float:
        w = Workload(**{**base.__dict__, "ttft_ms": target, "percentile": percentile})
        return evaluate_serving(LLAMA70, H100, plan, w, Engine("vllm")).goodput_requests_per_s

    assert goodput(50) == pytest.approx(pred.requests_per_s)
    assert goodput(90) < pred.requests_per_s


def test_the_peer_all_reduce_kernels_run_over_nvlink_not_pcie() -> None:
    # the engines' one-shot / two-shot kernels read peers' buffers over NVLink; over PCIe the
    # all-reduce is NCCL's ring (cost/serving_comm.py PEER_ALLREDUCE_TIERS)
    from paraplan.cost.comm import SubAxis, allreduce_s, span_of
    from paraplan.cost.serving_comm import ll_ring_allreduce_s, oneshot_allreduce_s

    decode_bytes = 64 * 8192 * 2.0  # 64 tokens of a 70B's hidden state, bf16
    pcie = build_cluster("l40s-8gpu-pcie", nodes=1)
    ring = min(
        allreduce_s(span_of(pcie, [SubAxis(1, 8)]), decode_bytes), ll_ring_allreduce_s(pcie, 8, decode_bytes)
    )
    assert oneshot_allreduce_s(pcie, 8, decode_bytes) == pytest.approx(ring)
    nvl_ring = min(
        allreduce_s(span_of(H100, [SubAxis(1, 8)]), decode_bytes), ll_ring_allreduce_s(H100, 8, decode_bytes)
    )
    assert oneshot_allreduce_s(H100, 8, decode_bytes) < nvl_ring  # the one-shot kernel wins there
