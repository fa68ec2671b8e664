"""Disaggregated serving (DistServe, Zhong et al. OSDI'24; Splitwise, Patel et al. ISCA'24):
prefill and decode pools of integer workers, the KV transfer between them on the link tier the
pools' span crosses, throughput the lesser of the two pools' rates (no fixed factors), TTFT =
front end + prefill wait + prefill + transfer. cost/serving.py's module docstring has the model.
"""

from __future__ import annotations

from math import floor

from paraplan.cost.queueing import OVERLOAD_RHO
from paraplan.cost.serving_common import (
    Ctx,
    Wait,
    at_slo,
    batch_at_rate,
    blend,
    goodput,
    kv_transfer_s,
    memory_reasons,
    open_wait,
    prefill_step_s,
    round_s,
    wave_s,
    worker_shape,
    worker_step,
)
from paraplan.cost.serving_memory import memory_budget, per_gpu_fields
from paraplan.cost.serving_step import StepInput
from paraplan.cost.serving_types import ServingPlan, ServingPrediction
from paraplan.hardware.serving import EngineMemory

__all__ = ["disaggregated"]


def disaggregated(c: Ctx, plan: ServingPlan, engine: EngineMemory) -> ServingPrediction:
    assert plan.prefill is not None and plan.decode is not None
    w = c.workload
    pw, dw = plan.prefill, plan.decode
    ps = worker_shape(pw.tp, pw.pp, pw.ep, pw.dp_attention)
    ds = worker_shape(dw.tp, dw.pp, dw.ep, dw.dp_attention)
    gpus = pw.workers * ps.gpus + dw.workers * ds.gpus
    pbudget = memory_budget(c.graph, c.cluster, ps, w, engine, plan.max_num_tokens, 1)
    dbudget = memory_budget(c.graph, c.cluster, ds, w, engine, ds.attn_dp, plan.max_batch)
    fits = pbudget.fits and dbudget.fits
    reasons = memory_reasons(pbudget, w) + memory_reasons(dbudget, w)
    isl90 = w.isl_p90 or w.isl
    per_step = max(float(plan.max_num_tokens), w.isl)  # prompt tokens per prefill step

    alone = prefill_step_s(c, ps, w.isl, w.isl)
    alone90 = prefill_step_s(c, ps, isl90, isl90)
    # capacity: full steps, pipelined over pp stages (a step leaves a stage every full / pp)
    prefill_rate = pw.workers * (per_step / w.isl) / (prefill_step_s(c, ps, per_step, w.isl) / ps.pp)
    transfer = kv_transfer_s(c, ps, gpus, w.isl)
    cap = max(1.0, min(float(plan.max_batch), floor(dbudget.max_sequences))) if dbudget.fits else 1.0

    def tau_of(batch: float) -> float:
        return round_s(c, ds, batch, w.isl, w.osl, False)

    decode_rate = dw.workers * cap / tau_of(cap) / w.osl
    overloaded = False
    if w.request_rate is not None:
        rate = w.request_rate
        overloaded = rate >= min(prefill_rate, decode_rate) * OVERLOAD_RHO
        served = min(rate, prefill_rate, decode_rate)
        batch = (
            cap
            if served >= decode_rate
            else batch_at_rate(c, ds, served / dw.workers, cap, w.isl, w.osl, False)
        )
        wait = open_wait(rate / pw.workers, min(prefill_rate, decode_rate) / pw.workers, 0.0, w)
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
        wait = Wait.fixed(queued)
        if w.concurrency:
            wave = wave_s(c, ps, min(conc, dw.workers * cap) / pw.workers, w.isl, per_step)
            alone, alone90 = blend(c, alone, wave, False), blend(c, alone90, wave * 1.8, False)
    front = c.fit.ttft_overhead_s
    ttft = front + alone + transfer + wait.mean_s
    ttft_p = max(front + alone90 + transfer + wait.p90_s, ttft)
    ttft_slo = front + at_slo(w, alone, alone90) + transfer + wait.slo_s
    osl90 = w.osl_p90 or w.osl
    tau90 = round_s(c, ds, batch, isl90, osl90, False)
    total_tok = req * w.osl
    step = worker_step(c, ds, StepInput(batch / ds.pp, w.isl + w.osl / 2.0))
    return ServingPrediction(
        ttft_ms_p50=(front + alone + transfer + wait.p50_s) * 1e3,
        ttft_ms_p90=ttft_p * 1e3,
        tpot_ms_p50=tau * 1e3,
        tpot_ms_p90=max(tau90, tau) * 1e3,
        output_tokens_per_s=total_tok,
        output_tokens_per_s_per_gpu=total_tok / gpus,
        goodput_requests_per_s=goodput(req, ttft, ttft_slo, at_slo(w, tau, max(tau90, tau)), w),
        **per_gpu_fields(dbudget),
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
