"""Bounds on one pool of a disaggregated serving plan (issue 23), for the search
(solver/serving_disagg.py): what one prefill worker and one decode worker can at most deliver,
from the same step physics and memory as cost/serving_disagg.py's ``disaggregated`` (its helpers in
cost/serving_common.py, so the two cannot drift), without scoring whole plans.

Written by servfront (the front door / search helper) beside servcost's cost/serving.py; servcost
may fold it into cost/serving.py. Every bound is checked against the whole-plan model by the
oracle tests (tests/solver/test_oracle_serving.py: solver optimum == enumeration of whole plans).

Why they bound ``evaluate_serving`` of any plan with n_p such prefill and n_d such decode workers
(cost/serving.py module docstring, cost/serving_disagg.py; B / tau(B) rises with B and tau
with B, as cost/serving_common.py ``batch_at_rate`` assumes):
- requests/s completed <= n_p x ``PrefillBound.rate_per_worker_rps`` (the prefill pool's capacity
  at full steps of max_num_tokens) and <= n_d x the decode worker's rate at its largest batch
  (the KV cache and max_batch cap it); goodput <= requests/s;
- closed loop, the decode workers hold n_d B <= max(concurrency, n_d) sequences (cost/serving_disagg.py
  keeps B >= 1 per worker, so n_d workers hold n_d even when the concurrency is lower) and
  complete at most n_d B / (osl tau(B)) <= (concurrency + n_d) / (osl tau(1)) requests/s;
- with ``workload.tpot_ms`` the goodput is 0 unless tau(B) <= tpot_ms, so B <= the largest batch
  meeting it (``decode_slo_batch``) and the decode rate bound is taken there;
- with ``workload.ttft_ms`` the goodput is 0 unless the mean TTFT (the front end's time + the
  prompt alone, or the closed loop's blend with its first wave, which is longer + its KV
  transfer, + with an offered rate the M/D/1 wait at rate / n_p on a server no faster than the
  prefill pool) is within it: the transfer is at least that over the fastest tier, so
  ``PrefillBound.min_workers`` prefill workers are needed (none suffice when the prompt alone
  misses it; a finite run, ``num_requests``, waits less and takes only that cut).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from paraplan.cost.comm import p2p_s
from paraplan.cost.kv import WorkerShape, kv_bytes_per_sequence
from paraplan.cost.queueing import md1_wait_s
from paraplan.cost.serving_common import (
    Ctx,
    engine_context,
    first_wave_share,
    prefill_step_s,
    round_s,
    worker_shape,
)
from paraplan.cost.serving_memory import memory_budget
from paraplan.cost.serving_types import Engine, WorkerPlan, Workload
from paraplan.graph import ModelSpec
from paraplan.hardware import Cluster
from paraplan.hardware.serving import (
    EngineMemory,
)

__all__ = [
    "PrefillBound",
    "DecodeBound",
    "prefill_bound",
    "decode_slo_batch",
    "decode_bound",
    "decode_rate_at",
]

_MAX_WORKERS = 1 << 20


@dataclass(frozen=True, slots=True)
class PrefillBound:
    gpus: int
    fits: bool
    rate_per_worker_rps: float  # prompts/s one worker prefills at full steps (capacity)
    ttft_floor_s: float  # the prompt alone plus its KV transfer over the fastest tier
    min_workers: int  # least workers whose mean TTFT can meet workload.ttft_ms at request_rate
    wave_per_worker: float = math.inf  # closed loop: most first-wave prompts per worker within the TTFT SLO


@dataclass(frozen=True, slots=True)
class DecodeBound:
    gpus: int
    fits: bool
    cap_batch: float  # sequences one worker holds: max_batch and the KV cache
    rate_per_worker_rps: float  # requests/s one worker completes at most within the TPOT SLO
    closed_loop_rps: float  # closed loop: concurrency / (osl tau(1)) ...
    closed_per_worker_rps: float  # ... plus this per worker: the pool's most at any size


def _ctx(spec: ModelSpec, cluster: Cluster, workload: Workload, engine: Engine) -> tuple[Ctx, EngineMemory]:
    """cost/serving.py evaluate_serving's context and engine memory rule (one builder for both)."""
    return engine_context(spec, cluster, workload, engine)


def prefill_bound(
    spec: ModelSpec,
    cluster: Cluster,
    worker: WorkerPlan,
    max_num_tokens: int,
    workload: Workload,
    engine: Engine,
) -> PrefillBound:
    c, mem = _ctx(spec, cluster, workload, engine)
    w = workload
    ps = worker_shape(worker.tp, worker.pp, worker.ep, worker.dp_attention)
    budget = memory_budget(c.graph, cluster, ps, w, mem, max_num_tokens, 1)
    fits = budget.fits
    per_step = max(float(max_num_tokens), w.isl)
    alone = prefill_step_s(c, ps, w.isl, w.isl)
    rate = (per_step / w.isl) / (prefill_step_s(c, ps, per_step, w.isl) / ps.pp)
    shard = kv_bytes_per_sequence(c.graph, ps, c.kv_bytes, w.isl)
    transfer = min(p2p_s(t, shard) for t in cluster.tiers)
    floor_s = c.fit.ttft_overhead_s + alone + transfer
    need = 1
    limit_s = w.ttft_ms / 1e3 if w.ttft_ms is not None else float("inf")
    if floor_s > limit_s:  # no number of workers meets the TTFT SLO (either loop)
        need = _MAX_WORKERS
    elif w.request_rate is not None and w.ttft_ms is not None and w.num_requests is None:
        lo, hi = 1, _MAX_WORKERS  # the mean wait falls as workers are added: the least n
        while lo < hi:
            mid = (lo + hi) // 2
            if floor_s + md1_wait_s(w.request_rate / mid, rate) <= limit_s:
                hi = mid
            else:
                lo = mid + 1
        need = lo
    return PrefillBound(
        ps.gpus, fits, rate, floor_s, need, _wave_limit(c, ps, w, alone, floor_s - alone, per_step)
    )


def _wave_limit(c: Ctx, ps: WorkerShape, w: Workload, alone: float, rest_s: float, per_step: float) -> float:
    """Closed loop with a TTFT SLO: the most prompts q of the first wave one prefill worker may
    get (cost/serving_disagg.py: q = min(C, n_d cap) / n_p) with its mean TTFT within the SLO. The mean
    TTFT is at least front + transfer + f wave(q) + (1 - f) alone (``_blend``; the wait is >= 0),
    and wave(q) = (q isl / S + 1) / 2 x one full prompt step of S tokens once q isl >= S
    (``_wave_s``), so q <= (2 R / (f t_S) - 1) S / isl with R = SLO - front - transfer -
    (1 - f) alone; below q isl = S every q is allowed. inf without the SLO or open loop."""
    if w.concurrency is None or w.ttft_ms is None:
        return math.inf
    f = first_wave_share(c, False)
    if f <= 0:
        return math.inf
    room = w.ttft_ms / 1e3 - rest_s - (1.0 - f) * alone
    full = prefill_step_s(c, ps, per_step, w.isl)
    linear = (2.0 * room / (f * full) - 1.0) * per_step / w.isl
    return max(linear, per_step / w.isl)


def decode_slo_batch(
    spec: ModelSpec,
    cluster: Cluster,
    worker: WorkerPlan,
    workload: Workload,
    engine: Engine,
    limit_batch: float,
) -> float:
    """The largest decode batch <= ``limit_batch`` whose round tau(B) meets workload.tpot_ms
    (``limit_batch`` without a TPOT SLO; 0 when even one sequence misses it). Bisection to 1e-6
    of a sequence, rounded down (a bound: never above the true largest batch)."""
    c, _ = _ctx(spec, cluster, workload, engine)
    w = workload
    ds = worker_shape(worker.tp, worker.pp, worker.ep, worker.dp_attention)
    if w.tpot_ms is None:
        return limit_batch
    limit_s = w.tpot_ms / 1e3

    def tau(b: float) -> float:
        return round_s(c, ds, b, w.isl, w.osl, False)

    if tau(limit_batch) <= limit_s:
        return limit_batch
    lo, hi = 0.0, limit_batch
    if tau(1.0) > limit_s:
        hi = 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if tau(mid) <= limit_s:
            lo = mid
        else:
            hi = mid
    return lo


def decode_bound(
    spec: ModelSpec,
    cluster: Cluster,
    worker: WorkerPlan,
    max_batch: int,
    workload: Workload,
    engine: Engine,
    slo_batch: float,
) -> DecodeBound:
    """One decode worker of ``worker``'s shape under ``max_batch``: its cap (cost/serving_disagg.py
    ``_disaggregated``: max_batch and the KV cache) and its rate at min(cap, ``slo_batch``),
    ``slo_batch`` from decode_slo_batch."""
    c, mem = _ctx(spec, cluster, workload, engine)
    w = workload
    ds = worker_shape(worker.tp, worker.pp, worker.ep, worker.dp_attention)
    budget = memory_budget(c.graph, cluster, ds, w, mem, ds.attn_dp, max_batch)
    cap = max(1.0, min(float(max_batch), math.floor(budget.max_sequences))) if budget.fits else 1.0
    b = min(cap, slo_batch)
    rate = b / round_s(c, ds, b, w.isl, w.osl, False) / w.osl if b > 0 else 0.0
    closed = per_worker = 0.0
    if w.concurrency is not None:  # n_d B <= max(C, n_d) <= C + n_d sequences, each >= tau(1)
        per_worker = 1.0 / round_s(c, ds, 1.0, w.isl, w.osl, False) / w.osl
        closed = w.concurrency * per_worker
    return DecodeBound(ds.gpus, budget.fits, cap, rate, closed, per_worker)


def decode_rate_at(
    spec: ModelSpec, cluster: Cluster, worker: WorkerPlan, workload: Workload, engine: Engine, batch: float
) -> float:
    """Requests/s one decode worker completes at ``batch`` sequences: B / (osl tau(B)). Closed
    loop, n_d workers run B <= min(cap, max(1, concurrency / n_d)) each (cost/serving_disagg.py's fixed
    point takes the requests in prefill off the concurrency), so n_d x this rate at that batch
    (and at most the TPOT SLO's) bounds the pool."""
    c, _ = _ctx(spec, cluster, workload, engine)
    ds = worker_shape(worker.tp, worker.pp, worker.ep, worker.dp_attention)
    return batch / round_s(c, ds, batch, workload.isl, workload.osl, False) / workload.osl


def closed_loop_min_rate(workload: Workload, tau_s: float) -> float:
    """Closed loop with a TTFT SLO: the least requests/s a plan must complete for its mean TTFT
    to meet it. Little's law, C = X (TTFT + (osl - 1) tau) (cost/serving_disagg.py's closed-loop wait is
    what the prompt's path leaves of it, so its mean TTFT is at least C / X - (osl - 1) tau):
    TTFT <= ttft_ms needs X >= C / (ttft_ms + (osl - 1) tau), ``tau_s`` the longest round the
    plan's decode steps can take. 0 without a TTFT SLO or in an open loop."""
    if workload.concurrency is None or workload.ttft_ms is None:
        return 0.0
    return workload.concurrency / (workload.ttft_ms / 1e3 + (workload.osl - 1.0) * tau_s)
