"""Human-readable rendering of a Result (the CLI's default output)."""

from __future__ import annotations

from paraplan.result import Result, StepTimeBandOut

__all__ = ["render_result", "gib"]


def gib(n_bytes: float) -> str:
    return f"{n_bytes / 2**30:.1f} GiB"


def _band_lines(band: StepTimeBandOut | None) -> list[str]:
    if band is None:
        return []
    return [f"band      {band.p10:.3f}-{band.p90:.3f} s ({band.source})"]


def _runs_on_lines(r: Result) -> list[str]:
    """``runs on: megatron, nemo``: the frameworks whose exporter takes the plan as it is."""
    if r.runs_on is None:
        return []
    if r.runs_on:
        return [f"runs on: {', '.join(r.runs_on)}"]
    return [
        "runs on: no framework as it is (paraplan export --to NAME names the nearest plan "
        "NAME runs; solver.target: NAME plans for it)"
    ]


def render_result(r: Result) -> str:
    p, q = r.plan, r.predicted
    rec = p.recompute if isinstance(p.recompute, str) else ",".join(p.recompute)
    lines = [
        f"plan      dp={p.dp} tp={p.tp} pp={p.pp} cp={p.cp} ep={p.ep} etp={p.etp or p.tp} "
        f"vp={p.vp} micro_batch={p.micro_batch} grad_accum={p.grad_accum} zero={p.zero} "
        f"sp={'on' if p.sequence_parallel else 'off'} recompute={rec}"
        + (f" recompute_layers={p.recompute_layers}" if p.recompute_layers else "")
        + (f" cp_comm={p.cp_comm}" if p.cp > 1 else ""),
        f"          layers_per_stage={p.layers_per_stage} order={'-'.join(p.order)} "
        f"({p.num_devices} devices)" + (f" stage_pools={p.stage_pools}" if p.stage_pools else ""),
        f"step      {q.step_time_s:.3f} s = compute {q.compute_s:.3f} + exposed comm "
        f"{q.exposed_comm_s:.3f} + bubble {q.bubble_s:.3f} + optimizer {q.optimizer_s:.3f}",
        *_band_lines(q.step_time_band_s),
        f"speed     {q.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, {q.model_tflops_per_gpu:.0f} model "
        f"TFLOP/s/GPU, MFU {q.mfu:.1%}",
        f"memory    peak {gib(q.peak_memory_bytes)} of {gib(q.memory_capacity_bytes)}"
        + ("" if q.fits_memory else "  ** DOES NOT FIT **")
        + (
            f" (allocated {gib(q.peak_allocated_bytes)}, reserved {gib(q.peak_reserved_bytes)})"
            if q.peak_allocated_bytes
            else ""
        ),
        *_runs_on_lines(r),
        "",
        "stage  layers  recompute  t/microbatch   weights    grads      optimizer  activations  "
        "buffers    allocated  reserved   total",
    ]
    pooled = any(s.pool is not None for s in q.stages)
    if pooled:  # mixed-GPU cluster: which pool (index in cluster.pools) runs each stage
        lines[-1] = "stage  pool  " + lines[-1].removeprefix("stage  ")
    for s in q.stages:
        pool = f"{s.pool:>4}  " if pooled else ""
        lines.append(
            f"{s.stage:>5}  {pool}{s.layers:>6}  {s.recompute:<9}  {s.time_per_micro_batch_s * 1e3:>9.1f} ms"
            f"  {gib(s.weights_bytes):>9}  {gib(s.grads_bytes):>9}  {gib(s.optimizer_bytes):>9}"
            f"  {gib(s.activations_bytes):>11}  {gib(s.buffers_bytes):>9}  {gib(s.allocated_bytes):>9}"
            f"  {gib(s.reserved_bytes):>9}  {gib(s.total_bytes):>9}"
        )
    if r.solver:
        v = r.solver
        lines += [
            "",
            f"solver    {v.status}: objective {v.objective_s:.4f} s, bound {v.bound_s:.4f} s, "
            f"gap {v.gap:.2%}, {v.wall_s:.2f} s wall ({v.workers} workers, seed {v.seed}, "
            f"limit {v.time_limit_s:g} s); {v.num_layouts} layouts, {v.num_layouts_pruned} "
            "left out by bound, dominance or memory",
        ]
        if v.target == "any":
            lines.append(
                "          searched every plan the cost model allows (solver.target: "
                "any): the unrestricted optimum, which may run on no framework"
            )
        elif v.target:
            lines.append(
                f"          searched only plans {v.target} can run (solver.target): layouts "
                "its rules refuse are among those left out"
            )
        else:
            lines.append(
                "          searched the plans at least one framework runs (the default; "
                "solver.target: any for the unrestricted optimum)"
            )
    if r.explanation:
        lines += ["", "why this plan"] + [f"  - {e}" for e in r.explanation]
    if r.alternatives:
        lines += ["", "runners-up"]
        band = q.step_time_band_s
        for i, alt in enumerate(r.alternatives, 2):
            inside = band is not None and band.p10 <= alt.step_time_s <= band.p90
            on = alt.runs_on
            lines.append(
                f"  #{i} {alt.summary}: {alt.step_time_s:.4f} s"
                + ("  (inside #1's band)" if inside else "")
                + (f"  [runs on: {', '.join(on) or 'none'}]" if on is not None else "")
            )
    lines.append(f"\nparaplan {r.version}")
    return "\n".join(lines)
