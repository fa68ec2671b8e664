"""The pieces the aggregated and disaggregated serving evaluations share (cost/serving.py,
cost/serving_disagg.py): the evaluation context, a worker's step and round times, the batch at
an offered rate, the queue waits, the first wave of a closed loop, goodput and the KV transfer
between pools. Formulas: cost/serving.py's module docstring and docs/serving_model.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache

from paraplan.cost.comm import p2p_s
from paraplan.cost.kv import WorkerShape, kv_bytes_per_element, kv_bytes_per_sequence, weight_bytes_per_param
from paraplan.cost.queueing import OVERLOAD_RHO, finite_run_wait_s, md1_wait_s, wait_quantile_s
from paraplan.cost.serving_gemm import TILED_MOE_ENGINES_DEFAULT, is_deepep_moe, is_tiled_moe
from paraplan.cost.serving_memory import MemoryBudget
from paraplan.cost.serving_step import StepInput, StepTime, step_time
from paraplan.cost.serving_types import Engine, Workload
from paraplan.graph import LayerGraph, ModelSpec, build_graph
from paraplan.hardware import Cluster
from paraplan.hardware.serving import (
    EngineMemory,
    ServingFit,
    engine_memory,
    is_cpp_runtime,
    is_prefill_first,
    is_serial_pp_host,
    serving_fit,
)

__all__ = [
    "Ctx",
    "Wait",
    "model_graph",
    "engine_context",
    "worker_step",
    "round_s",
    "batch_at_rate",
    "worker_shape",
    "open_wait",
    "at_slo",
    "goodput",
    "prefill_step_s",
    "wave_s",
    "first_wave_share",
    "blend",
    "cohort_service_s",
    "memory_reasons",
    "kv_transfer_s",
]


@cache
def model_graph(spec: ModelSpec) -> LayerGraph:
    return build_graph(spec)


@dataclass(frozen=True, slots=True)
class Ctx:
    """What every step of one evaluation shares: the model, the cluster, the workload, the fit."""

    graph: LayerGraph
    cluster: Cluster
    workload: Workload
    fit: ServingFit
    w_bytes: float
    kv_bytes: float
    cpp_runtime: bool = False
    serial_pp_host: bool = False  # hardware/serving.py is_serial_pp_host
    prefill_first: bool = False  # hardware/serving.py is_prefill_first
    tiled_moe: bool = False  # cost/serving_gemm.py is_tiled_moe: expert row tiles near the tokens per expert
    deepep_moe: bool = False  # cost/serving_gemm.py is_deepep_moe: DeepGEMM's tiles under attention DP + EP


def engine_context(
    spec: ModelSpec,
    cluster: Cluster,
    workload: Workload,
    engine: Engine,
    fit: ServingFit | None = None,
    tiled_moe_engines: frozenset[str] = TILED_MOE_ENGINES_DEFAULT,
) -> tuple[Ctx, EngineMemory]:
    """The step context and engine memory rule of one serving scenario: the precisions' bytes,
    the engine release's runtime flags (hardware/serving.py, cost/serving_gemm.py) and its KV
    fraction (``engine.kv_fraction`` where set). ``fit`` defaults to hardware/data/serving.yaml's;
    ``tiled_moe_engines`` are the engines whose MoE GEMMs tile near their tokens (cost/
    serving_gemm.py ``is_tiled_moe``; another set only for an experiment, benchmarks/
    serving_fidelity.py ``--moe-tiles``). Shared by cost/serving.py ``evaluate_serving`` and
    cost/serving_pools.py."""
    ctx = Ctx(
        model_graph(spec),
        cluster,
        workload,
        fit or serving_fit(),
        weight_bytes_per_param(workload.weights_precision),
        kv_bytes_per_element(workload.kv_precision),
        is_cpp_runtime(engine.name, engine.version),
        is_serial_pp_host(engine.name, engine.version),
        is_prefill_first(engine.name),
        is_tiled_moe(engine.name, tiled_moe_engines),
        is_deepep_moe(engine.name),
    )
    mem = engine_memory(engine.name)
    if engine.kv_fraction is not None:
        mem = replace(mem, kv_fraction=engine.kv_fraction)
    return ctx, mem


def worker_step(c: Ctx, shape: WorkerShape, x: StepInput) -> StepTime:
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
        serial_pp_host=c.serial_pp_host,
        tiled_moe=c.tiled_moe,
        deepep_moe=c.deepep_moe,
    )


def round_s(c: Ctx, shape: WorkerShape, batch: float, isl: float, osl: float, mixed: bool) -> float:
    """tau: time for every one of ``batch`` sequences of a worker to gain a token (pp x the step
    of one micro-batch; with ``mixed`` the prompts replacing finished requests ride along)."""
    micro = max(batch, 1e-9) / shape.pp
    prefill = micro * isl / osl if mixed else 0.0
    x = StepInput(micro, isl + osl / 2.0, prefill, isl, micro / osl if mixed else 0.0)
    return shape.pp * worker_step(c, shape, x).total_s


def batch_at_rate(
    c: Ctx, shape: WorkerShape, rate: float, cap: float, isl: float, osl: float, mixed: bool
) -> float:
    """Batch B <= cap with B / tau(B) = rate x osl (tokens/s demanded of one worker), by bisection
    (B / tau(B) rises with B); cap when the rate is beyond it."""
    demand = rate * osl
    if cap / round_s(c, shape, cap, isl, osl, mixed) <= demand:
        return cap
    lo, hi = 0.0, cap
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        if mid / round_s(c, shape, mid, isl, osl, mixed) < demand:
            lo = mid
        else:
            hi = mid
    return max(hi, 1e-6)


def worker_shape(tp: int, pp: int, ep: int, dp_attention: bool) -> WorkerShape:
    return WorkerShape(tp=tp, pp=pp, ep=ep, dp_attention=dp_attention)


@dataclass(frozen=True, slots=True)
class Wait:
    """Queue wait before a request's prompt starts: mean, median, 90th percentile (the
    prediction's ``p90`` keys) and the SLO's own percentile (goodput). Units: s."""

    mean_s: float = 0.0
    p50_s: float = 0.0
    p90_s: float = 0.0
    slo_s: float = 0.0

    @staticmethod
    def fixed(wait_s: float) -> Wait:
        """The same wait for every request (a closed loop's Little's-law queue)."""
        return Wait(wait_s, wait_s, wait_s, wait_s)


def open_wait(rate: float, server: float, slots: float, w: Workload) -> Wait:
    """Wait at Poisson ``rate`` (per worker) on a server of ``server`` requests/s
    (cost/queueing.py): M/D/1 with its exponential tail, or a finite run's fluid backlog."""
    rho = min(rate / server, OVERLOAD_RHO) if server > 0 else OVERLOAD_RHO
    if w.num_requests is not None:
        mean = finite_run_wait_s(rate, server, w.num_requests, slots)
    else:
        mean = md1_wait_s(min(rate, server * OVERLOAD_RHO), server)
    q = w.percentile / 100.0
    if rate >= server:  # a growing backlog: waits spread evenly from 0 to twice the mean
        return Wait(mean, mean, mean * 2.0 * 0.9, mean * 2.0 * q)
    return Wait(
        mean,
        wait_quantile_s(mean, rho, 0.5),
        wait_quantile_s(mean, rho, 0.9),
        wait_quantile_s(mean, rho, q),
    )


def at_slo(w: Workload, p50: float, p90: float) -> float:
    """A service time at the SLO percentile: the median one (mean lengths) below 90, else the
    90th percentile's (``isl_p90`` / ``osl_p90``), the two percentiles the model predicts."""
    return p90 if w.percentile >= 90 else p50


def goodput(
    requests_per_s: float, ttft_mean_s: float, ttft_slo_s: float, tpot_slo_s: float, w: Workload
) -> float:
    """Requests/s meeting the SLO at its percentile (``ttft_slo_s`` / ``tpot_slo_s``: TTFT and
    TPOT at ``w.percentile``): all of them when both hold, none when TPOT misses (every request
    of a replica sees the same steps) or the mean TTFT misses, else the share under the TTFT
    target, interpolated between the mean (half of the requests, about) and the percentile."""
    if w.tpot_ms is not None and tpot_slo_s * 1e3 > w.tpot_ms:
        return 0.0
    if w.ttft_ms is None or ttft_slo_s * 1e3 <= w.ttft_ms:
        return requests_per_s
    target = w.ttft_ms * 1e-3
    if target <= ttft_mean_s:
        return 0.0
    share = 0.5 + (w.percentile / 100.0 - 0.5) * (target - ttft_mean_s) / (ttft_slo_s - ttft_mean_s)
    return requests_per_s * share


def prefill_step_s(c: Ctx, shape: WorkerShape, tokens: float, isl: float) -> float:
    """One prompt-only step of ``tokens`` prompt tokens (prompts of ``isl``), all pp stages."""
    micro = tokens / shape.pp
    return shape.pp * worker_step(c, shape, StepInput(0.0, 0.0, micro, isl, micro / isl)).total_s


def wave_s(c: Ctx, shape: WorkerShape, wave: float, isl: float, step_tokens: float) -> float:
    """Mean TTFT inside a closed loop's synchronised wave of ``wave`` requests (a benchmark at
    concurrency C starts C requests at once; fixed lengths keep them together): their prompts
    take s = max(1, wave isl / step_tokens) prompt-only steps of t_p and the mean request has its
    first token after (s + 1) / 2 of them. Units: seconds."""
    steps = max(1.0, wave * isl / step_tokens)
    return (steps + 1.0) / 2.0 * prefill_step_s(c, shape, max(isl, min(step_tokens, wave * isl)), isl)


def first_wave_share(c: Ctx, aggregated: bool) -> float:
    """The share of a closed loop's requests whose TTFT is the synchronised wave's (``wave_s``).
    A benchmark at concurrency C (aiperf ``--concurrency C``) starts C requests at once, after a
    warm-up it waits out: AIConfigurator's own harness sends 20 C requests after C (sflow) or 2 C
    (bench_run.sh) warm-up ones (aiconfigurator 0.12.0 wheel, generator/sflow.py and
    generator/config/backend_templates/benchmark/; aiperf 0.3.0 timing/credit_issuing_strategy.py
    waits for each phase's credits before the next), so the first wave is one request in 20.
    Where the engine mixes prompts into decode steps, the wave's requests start decoding as their
    own prompts finish, finish in the same staggered cohorts and come back staggered (the steady
    state, ``cohort_service_s``): the share is ``closed_loop_burst`` (fitted, prior 1 / 20). An
    aggregated prefill-first engine (SGLang, hardware/serving.py ``is_prefill_first``) decodes
    the wave only after its last prompt, so it finishes and comes back together: every round is a
    wave, share 1."""
    if aggregated and c.prefill_first:
        return 1.0
    return c.fit.closed_loop_burst


def blend(c: Ctx, steady_s: float, wave_s: float, aggregated: bool) -> float:
    """``first_wave_share`` of a closed loop's requests see the first wave, the rest the steady
    state."""
    f = first_wave_share(c, aggregated)
    return f * wave_s + (1.0 - f) * steady_s


def cohort_service_s(
    c: Ctx, shape: WorkerShape, batch: float, isl: float, osl: float, chunk: float, prompt_isl: float
) -> float:
    """TTFT service in a closed loop's steady state on an engine that mixes prompts into decode
    steps: the first wave's prompts finished in cohorts of one step's budget, q = min(chunk,
    batch x isl) prompt tokens, whose requests finish in the same step and come back together
    (fixed lengths). A returning cohort waits half a decode-only round for the running step, then
    its prompts ride max(1, isl / chunk) rounds of ``batch`` decode tokens and q prompt tokens:
    0.5 t(B, 0) + max(1, prompt_isl / chunk) t(B, q) (``prompt_isl``: isl or its p90). The
    mean-field service, (1/2 + max(1, isl / chunk)) rounds that spread the same prompts thinly
    over every step (B isl / osl tokens each), is shorter and fits the rows worse (docs/
    serving_model.md Sec. 6.0b). Units: seconds."""
    q = min(chunk, batch * isl)
    micro = max(batch, 1e-9) / shape.pp
    tokens = q / shape.pp
    carried = (
        shape.pp * worker_step(c, shape, StepInput(micro, isl + osl / 2.0, tokens, isl, tokens / isl)).total_s
    )
    return 0.5 * round_s(c, shape, batch, isl, osl, False) + max(1.0, prompt_isl / chunk) * carried


def memory_reasons(budget: MemoryBudget, w: Workload) -> tuple[str, ...]:
    if budget.fits:
        return ()
    return (
        f"weights {budget.weights_bytes / 2**30:.1f} GiB + activations "
        f"{budget.activation_bytes / 2**30:.1f} GiB leave no KV cache for one "
        f"{w.isl + w.osl:.0f}-token sequence in "
        f"{budget.capacity_bytes / 2**30:.1f} GiB per GPU",
    )


def kv_transfer_s(c: Ctx, p: WorkerShape, gpus_total: int, isl: float) -> float:
    """One prompt's KV cache from a prefill worker to a decode worker: each prefill GPU sends its
    shard (kv_bytes_per_sequence of the prompt) over the tier that holds both pools' GPUs
    (NVLink inside an NVL72 rack, the NIC otherwise; cost/comm.py p2p_s). Units: seconds."""
    per_gpu = kv_bytes_per_sequence(c.graph, p, c.kv_bytes, isl)
    return p2p_s(c.cluster.tier_of_span(gpus_total), per_gpu)
