"""Human-readable rendering of a ServingResult (the CLI's default output for a serving scenario)."""

from __future__ import annotations

from paraplan.reports.text import gib
from paraplan.serving.result import ServingResult
from paraplan.serving.schema import ServingPlanDoc, WorkerDoc

__all__ = ["render_serving"]

_UNITS = {"goodput_per_gpu": "req/s per GPU", "min_gpus": "GPUs", "min_ttft": "ms TTFT"}


def _worker(w: WorkerDoc) -> str:
    return (
        f"tp={w.tp} pp={w.pp} ep={w.ep} dp_attention={'on' if w.dp_attention else 'off'} workers={w.workers}"
    )


def _plan_lines(p: ServingPlanDoc) -> list[str]:
    chunked = "on" if p.chunked_prefill else "off"
    tail = f"max_batch={p.max_batch} max_num_tokens={p.max_num_tokens} chunked_prefill={chunked}"
    if p.mode == "disaggregated":
        assert p.prefill is not None and p.decode is not None
        return [
            f"plan      disaggregated ({p.num_devices} GPUs) {tail}",
            f"  prefill {_worker(p.prefill)}",
            f"  decode  {_worker(p.decode)}",
        ]
    return [
        f"plan      aggregated tp={p.tp} pp={p.pp} ep={p.ep} "
        f"dp_attention={'on' if p.dp_attention else 'off'} replicas={p.replicas} ({p.num_devices} GPUs)",
        f"          {tail}",
    ]


def render_serving(r: ServingResult) -> str:
    q = r.predicted
    m = q.memory_per_gpu
    lines = [
        *_plan_lines(r.plan),
        f"latency   TTFT p50 {q.ttft_ms.p50:,.1f} ms, p90 {q.ttft_ms.p90:,.1f} ms; "
        f"TPOT p50 {q.tpot_ms.p50:.2f} ms, p90 {q.tpot_ms.p90:.2f} ms"
        + ("" if q.meets_slo else "  ** SLO NOT MET **"),
        f"speed     {q.output_tokens_per_s:,.0f} output tok/s, {q.output_tokens_per_s_per_gpu:,.0f} per GPU; "
        f"goodput {q.goodput_requests_per_s:,.3f} req/s; decode batch {q.batch:,.1f}",
    ]
    if q.band is not None:
        b = q.band
        lines.append(
            f"band      TPOT p50 {b.tpot_ms.p10:.2f}-{b.tpot_ms.p90:.2f} ms, "
            f"{b.output_tokens_per_s_per_gpu.p10:,.0f}-{b.output_tokens_per_s_per_gpu.p90:,.0f} tok/s per GPU"
        )
    lines.append(
        f"memory    per GPU: weights {gib(m.weights)}, KV cache {gib(m.kv_cache)} "
        f"({q.kv_cache_tokens:,} tokens), "
        f"activations {gib(m.activations)}, buffers {gib(m.buffers)} of {gib(q.memory_capacity_bytes)}"
        + ("" if q.fits_memory else "  ** DOES NOT FIT **")
    )
    if r.solver:
        v = r.solver
        unit = _UNITS.get(v.objective, "")
        lines += [
            "",
            f"solver    {v.status}: {v.objective} {v.objective_value:,.4g} {unit}, bound {v.bound:,.4g}, "
            f"{v.wall_s:.2f} s wall ({v.workers} workers, seed {v.seed}, limit {v.time_limit_s:g} s); "
            f"{v.num_candidates:,} candidates scored by cost.serving",
        ]
    if r.explanation:
        lines += ["", "why this plan"] + [f"  - {e}" for e in r.explanation]
    if r.alternatives:
        lines += ["", "runners-up"]
        unit = _UNITS.get(r.solver.objective if r.solver else "", "")
        for i, alt in enumerate(r.alternatives, 2):
            lines.append(f"  #{i} {alt['summary']}: {alt['objective_value']:,.4g} {unit}")
    lines.append(f"\nparaplan {r.version}")
    return "\n".join(lines)
