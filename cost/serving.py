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
Queue wait: closed loop (``concurrency``), the requests beyond B wait (C - B) / X by Little's law,
and the share ``closed_loop_burst`` that sees a benchmark's synchronised first wave waits for the
wave's prompts (``_wave_s``);
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

from dataclasses import dataclass, replace
from functools import cache
from math import floor

from paraplan.cost.comm import p2p_s
from paraplan.cost.kv import WorkerShape, kv_bytes_per_element, kv_bytes_per_sequence, weight_bytes_per_param
from paraplan.cost.queueing import (
    OVERLOAD_RHO,
    closed_loop_wait_s,
    finite_run_wait_s,
    md1_wait_s,
    wait_quantile_s,
)
from paraplan.cost.serving_memory import MemoryBudget, memory_budget
from paraplan.cost.serving_step import StepInput, StepTime, step_time
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
from paraplan.hardware.serving import EngineMemory, ServingFit, engine_memory, is_cpp_runtime, serving_fit

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
    cpp_runtime: bool = False


def _step(c: _Ctx, shape: WorkerShape, x: StepInput) -> StepTime:
    return step_time(
        c.graph,
        c.cluster,
        shape,
        x,
        w_bytes=c.w_bytes,
        weights_precision=c.workload.weights_precision,
        kv_bytes=c.kv_bytes,
        fit=c.fit,
        cpp_runtime=c.cpp_runtime,
    )


def _round_s(c: _Ctx, shape: WorkerShape, batch: float, isl: float, osl: float, mixed: bool) -> float:
    """tau: time for every one of ``batch`` sequences of a worker to gain a token (pp x the step
    of one micro-batch; with ``mixed`` the prompts replacing finished requests ride along)."""
    micro = max(batch, 1e-9) / shape.pp
    prefill = micro * isl / osl if mixed else 0.0
    x = StepInput(micro, isl + osl / 2.0, prefill, isl, micro / osl if mixed else 0.0)
    return shape.pp * _step(c, shape, x).total_s


def _batch_at_rate(
    c: _Ctx, shape: WorkerShape, rate: float, cap: float, isl: float, osl: float, mixed: bool
) -> float:
    """Batch B <= cap with B / tau(B) = rate x osl (tokens/s demanded of one worker), by bisection
    (B / tau(B) rises with B); cap when the rate is beyond it."""
    demand = rate * osl
    if cap / _round_s(c, shape, cap, isl, osl, mixed) <= demand:
        return cap
    lo, hi = 0.0, cap
    for _ in range(30):
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
    parameters (the fidelity benchmark's fit and cross-validation)."""
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
        is_cpp_runtime(engine.name, engine.version),
    )
    mem = engine_memory(engine.name)
    if engine.kv_fraction is not None:
        if not 0.0 < engine.kv_fraction <= 1.0:
            raise ValueError(f"engine.kv_fraction={engine.kv_fraction} must be in (0, 1]")
        mem = replace(mem, kv_fraction=engine.kv_fraction)
    if plan.mode == "disaggregated":
        return _disaggregated(ctx, plan, mem)
    return _aggregated(ctx, plan, mem)


@dataclass(frozen=True, slots=True)
class _Wait:
    """Queue wait before a request's prompt starts: mean, median and the SLO percentile. Units: s."""

    mean_s: float = 0.0
    p50_s: float = 0.0
    p_s: float = 0.0


def _open_wait(rate: float, server: float, slots: float, w: Workload) -> _Wait:
    """Wait at Poisson ``rate`` (per worker) on a server of ``server`` requests/s
    (cost/queueing.py): M/D/1 with its exponential tail, or a finite run's fluid backlog."""
    rho = min(rate / server, OVERLOAD_RHO) if server > 0 else OVERLOAD_RHO
    if w.num_requests is not None:
        mean = finite_run_wait_s(rate, server, w.num_requests, slots)
    else:
        mean = md1_wait_s(min(rate, server * OVERLOAD_RHO), server)
    if rate >= server:  # a growing backlog: waits spread evenly from 0 to twice the mean
        return _Wait(mean, mean, mean * 2.0 * w.percentile / 100.0)
    return _Wait(mean, wait_quantile_s(mean, rho, 0.5), wait_quantile_s(mean, rho, w.percentile / 100.0))


def _goodput(
    requests_per_s: float, ttft_mean_s: float, ttft_p_s: float, tpot_p_s: float, w: Workload
) -> float:
    """Requests/s meeting the SLO at its percentile: all of them when both percentiles hold,
    none when TPOT misses (every request of a replica sees the same steps) or the mean TTFT
    misses, else the share under the TTFT target, interpolated between the mean (half of the
    requests, about) and the percentile."""
    if w.tpot_ms is not None and tpot_p_s * 1e3 > w.tpot_ms:
        return 0.0
    if w.ttft_ms is None or ttft_p_s * 1e3 <= w.ttft_ms:
        return requests_per_s
    target = w.ttft_ms * 1e-3
    if target <= ttft_mean_s:
        return 0.0
    share = 0.5 + (w.percentile / 100.0 - 0.5) * (target - ttft_mean_s) / (ttft_p_s - ttft_mean_s)
    return requests_per_s * share


def _prefill_step_s(c: _Ctx, shape: WorkerShape, tokens: float, isl: float) -> float:
    """One prompt-only step of ``tokens`` prompt tokens (prompts of ``isl``), all pp stages."""
    micro = tokens / shape.pp
    return shape.pp * _step(c, shape, StepInput(0.0, 0.0, micro, isl, micro / isl)).total_s


def _wave_s(c: _Ctx, shape: WorkerShape, wave: float, isl: float, step_tokens: float) -> float:
    """Mean TTFT inside a closed loop's synchronised wave of ``wave`` requests (a benchmark at
    concurrency C starts C requests at once; fixed lengths keep them together): their prompts
    take s = max(1, wave isl / step_tokens) prompt-only steps of t_p and the mean request has its
    first token after (s + 1) / 2 of them. Units: seconds."""
    steps = max(1.0, wave * isl / step_tokens)
    return (steps + 1.0) / 2.0 * _prefill_step_s(c, shape, max(isl, min(step_tokens, wave * isl)), isl)


def _blend(c: _Ctx, steady_s: float, wave_s: float) -> float:
    """The share ``closed_loop_burst`` of a closed loop's requests that see the first wave
    (hardware/data/serving.yaml), the rest the steady state."""
    f = c.fit.closed_loop_burst
    return f * wave_s + (1.0 - f) * steady_s


def _memory_reasons(budget: MemoryBudget, w: Workload) -> tuple[str, ...]:
    if budget.fits:
        return ()
    return (
        f"weights {budget.weights_bytes / 2**30:.1f} GiB + activations "
        f"{budget.activation_bytes / 2**30:.1f} GiB leave no KV cache for one "
        f"{w.isl + w.osl:.0f}-token sequence in "
        f"{budget.capacity_bytes / 2**30:.1f} GiB per GPU",
    )


def _aggregated(c: _Ctx, plan: ServingPlan, engine: EngineMemory) -> ServingPrediction:
    w = c.workload
    shape = _shape(plan.tp, plan.pp, plan.ep, plan.dp_attention)
    budget = memory_budget(c.graph, c.cluster, shape, w, engine, plan.max_num_tokens, plan.max_batch)
    gpus = plan.replicas * shape.gpus
    # the batch: max_batch, the KV cache, and the step's token budget (each micro-batch step
    # carries its d decode tokens and the d isl / osl prompt tokens that replace finished ones)
    token_cap = shape.pp * plan.max_num_tokens * w.osl / (w.isl + w.osl)
    cap = min(float(plan.max_batch), floor(budget.max_sequences), max(1.0, token_cap))
    cap = max(1.0, cap) if budget.fits else 1.0
    cap_rate = cap / _round_s(c, shape, cap, w.isl, w.osl, True) / w.osl  # requests/s, full batch
    overloaded = False
    wait = _Wait()
    budget_tokens = float(plan.max_num_tokens)
    if w.request_rate == float("inf") and w.num_requests is not None:
        return _burst(c, plan, shape, budget, min(float(plan.max_batch), floor(budget.max_sequences)))
    if w.request_rate is not None:
        rate = w.request_rate / plan.replicas
        overloaded = rate >= cap_rate * OVERLOAD_RHO
        batch = cap if overloaded else _batch_at_rate(c, shape, rate, cap, w.isl, w.osl, True)
    else:
        conc = (w.concurrency if w.concurrency is not None else 10**9) / plan.replicas
        batch = min(cap, max(conc, 1.0))
    tau = _round_s(c, shape, batch, w.isl, w.osl, True)
    req_per_s = batch / tau / w.osl
    micro = batch / shape.pp
    chunk = max(1.0, budget_tokens - micro) if plan.chunked_prefill else max(budget_tokens, w.isl)
    if w.request_rate is not None:
        rate = w.request_rate / plan.replicas
        prompt_rate = shape.pp * chunk / (w.isl * tau)  # prompts/s the step budget admits
        server = min(cap_rate, prompt_rate)
        wait = _open_wait(rate, server, cap if prompt_rate > cap_rate else 0.0, w)
        req_per_s = min(rate, req_per_s)
    elif w.concurrency is not None:
        queued = closed_loop_wait_s(w.concurrency / plan.replicas, batch, req_per_s)
        wait = _Wait(queued, queued, queued)
    isl90, osl90 = w.isl_p90 or w.isl, w.osl_p90 or w.osl
    service = (0.5 + max(1.0, w.isl / chunk)) * tau
    service90 = (0.5 + max(1.0, isl90 / chunk)) * tau
    if w.concurrency is not None and w.request_rate is None:
        wave = _wave_s(c, shape, batch, w.isl, budget_tokens)
        service, service90 = _blend(c, service, wave), _blend(c, service90, wave * 1.8)
    tau90 = _round_s(c, shape, batch, isl90, osl90, True) if (isl90, osl90) != (w.isl, w.osl) else tau
    front = c.fit.ttft_overhead_s
    ttft = front + service + wait.mean_s
    ttft_p = max(front + service90 + wait.p_s, ttft)
    total_tok = req_per_s * w.osl * plan.replicas
    step = _step(c, shape, StepInput(micro, w.isl + w.osl / 2.0, micro * w.isl / w.osl, w.isl, micro / w.osl))
    return ServingPrediction(
        ttft_ms_p50=(front + service + wait.p50_s) * 1e3,
        ttft_ms_p90=ttft_p * 1e3,
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
        ttft_ms_mean=ttft * 1e3,
        tpot_ms_mean=tau * 1e3,
        requests_per_s=req_per_s * plan.replicas,
        overloaded=overloaded,
        reasons=_memory_reasons(budget, w),
        breakdown=step.parts(),
    )


def _burst(
    c: _Ctx, plan: ServingPlan, shape: WorkerShape, budget: MemoryBudget, cap: float
) -> ServingPrediction:
    """A finite run whose ``num_requests`` requests all arrive at once (request_rate inf): waves
    of n = min(cap, requests) requests, each prompt-only steps of the step budget then osl - 1
    decode steps of n sequences (fixed lengths keep a wave together). Wave time D = s t_p +
    (osl - 1) t_dec, s = n isl / budget; output rate n osl / D; TTFT = the wave's mean prompt
    queue (s + 1) / 2 t_p plus the earlier waves, (waves - 1) / 2 x D."""
    w = c.workload
    assert w.num_requests is not None
    gpus = plan.replicas * shape.gpus
    per_replica = w.num_requests / plan.replicas
    n = max(1.0, min(cap, per_replica)) if budget.fits else 1.0
    waves = per_replica / n
    step_tokens = min(float(plan.max_num_tokens), n * w.isl)
    steps = max(1.0, n * w.isl / float(plan.max_num_tokens))
    t_p = _prefill_step_s(c, shape, max(step_tokens, w.isl), w.isl)
    t_dec = _round_s(c, shape, n, w.isl, w.osl, False)
    wave_s = steps * t_p + (w.osl - 1.0) * t_dec
    ttft = c.fit.ttft_overhead_s + (steps + 1.0) / 2.0 * t_p + (waves - 1.0) / 2.0 * wave_s
    ttft_p = c.fit.ttft_overhead_s + (0.1 + 0.9 * steps) * t_p + (waves - 1.0) * 0.9 * wave_s
    total_tok = n * w.osl / wave_s * plan.replicas
    step = _step(c, shape, StepInput(n / shape.pp, w.isl + w.osl / 2.0))
    return ServingPrediction(
        ttft_ms_p50=ttft * 1e3,
        ttft_ms_p90=max(ttft, ttft_p) * 1e3,
        tpot_ms_p50=t_dec * 1e3,
        tpot_ms_p90=t_dec * 1e3,
        output_tokens_per_s=total_tok,
        output_tokens_per_s_per_gpu=total_tok / gpus,
        goodput_requests_per_s=_goodput(total_tok / w.osl, ttft, max(ttft, ttft_p), t_dec, w),
        kv_cache_tokens=budget.kv_cache_tokens,
        weights_bytes=budget.weights_bytes,
        kv_cache_bytes=budget.kv_cache_bytes,
        activation_bytes=budget.activation_bytes,
        buffer_bytes=budget.buffer_bytes,
        gpus=gpus,
        fits=budget.fits,
        batch=n,
        ttft_ms_mean=ttft * 1e3,
        tpot_ms_mean=t_dec * 1e3,
        requests_per_s=total_tok / w.osl,
        overloaded=True,
        reasons=_memory_reasons(budget, w),
        breakdown=step.parts() | {"prefill_step_s": t_p},
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
    fits = pbudget.fits and dbudget.fits
    reasons = _memory_reasons(pbudget, w) + _memory_reasons(dbudget, w)
    isl90 = w.isl_p90 or w.isl
    per_step = max(float(plan.max_num_tokens), w.isl)  # prompt tokens per prefill step

    alone = _prefill_step_s(c, ps, w.isl, w.isl)
    alone90 = _prefill_step_s(c, ps, isl90, isl90)
    # capacity: full steps, pipelined over pp stages (a step leaves a stage every full / pp)
    prefill_rate = pw.workers * (per_step / w.isl) / (_prefill_step_s(c, ps, per_step, w.isl) / ps.pp)
    transfer = _kv_transfer_s(c, ps, gpus, w.isl)
    cap = max(1.0, min(float(plan.max_batch), floor(dbudget.max_sequences))) if dbudget.fits else 1.0

    def tau_of(batch: float) -> float:
        return _round_s(c, ds, batch, w.isl, w.osl, False)

    decode_rate = dw.workers * cap / tau_of(cap) / w.osl
    overloaded = False
    if w.request_rate is not None:
        rate = w.request_rate
        overloaded = rate >= min(prefill_rate, decode_rate) * OVERLOAD_RHO
        served = min(rate, prefill_rate, decode_rate)
        batch = (
            cap
            if served >= decode_rate
            else _batch_at_rate(c, ds, served / dw.workers, cap, w.isl, w.osl, False)
        )
        wait = _open_wait(rate / pw.workers, min(prefill_rate, decode_rate) / pw.workers, 0.0, w)
        tau = tau_of(batch)
        req = min(served, dw.workers * batch / tau / w.osl)
    else:
        conc = float(w.concurrency if w.concurrency is not None else 10**9)
        batch = min(cap, max(1.0, conc / dw.workers))
        for _ in range(20):  # fixed point: the requests in prefill are not in decode
            tau = tau_of(batch)
            req = min(prefill_rate, dw.workers * batch / tau / w.osl)
            batch = min(cap, max(1.0, (conc - req * (alone + transfer)) / dw.workers))
        tau = tau_of(batch)
        req = min(prefill_rate, dw.workers * batch / tau / w.osl)
        # Little's law: C = X (TTFT + (osl - 1) tau); the wait is what the prompt's path leaves
        queued = max(0.0, conc / req - (w.osl - 1.0) * tau - alone - transfer) if w.concurrency else 0.0
        wait = _Wait(queued, queued, queued)
        if w.concurrency:
            wave = _wave_s(c, ps, min(conc, dw.workers * cap) / pw.workers, w.isl, per_step)
            alone, alone90 = _blend(c, alone, wave), _blend(c, alone90, wave * 1.8)
    front = c.fit.ttft_overhead_s
    ttft = front + alone + transfer + wait.mean_s
    ttft_p = max(front + alone90 + transfer + wait.p_s, ttft)
    osl90 = w.osl_p90 or w.osl
    tau90 = _round_s(c, ds, batch, isl90, osl90, False)
    total_tok = req * w.osl
    step = _step(c, ds, StepInput(batch / ds.pp, w.isl + w.osl / 2.0))
    return ServingPrediction(
        ttft_ms_p50=(front + alone + transfer + wait.p50_s) * 1e3,
        ttft_ms_p90=ttft_p * 1e3,
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
        ttft_ms_mean=ttft * 1e3,
        tpot_ms_mean=tau * 1e3,
        requests_per_s=req,
        overloaded=overloaded,
        reasons=reasons,
        breakdown=step.parts() | {"kv_transfer_s": transfer, "prefill_s": alone},
    )
