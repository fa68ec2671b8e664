"""Why this serving partition: what binds it (memory for the weights and the KV cache, the SLO,
the batch the KV cache holds) and what the runner-up loses, in a few lines of text. Every
figure is the cost model's (the predictions the solver compared)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from paraplan.cost.serving import ServingPlan, ServingPrediction, WorkerPlan

if TYPE_CHECKING:
    from paraplan.serving.instance import ServingInstance
    from paraplan.solver.serving import ServingSolution

__all__ = ["serving_summary", "explain_serving", "slo_miss_lines"]

_GIB = 2**30


def _worker(w: WorkerPlan) -> str:
    parts = [f"tp{w.tp}"]
    if w.pp > 1:
        parts.append(f"pp{w.pp}")
    if w.ep > 1:
        parts.append(f"ep{w.ep}")
    if w.dp_attention:
        parts.append("dp-attention")
    return " ".join(parts)


def serving_summary(plan: ServingPlan) -> str:
    """One line: ``4 x (tp2 ep2), max_batch 256`` or ``2P (tp4) + 1D (tp8 ep8), max_batch 128``."""
    if plan.mode == "disaggregated":
        assert plan.prefill is not None and plan.decode is not None
        return (
            f"{plan.prefill.workers}P ({_worker(plan.prefill)}) + {plan.decode.workers}D "
            f"({_worker(plan.decode)}), max_batch {plan.max_batch}"
        )
    w = WorkerPlan(tp=plan.tp, pp=plan.pp, ep=plan.ep, dp_attention=plan.dp_attention, workers=plan.replicas)
    return f"{plan.replicas} x ({_worker(w)}), max_batch {plan.max_batch}"


def _memory_line(inst: ServingInstance, pred: ServingPrediction) -> str:
    cap = inst.cluster.memory_capacity_bytes
    used = pred.weights_bytes + pred.kv_cache_bytes + pred.activation_bytes + pred.buffer_bytes
    return (
        f"memory per GPU: weights {pred.weights_bytes / _GIB:.1f} GiB, "
        f"KV cache {pred.kv_cache_bytes / _GIB:.1f} GiB "
        f"({pred.kv_cache_tokens:,} tokens per replica), activations {pred.activation_bytes / _GIB:.1f} GiB, "
        f"buffers {pred.buffer_bytes / _GIB:.1f} GiB of {cap / _GIB:.0f} GiB ({used / cap:.0%})"
    )


def _batch_line(inst: ServingInstance, plan: ServingPlan, pred: ServingPrediction) -> str:
    w = inst.workload
    per_request = w.isl + w.osl
    held = pred.kv_cache_tokens / per_request if per_request else 0.0
    binds = "the KV cache" if held <= min(plan.max_batch, pred.batch + 1) else "the load"
    if pred.batch >= plan.max_batch - 1e-9:
        binds = f"max_batch {plan.max_batch}"
    return (
        f"decode batch {pred.batch:.0f} per replica, set by {binds} (the KV cache holds {held:,.0f} "
        f"requests of {per_request:,.0f} tokens)"
    )


def _slo_line(inst: ServingInstance, pred: ServingPrediction) -> str:
    w = inst.workload
    pct = w.percentile
    ttft = pred.ttft_ms_p90 if pct >= 90 else pred.ttft_ms_p50
    tpot = pred.tpot_ms_p90 if pct >= 90 else pred.tpot_ms_p50
    parts = [f"TTFT p{pct} {ttft:,.0f} ms", f"TPOT p{pct} {tpot:.1f} ms"]
    limits = []
    if w.ttft_ms is not None:
        limits.append(f"TTFT <= {w.ttft_ms:g} ms")
    if w.tpot_ms is not None:
        limits.append(f"TPOT <= {w.tpot_ms:g} ms")
    slo = f" against the SLO {', '.join(limits)}" if limits else " (no SLO given)"
    return f"{', '.join(parts)}{slo}"


def slo_miss_lines(inst: ServingInstance, plan: ServingPlan, pred: ServingPrediction) -> list[str]:
    """What misses the SLO, by how much, the share of requests still within it (goodput over
    completions), and what to change: TPOT is one figure for every request of a replica (a
    smaller max_batch or wider tp shortens the step); a closed loop's TTFT is set by its first
    wave, the requests per replica x isl prompt tokens queued behind max_num_tokens-token steps
    (cost/serving_common.py ``wave_s``), so fewer requests per replica (or per prefill worker)
    or a looser slo.ttft_ms hold it. Empty when the SLO holds."""
    w = inst.workload
    pct = w.percentile
    ttft = pred.ttft_ms_p90 if pct >= 90 else pred.ttft_ms_p50
    tpot = pred.tpot_ms_p90 if pct >= 90 else pred.tpot_ms_p50
    share = pred.goodput_requests_per_s / pred.requests_per_s if pred.requests_per_s > 0 else 0.0
    lines = []
    if w.tpot_ms is not None and tpot > w.tpot_ms:
        lines.append(
            f"SLO not met: TPOT p{pct} {tpot:.1f} ms > slo.tpot_ms {w.tpot_ms:g} (no request within it); "
            "a smaller max_batch or a wider tp shortens the step"
        )
    if w.ttft_ms is not None and ttft > w.ttft_ms:
        fix = "a looser slo.ttft_ms"
        if w.concurrency is not None and w.request_rate is None:
            aggregated = plan.prefill is None
            workers = plan.replicas if plan.prefill is None else plan.prefill.workers
            per_worker = w.concurrency / workers
            steps = per_worker * w.isl / plan.max_num_tokens
            more = "replicas" if aggregated else "prefill workers"
            fix = (
                f"the closed loop's first wave sets it ({per_worker:,.0f} requests x {w.isl:,.0f} prompt "
                f"tokens = {steps:,.0f} steps of max_num_tokens {plan.max_num_tokens:,} per "
                f"{'replica' if aggregated else 'prefill worker'}); more {more} (fewer requests each) "
                f"or slo.ttft_ms >= {ttft:,.0f} hold it"
            )
        lines.append(
            f"SLO not met: TTFT p{pct} {ttft:,.0f} ms > slo.ttft_ms {w.ttft_ms:g} ({share:.0%} of requests "
            f"within it: goodput {pred.goodput_requests_per_s:,.2f} of {pred.requests_per_s:,.2f} req/s); "
            f"{fix}"
        )
    return lines


def explain_serving(
    inst: ServingInstance,
    plan: ServingPlan,
    pred: ServingPrediction,
    runner: ServingSolution | None,
    objective: str = "goodput_per_gpu",
) -> list[str]:
    lines = [
        f"plan: {serving_summary(plan)} on {pred.gpus} of {inst.cluster.num_devices} GPUs "
        f"({inst.engine.name}); {pred.output_tokens_per_s_per_gpu:,.0f} output tok/s per GPU, "
        f"goodput {pred.goodput_requests_per_s:,.2f} req/s",
        _memory_line(inst, pred),
        _batch_line(inst, plan, pred),
        _slo_line(inst, pred),
        *slo_miss_lines(inst, plan, pred),
    ]
    if plan.mode == "disaggregated":
        assert plan.prefill is not None and plan.decode is not None
        lines.append(
            f"prefill and decode run on separate pools ({plan.prefill.workers} x "
            f"{plan.prefill.tp * plan.prefill.pp} and {plan.decode.workers} x "
            f"{plan.decode.tp * plan.decode.pp} GPUs), their worker counts balancing "
            "the rate prefill admits against the rate decode completes"
        )
    if runner is not None:
        rp = runner.prediction
        unit = {"goodput_per_gpu": "req/s per GPU", "min_gpus": "GPUs", "min_ttft": "ms TTFT"}[objective]
        lines.append(
            f"runner-up: {serving_summary(runner.plan)} on {rp.gpus} GPUs: {runner.value:,.4g} {unit} "
            f"({rp.output_tokens_per_s_per_gpu:,.0f} tok/s per GPU, TPOT p50 {rp.tpot_ms_p50:.1f} ms, "
            f"TTFT p50 {rp.ttft_ms_p50:,.0f} ms)"
        )
    return lines
