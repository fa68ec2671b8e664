"""Serving cost model (issue 23): TTFT, TPOT, throughput and memory of a serving plan.

One model for evaluate, the solver and the exports. The physics of one engine step is
cost/serving_step.py, memory per GPU cost/kv.py, queueing cost/queueing.py; this module holds the
public types (the scenario's ``workload`` / ``engine`` / ``plan`` and the result's ``predicted``,
docs: /work/notes/serving_contract.md) and puts the pieces together:

Aggregated (continuous batching, mean field). A replica runs ``B`` sequences at once, B =
min(max_batch, concurrency / replicas, KV capacity / tokens a sequence holds); its ``pp``
micro-batches of B / pp sequences each advance one token every tau = pp x t_stage, where the
step mixes the decode tokens with the prefill tokens of the requests that replace finished ones:
B isl / osl prompt tokens per round of B tokens (each request brings isl prompt tokens per osl
output tokens; Sarathi-Serve, Agrawal et al. OSDI'24, Sec. 3). Output rate B / tau, TPOT = tau
(the mean inter-token latency includes the prefill chunks mixed into decode steps).
TTFT = queue wait + (1/2 + max(1, isl / chunk)) tau: half a step until the next step starts, then
the prompt's chunks of ``max_num_tokens - B`` tokens.
Queue wait: closed loop (``concurrency``), the requests beyond B wait (C - B) / X by Little's law;
open loop (``request_rate``), B solves rate x osl = B / tau(B) and the prompt server (the chunk
budget) is an M/D/1 queue (cost/queueing.py); at or past capacity the wait is that of utilisation
OVERLOAD_RHO and ``overloaded`` is set.

Disaggregated (DistServe, Zhong et al. OSDI'24; Splitwise, Patel et al. ISCA'24): prefill workers
run prompt-only steps of up to ``max_num_tokens`` tokens; the KV cache of each prompt moves to a
decode worker over the link tier the two pools' span crosses (cost/comm.py ``p2p_s``, every GPU
sending its shard); decode workers run decode-only steps. Throughput is the lesser of the two
pools' request rates (integer workers, no fixed factors); TTFT = prefill wait + prefill + transfer.

Percentiles: the p90 prompt / output lengths (``isl_p90`` / ``osl_p90``) set the p90 service
times; the queue wait's p90 is the exponential-tail quantile of cost/queueing.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from math import floor

from paraplan.cost.comm import p2p_s
from paraplan.cost.kv import WorkerShape, kv_bytes_per_element, kv_bytes_per_sequence, weight_bytes_per_param
from paraplan.cost.queueing import OVERLOAD_RHO, closed_loop_wait_s, md1_wait_s, wait_quantile_s
from paraplan.cost.serving_memory import MemoryBudget, memory_budget
from paraplan.cost.serving_step import StepInput, step_time
from paraplan.cost.serving_types import (
    Engine,
    EngineName,
    ServingMode,
    ServingPlan,
    ServingPrediction,
    WorkerPlan,
    Workload,
    check_serving_plan,
    check_workload,
)
from paraplan.graph import LayerGraph, ModelSpec, build_graph
from paraplan.hardware import Cluster
from paraplan.hardware.serving import EngineMemory, ServingFit, engine_memory, serving_fit

__all__ = [
    "ServingMode",
    "EngineName",
    "Workload",
    "Engine",
    "WorkerPlan",
    "ServingPlan",
    "ServingPrediction",
    "MemoryBudget",
    "evaluate_serving",
    "check_serving_plan",
    "check_workload",
    "memory_budget",
]


@cache
def _graph(spec: ModelSpec) -> LayerGraph:
    return build_graph(spec)


@dataclass(frozen=True, slots=True)
class _Ctx:
    graph: LayerGraph
    cluster: Cluster
    workload: Workload
    fit: ServingFit
    w_bytes: float
    kv_bytes: float


def _stage_s(c: _Ctx, shape: WorkerShape, x: StepInput) -> float:
    return step_time(
        c.graph,
        c.cluster,
        shape,
        x,
        w_bytes=c.w_bytes,
        weights_precision=c.workload.weights_precision,
        kv_bytes=c.kv_bytes,
        fit=c.fit,
    ).total_s


def _round_s(c: _Ctx, shape: WorkerShape, batch: float, isl: float, osl: float, mixed: bool) -> float:
    """tau: time for every one of ``batch`` sequences of a worker to gain a token (pp x the step
    of one micro-batch; with ``mixed`` the prompts replacing finished requests ride along)."""
    micro = max(batch, 1e-9) / shape.pp
    prefill = micro * isl / osl if mixed else 0.0
    x = StepInput(micro, isl + osl / 2.0, prefill, isl, micro / osl if mixed else 0.0)
    return shape.pp * _stage_s(c, shape, x)


def _batch_at_rate(
    c: _Ctx, shape: WorkerShape, rate: float, cap: float, isl: float, osl: float, mixed: bool
) -> float:
    """Batch B <= cap with B / tau(B) = rate x osl (tokens/s demanded of one worker), by bisection
    (B / tau(B) rises with B); cap when the rate is beyond it."""
    demand = rate * osl
    if cap / _round_s(c, shape, cap, isl, osl, mixed) <= demand:
        return cap
    lo, hi = 0.0, cap
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        if mid / _round_s(c, shape, mid, isl, osl, mixed) < demand:
            lo = mid
        else:
            hi = mid
    return max(hi, 1e-6)


def _shape(tp: int, pp: int, ep: int, dp_attention: bool) -> WorkerShape:
    return WorkerShape(tp=tp, pp=pp, ep=ep, dp_attention=dp_attention)


def evaluate_serving(
    spec: ModelSpec,
    cluster: Cluster,
    plan: ServingPlan,
    workload: Workload,
    engine: Engine,
    fit: ServingFit | None = None,
) -> ServingPrediction:
    """Predicted latency, throughput and memory of serving ``spec`` on ``cluster`` with ``plan``
    under ``workload`` (module docstring). ``fit`` overrides hardware/data/serving.yaml's fitted
    parameters (the fidelity benchmark's cross-validation)."""
    check_serving_plan(spec, cluster, plan)
    check_workload(workload)
    graph = _graph(spec)
    ctx = _Ctx(
        graph,
        cluster,
        workload,
        fit or serving_fit(),
        weight_bytes_per_param(workload.weights_precision),
        kv_bytes_per_element(workload.kv_precision),
    )
    mem = engine_memory(engine.name)
    if plan.mode == "disaggregated":
        return _disaggregated(ctx, plan, mem)
    return _aggregated(ctx, plan, mem)


def _goodput(
    requests_per_s: float, ttft_mean_s: float, ttft_p_s: float, tpot_p_s: float, w: Workload
) -> float:
    """Requests/s meeting the SLO at its percentile: all of them when both percentiles hold,
    none when TPOT misses (every request of a replica sees the same steps), and the share whose
    TTFT is under the target otherwise (exponential tail above the mean)."""
    if w.tpot_ms is not None and tpot_p_s * 1e3 > w.tpot_ms:
        return 0.0
    if w.ttft_ms is None or ttft_p_s * 1e3 <= w.ttft_ms:
        return requests_per_s
    return (
        0.0 if ttft_mean_s * 1e3 > w.ttft_ms else requests_per_s * (1.0 - (100 - w.percentile) / 100.0) * 0.5
    )


def _aggregated(c: _Ctx, plan: ServingPlan, engine: EngineMemory) -> ServingPrediction:
    w = c.workload
    shape = _shape(plan.tp, plan.pp, plan.ep, plan.dp_attention)
    budget = memory_budget(c.graph, c.cluster, shape, w, engine, plan.max_num_tokens, plan.max_batch)
    gpus = plan.replicas * shape.gpus
    reasons = (
        ()
        if budget.fits
        else (
            f"weights {budget.weights_bytes / 2**30:.1f} GiB + activations leave no KV cache for one "
            f"{w.isl + w.osl:.0f}-token sequence in {budget.capacity_bytes / 2**30:.1f} GiB",
        )
    )
    cap = max(1.0, min(float(plan.max_batch), floor(budget.max_sequences))) if budget.fits else 1.0
    mixed = True
    overloaded = False
    wait_mean = wait_p = 0.0
    if w.request_rate is not None:
        rate = w.request_rate / plan.replicas
        batch = _batch_at_rate(c, shape, rate, cap, w.isl, w.osl, mixed)
    else:
        conc = (w.concurrency if w.concurrency is not None else 10**9) / plan.replicas
        batch = min(cap, max(conc, 1.0))
    tau = _round_s(c, shape, batch, w.isl, w.osl, mixed)
    tokens_per_s = batch / tau
    req_per_s = tokens_per_s / w.osl
    chunk = (
        max(1.0, plan.max_num_tokens - batch / shape.pp)
        if plan.chunked_prefill
        else float(plan.max_num_tokens)
    )
    service = (0.5 + max(1.0, w.isl / chunk)) * tau
    isl90 = w.isl_p90 or w.isl
    service90 = (0.5 + max(1.0, isl90 / chunk)) * tau
    if w.request_rate is not None:
        cap_rate = cap / _round_s(c, shape, cap, w.isl, w.osl, mixed) / w.osl
        prompt_rate = chunk / (w.isl * tau)  # prompts/s the chunk budget admits
        server = min(cap_rate, prompt_rate)
        rate = w.request_rate / plan.replicas
        overloaded = rate >= server * OVERLOAD_RHO
        wait_mean = md1_wait_s(rate, server)
        wait_p = wait_quantile_s(wait_mean, min(rate / server, OVERLOAD_RHO), w.percentile / 100.0)
        if overloaded:
            req_per_s = min(req_per_s, cap_rate)
    elif w.concurrency is not None:
        conc = w.concurrency / plan.replicas
        wait_mean = wait_p = closed_loop_wait_s(conc, batch, req_per_s)
    ttft = service + wait_mean
    ttft_p = service90 + wait_p
    osl90 = w.osl_p90 or w.osl
    tau90 = _round_s(c, shape, batch, isl90, osl90, mixed) if (isl90, osl90) != (w.isl, w.osl) else tau
    total_tok = tokens_per_s * plan.replicas
    step = step_time(
        c.graph,
        c.cluster,
        shape,
        StepInput(batch / shape.pp, w.isl + w.osl / 2.0),
        w_bytes=c.w_bytes,
        weights_precision=w.weights_precision,
        kv_bytes=c.kv_bytes,
        fit=c.fit,
    )
    return ServingPrediction(
        ttft_ms_p50=ttft * 1e3,
        ttft_ms_p90=max(ttft_p, ttft) * 1e3,
        tpot_ms_p50=tau * 1e3,
        tpot_ms_p90=max(tau90, tau) * 1e3,
        output_tokens_per_s=total_tok,
        output_tokens_per_s_per_gpu=total_tok / gpus,
        goodput_requests_per_s=_goodput(req_per_s * plan.replicas, ttft, ttft_p, max(tau90, tau), w),
        kv_cache_tokens=budget.kv_cache_tokens,
        weights_bytes=budget.weights_bytes,
        kv_cache_bytes=budget.kv_cache_bytes,
        activation_bytes=budget.activation_bytes,
        buffer_bytes=budget.buffer_bytes,
        gpus=gpus,
        fits=budget.fits,
        batch=batch,
        requests_per_s=req_per_s * plan.replicas,
        overloaded=overloaded,
        reasons=reasons,
        breakdown={
            "gemm_s": step.gemm_s,
            "attention_s": step.attention_s,
            "comm_s": step.comm_s,
            "other_s": step.other_s,
            "host_s": step.host_s,
        },
    )


def _kv_transfer_s(c: _Ctx, p: WorkerShape, gpus_total: int, isl: float) -> float:
    """One prompt's KV cache from a prefill worker to a decode worker: each prefill GPU sends its
    shard (kv_bytes_per_sequence of the prompt) over the tier that holds both pools' GPUs
    (NVLink inside an NVL72 rack, the NIC otherwise; cost/comm.py p2p_s). Units: seconds."""
    per_gpu = kv_bytes_per_sequence(c.graph, p, c.kv_bytes, isl)
    return p2p_s(c.cluster.tier_of_span(gpus_total), per_gpu)


def _disaggregated(c: _Ctx, plan: ServingPlan, engine: EngineMemory) -> ServingPrediction:
    assert plan.prefill is not None and plan.decode is not None
    w = c.workload
    pw, dw = plan.prefill, plan.decode
    ps = _shape(pw.tp, pw.pp, pw.ep, pw.dp_attention)
    ds = _shape(dw.tp, dw.pp, dw.ep, dw.dp_attention)
    gpus = pw.workers * ps.gpus + dw.workers * ds.gpus
    pbudget = memory_budget(c.graph, c.cluster, ps, w, engine, plan.max_num_tokens, 1)
    dbudget = memory_budget(c.graph, c.cluster, ds, w, engine, ds.attn_dp, plan.max_batch)
    fits = pbudget.weights_bytes + pbudget.activation_bytes < pbudget.capacity_bytes and dbudget.fits
    reasons = () if fits else ("the weights leave no KV cache on the prefill or the decode workers",)
    # prefill: one prompt alone (latency) and full steps of max_num_tokens (capacity)
    isl90 = w.isl_p90 or w.isl
    per_step = max(float(plan.max_num_tokens), w.isl)

    def prefill_s(isl: float, tokens: float) -> float:
        return ps.pp * _stage_s(c, ps, StepInput(0.0, 0.0, tokens / ps.pp, isl, tokens / isl / ps.pp))

    alone = prefill_s(w.isl, w.isl)
    alone90 = prefill_s(isl90, isl90)
    full = prefill_s(w.isl, per_step)
    prefill_rate = pw.workers * (per_step / w.isl) / (full / ps.pp if ps.pp > 1 else full)
    transfer = _kv_transfer_s(c, ps, gpus, w.isl)
    cap = max(1.0, min(float(plan.max_batch), floor(dbudget.max_sequences))) if dbudget.fits else 1.0

    def tau_of(batch: float) -> float:
        return _round_s(c, ds, batch, w.isl, w.osl, False)

    decode_cap_rate = dw.workers * cap / tau_of(cap) / w.osl
    overloaded = False
    if w.request_rate is not None:
        rate = w.request_rate
        served = min(rate, prefill_rate, decode_cap_rate)
        overloaded = rate >= min(prefill_rate, decode_cap_rate) * OVERLOAD_RHO
        batch = _batch_at_rate(c, ds, served / dw.workers, cap, w.isl, w.osl, False)
        wait = md1_wait_s(rate / pw.workers, prefill_rate / pw.workers)
        wait_p = wait_quantile_s(wait, min(rate / prefill_rate, OVERLOAD_RHO), w.percentile / 100.0)
        tau = tau_of(batch)
        req = min(served, dw.workers * batch / tau / w.osl)
        ttft = alone + transfer + wait
        ttft_p = alone90 + transfer + wait_p
    else:
        conc = float(w.concurrency if w.concurrency is not None else 10**9)
        batch = min(cap, max(1.0, conc / dw.workers))
        for _ in range(30):  # fixed point: requests in prefill are not in decode
            tau = tau_of(batch)
            req = min(prefill_rate, dw.workers * batch / tau / w.osl)
            in_prefill = req * (alone + transfer)
            batch = min(cap, max(1.0, (conc - in_prefill) / dw.workers))
        tau = tau_of(batch)
        req = min(prefill_rate, dw.workers * batch / tau / w.osl)
        # Little's law: C = X (TTFT + (osl - 1) tau); TTFT at least the prompt's own path
        ttft = max(alone + transfer, conc / req - (w.osl - 1.0) * tau) if w.concurrency else alone + transfer
        ttft_p = ttft + (alone90 - alone)
    osl90 = w.osl_p90 or w.osl
    tau90 = _round_s(c, ds, batch, isl90, osl90, False)
    total_tok = req * w.osl
    step = step_time(
        c.graph,
        c.cluster,
        ds,
        StepInput(batch / ds.pp, w.isl + w.osl / 2.0),
        w_bytes=c.w_bytes,
        weights_precision=w.weights_precision,
        kv_bytes=c.kv_bytes,
        fit=c.fit,
    )
    return ServingPrediction(
        ttft_ms_p50=ttft * 1e3,
        ttft_ms_p90=max(ttft_p, ttft) * 1e3,
        tpot_ms_p50=tau * 1e3,
        tpot_ms_p90=max(tau90, tau) * 1e3,
        output_tokens_per_s=total_tok,
        output_tokens_per_s_per_gpu=total_tok / gpus,
        goodput_requests_per_s=_goodput(req, ttft, ttft_p, max(tau90, tau), w),
        kv_cache_tokens=dbudget.kv_cache_tokens,
        weights_bytes=dbudget.weights_bytes,
        kv_cache_bytes=dbudget.kv_cache_bytes,
        activation_bytes=dbudget.activation_bytes,
        buffer_bytes=dbudget.buffer_bytes,
        gpus=gpus,
        fits=fits,
        batch=batch,
        requests_per_s=req,
        overloaded=overloaded,
        reasons=reasons,
        breakdown={
            "gemm_s": step.gemm_s,
            "attention_s": step.attention_s,
            "comm_s": step.comm_s,
            "other_s": step.other_s,
            "host_s": step.host_s,
            "kv_transfer_s": transfer,
            "prefill_s": alone,
        },
    )
