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
the share ``first_wave_share`` that sees a benchmark's synchronised first wave waits for the
wave's prompts (``wave_s``), the rest return in cohorts of one step's prompts
(``cohort_service_s``), and TPOT is the decode-only round (serving_common.py);
open loop (``request_rate``), B solves rate x osl = B / tau(B) and the prompt server (the chunk
budget) is an M/D/1 queue (cost/queueing.py); at or past capacity the wait is that of utilisation
OVERLOAD_RHO and ``overloaded`` is set.

Disaggregated (DistServe, Zhong et al. OSDI'24; Splitwise, Patel et al. ISCA'24): prefill workers
run prompt-only steps of up to ``max_num_tokens`` tokens; the KV cache of each prompt moves to a
decode worker over the link tier the two pools' span crosses (cost/comm.py ``p2p_s``, every GPU
sending its shard); decode workers run decode-only steps. Throughput is the lesser of the two
pools' request rates (integer workers, no fixed factors); TTFT = prefill wait + prefill + transfer.

Percentiles: the p90 prompt / output lengths (``isl_p90`` / ``osl_p90``) set the p90 service
times; the queue wait's p90 is the exponential-tail quantile of cost/queueing.py. The ``p90``
keys always hold the 90th percentile; the SLO's own percentile (50 or 90) only picks which
prediction goodput judges (serving_common.py ``at_slo``).
"""

from __future__ import annotations

from math import floor

from paraplan.cost.kv import WorkerShape
from paraplan.cost.queueing import OVERLOAD_RHO, closed_loop_wait_s
from paraplan.cost.serving_common import (
    Ctx,
    Wait,
    at_slo,
    batch_at_rate,
    blend,
    cohort_service_s,
    engine_context,
    goodput,
    memory_reasons,
    open_wait,
    prefill_step_s,
    round_s,
    wave_s,
    worker_shape,
    worker_step,
)
from paraplan.cost.serving_disagg import disaggregated
from paraplan.cost.serving_gemm import TILED_MOE_ENGINES_DEFAULT
from paraplan.cost.serving_memory import MemoryBudget, memory_budget, per_gpu_fields
from paraplan.cost.serving_step import StepInput
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
from paraplan.graph import ModelSpec
from paraplan.hardware import Cluster
from paraplan.hardware.serving import (
    EngineMemory,
    ServingFit,
)

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


def evaluate_serving(
    spec: ModelSpec,
    cluster: Cluster,
    plan: ServingPlan,
    workload: Workload,
    engine: Engine,
    fit: ServingFit | None = None,
    tiled_moe_engines: frozenset[str] = TILED_MOE_ENGINES_DEFAULT,
) -> ServingPrediction:
    """Predicted latency, throughput and memory of serving ``spec`` on ``cluster`` with ``plan``
    under ``workload`` (module docstring). ``fit`` overrides hardware/data/serving.yaml's fitted
    parameters (the fidelity benchmark's fit and cross-validation), ``tiled_moe_engines`` the
    engines whose MoE GEMMs tile near their tokens (cost/serving_gemm.py ``is_tiled_moe``; the
    benchmark's ``--moe-tiles``)."""
    check_serving_plan(spec, cluster, plan)
    check_workload(workload)
    if engine.kv_fraction is not None and not 0.0 < engine.kv_fraction <= 1.0:
        raise ValueError(f"engine.kv_fraction={engine.kv_fraction} must be in (0, 1]")
    ctx, mem = engine_context(spec, cluster, workload, engine, fit, tiled_moe_engines)
    if plan.mode == "disaggregated":
        return disaggregated(ctx, plan, mem)
    return _aggregated(ctx, plan, mem)


def _aggregated(c: Ctx, plan: ServingPlan, engine: EngineMemory) -> ServingPrediction:
    w = c.workload
    shape = worker_shape(plan.tp, plan.pp, plan.ep, plan.dp_attention)
    budget = memory_budget(c.graph, c.cluster, shape, w, engine, plan.max_num_tokens, plan.max_batch)
    gpus = plan.replicas * shape.gpus
    # the batch: max_batch, the KV cache, and the step's token budget (each micro-batch step
    # carries its d decode tokens and the d isl / osl prompt tokens that replace finished ones)
    token_cap = shape.pp * plan.max_num_tokens * w.osl / (w.isl + w.osl)
    cap = min(float(plan.max_batch), floor(budget.max_sequences), max(1.0, token_cap))
    cap = max(1.0, cap) if budget.fits else 1.0
    cap_rate = cap / round_s(c, shape, cap, w.isl, w.osl, True) / w.osl  # requests/s, full batch
    overloaded = False
    wait = Wait()
    budget_tokens = float(plan.max_num_tokens)
    if w.request_rate == float("inf") and w.num_requests is not None:
        return _burst(c, plan, shape, budget, min(float(plan.max_batch), floor(budget.max_sequences)))
    if w.request_rate is not None:
        rate = w.request_rate / plan.replicas
        overloaded = rate >= cap_rate * OVERLOAD_RHO
        batch = cap if overloaded else batch_at_rate(c, shape, rate, cap, w.isl, w.osl, True)
    else:
        conc = (w.concurrency if w.concurrency is not None else 10**9) / plan.replicas
        batch = min(cap, max(conc, 1.0))
    tau = round_s(c, shape, batch, w.isl, w.osl, True)
    req_per_s = batch / tau / w.osl
    micro = batch / shape.pp
    chunk = max(1.0, budget_tokens - micro) if plan.chunked_prefill else max(budget_tokens, w.isl)
    if w.request_rate is not None:
        rate = w.request_rate / plan.replicas
        prompt_rate = shape.pp * chunk / (w.isl * tau)  # prompts/s the step budget admits
        server = min(cap_rate, prompt_rate)
        wait = open_wait(rate, server, cap if prompt_rate > cap_rate else 0.0, w)
        req_per_s = min(rate, req_per_s)
    elif w.concurrency is not None:
        queued = closed_loop_wait_s(w.concurrency / plan.replicas, batch, req_per_s)
        wait = Wait.fixed(queued)
    isl90, osl90 = w.isl_p90 or w.isl, w.osl_p90 or w.osl
    service = (0.5 + max(1.0, w.isl / chunk)) * tau
    service90 = (0.5 + max(1.0, isl90 / chunk)) * tau
    tau90 = round_s(c, shape, batch, isl90, osl90, True) if (isl90, osl90) != (w.isl, w.osl) else tau
    if w.concurrency is not None and w.request_rate is None:
        wave = wave_s(c, shape, batch, w.isl, budget_tokens)
        steady = cohort_service_s(c, shape, batch, w.isl, w.osl, chunk, w.isl)
        steady90 = cohort_service_s(c, shape, batch, w.isl, w.osl, chunk, isl90)
        service, service90 = blend(c, steady, wave, True), blend(c, steady90, wave * 1.8, True)
        # a closed loop's prompts come a cohort at a time, one step of a cohort per osl steps of
        # it: the steps between are decode-only (and a prefill-first engine's wave decodes alone)
        tau = tau90 = round_s(c, shape, batch, w.isl, w.osl, False)
    front = c.fit.ttft_overhead_s
    ttft = front + service + wait.mean_s
    ttft_p = max(front + service90 + wait.p90_s, ttft)
    ttft_slo = front + at_slo(w, service, service90) + wait.slo_s
    total_tok = req_per_s * w.osl * plan.replicas
    step = worker_step(
        c, shape, StepInput(micro, w.isl + w.osl / 2.0, micro * w.isl / w.osl, w.isl, micro / w.osl)
    )
    return ServingPrediction(
        ttft_ms_p50=(front + service + wait.p50_s) * 1e3,
        ttft_ms_p90=ttft_p * 1e3,
        tpot_ms_p50=tau * 1e3,
        tpot_ms_p90=max(tau90, tau) * 1e3,
        output_tokens_per_s=total_tok,
        output_tokens_per_s_per_gpu=total_tok / gpus,
        goodput_requests_per_s=goodput(
            req_per_s * plan.replicas, ttft, ttft_slo, at_slo(w, tau, max(tau90, tau)), w
        ),
        **per_gpu_fields(budget),
        gpus=gpus,
        fits=budget.fits,
        batch=batch,
        ttft_ms_mean=ttft * 1e3,
        tpot_ms_mean=tau * 1e3,
        requests_per_s=req_per_s * plan.replicas,
        overloaded=overloaded,
        reasons=memory_reasons(budget, w),
        breakdown=step.parts(),
    )


def _burst(
    c: Ctx, plan: ServingPlan, shape: WorkerShape, budget: MemoryBudget, cap: float
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
    t_p = prefill_step_s(c, shape, max(step_tokens, w.isl), w.isl)
    t_dec = round_s(c, shape, n, w.isl, w.osl, False)
    wave_s = steps * t_p + (w.osl - 1.0) * t_dec
    ttft = c.fit.ttft_overhead_s + (steps + 1.0) / 2.0 * t_p + (waves - 1.0) / 2.0 * wave_s

    def quantile_s(q: float) -> float:  # waits spread evenly over the wave and over the waves
        return c.fit.ttft_overhead_s + ((1.0 - q) + q * steps) * t_p + (waves - 1.0) * q * wave_s

    ttft_p = quantile_s(0.9)
    total_tok = n * w.osl / wave_s * plan.replicas
    step = worker_step(c, shape, StepInput(n / shape.pp, w.isl + w.osl / 2.0))
    return ServingPrediction(
        ttft_ms_p50=ttft * 1e3,
        ttft_ms_p90=max(ttft, ttft_p) * 1e3,
        tpot_ms_p50=t_dec * 1e3,
        tpot_ms_p90=t_dec * 1e3,
        output_tokens_per_s=total_tok,
        output_tokens_per_s_per_gpu=total_tok / gpus,
        goodput_requests_per_s=goodput(total_tok / w.osl, ttft, quantile_s(w.percentile / 100.0), t_dec, w),
        **per_gpu_fields(budget),
        gpus=gpus,
        fits=budget.fits,
        batch=n,
        ttft_ms_mean=ttft * 1e3,
        tpot_ms_mean=t_dec * 1e3,
        requests_per_s=total_tok / w.osl,
        overloaded=True,
        reasons=memory_reasons(budget, w),
        breakdown=step.parts() | {"prefill_step_s": t_p},
    )
