"""A Result as one self-contained HTML page (``paraplan plan ... --report plan.html``).

Inline CSS and SVG only: no script, no font, image or stylesheet from the network, so it opens
offline and can be mailed. Sections (each an element with this id):

- ``summary``: model, cluster, job, step time and its uncertainty band, MFU, solver status;
- ``schedule``: the pipeline schedule of one step from the cost model's trace (report_svg.py);
- ``memory``: memory per stage as stacked parts against device capacity;
- ``cluster``: link tiers with the parallel groups that cross them (report_cluster.py);
- ``alternatives``: the runner-up plans side by side with what differs from the chosen one.

Every text that comes from the user (scenario names, paths) or the result is HTML-escaped.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from paraplan.cost import StageTerms, stage_terms
from paraplan.errors import ConfigError
from paraplan.export import ExportContext, context
from paraplan.export.trace import build_trace
from paraplan.reports.cluster import cluster_svgs, group_rows, groups_table
from paraplan.reports.html_style import CSS
from paraplan.reports.svg import (
    COLORS,
    GIB,
    MEMORY_COLORS,
    backward_shares,
    legend_html,
    memory_parts,
    memory_svg,
    part_label,
    schedule_svg,
)
from paraplan.result import Result

__all__ = ["report_html", "write_report", "check_report_path", "SECTION_IDS", "REPORT_TOP"]

REPORT_TOP = 3  # plans `paraplan plan --report` asks for when --top is left at 1 (runner-ups)
SECTION_IDS = ("summary", "schedule", "memory", "cluster", "alternatives")
COMPARED_KNOBS = (
    "dp",
    "tp",
    "pp",
    "cp",
    "ep",
    "etp",
    "vp",
    "micro_batch",
    "grad_accum",
    "zero",
    "sequence_parallel",
    "recompute",
    "cp_comm",
    "layers_per_stage",
    "order",
    "stage_pools",
)


def _e(x: Any) -> str:
    return escape(str(x))


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms"


def _devices(n: int) -> str:
    return f"{n:,} device" + ("" if n == 1 else "s")


def _model_name(scenario: dict[str, Any]) -> str:
    model = scenario.get("model", {})
    if model.get("preset"):
        return str(model["preset"])
    if model.get("hf_config"):
        return f"Hugging Face config {model['hf_config']}"
    keys = ("layers", "hidden", "heads")
    return "explicit model " + ", ".join(f"{k} {model[k]}" for k in keys if k in model)


def _cluster_name(ctx: ExportContext) -> str:
    c = ctx.cluster
    if c.pools:
        parts = " + ".join(
            f"{p.num_nodes} x {p.name} ({p.num_devices} {p.accelerator.name})" for p in c.pools
        )
        return f"{parts}, {c.num_devices:,} devices"
    return (
        f"{c.num_nodes:,} x {c.name}: {c.num_devices:,} x {c.accelerator.name}, "
        f"{c.accelerator.hbm_bytes / GIB:,.0f} GiB each"
    )


def _summary(r: Result, ctx: ExportContext) -> str:
    q, job = r.predicted, r.scenario.get("job", {})
    band = q.step_time_band_s
    kpis = [
        ("step time", f"{q.step_time_s:,.3f} s"),
        ("p10-p90 band", f"{band.p10:,.2f}-{band.p90:,.2f} s" if band else "n/a"),
        ("MFU", f"{q.mfu:.1%}"),
        ("tokens/s/GPU", f"{q.tokens_per_s_per_gpu:,.0f}"),
        ("peak memory", f"{q.peak_memory_bytes / GIB:,.1f} / {q.memory_capacity_bytes / GIB:,.1f} GiB"),
    ]
    if r.solver:
        kpis.append(("solver", f"{r.solver.status}, gap {r.solver.gap:.2%}"))
    else:
        kpis.append(("solver", "evaluated (fixed plan)"))
    facts = [
        ("model", _model_name(r.scenario)),
        ("cluster", _cluster_name(ctx)),
        (
            "job",
            f"seq_len {job.get('seq_len')}, global_batch {job.get('global_batch')}, "
            f"precision {job.get('precision', 'bf16')}, {q.num_micro_batches} "
            "micro-batches per step per dp rank",
        ),
        (
            "step",
            f"compute {_ms(q.compute_s)} + exposed comm {_ms(q.exposed_comm_s)} + "
            f"bubble {_ms(q.bubble_s)} + optimizer {_ms(q.optimizer_s)}",
        ),
    ]
    if band:
        facts.append(("band source", band.source))
    if r.solver:
        v = r.solver
        facts.append(
            (
                "proof",
                f"{v.status}: objective {v.objective_s:.4f} s, bound "
                f"{v.bound_s:.4f} s, {v.wall_s:.2f} s wall, {v.num_layouts:,} "
                f"layouts ({v.num_layouts_pruned:,} left out by bound, dominance "
                f"or memory)" + (f"; target {v.target}" if v.target else ""),
            )
        )
    why = (
        "<ul class='why'>" + "".join(f"<li>{_e(x)}</li>" for x in r.explanation) + "</ul>"
        if r.explanation
        else ""
    )
    return (
        '<header class="top" id="summary"><h1>paraplan plan: '
        + _e(_model_name(r.scenario))
        + f" on {_devices(ctx.cluster.num_devices)}</h1>"
        + f'<div class="plan">{_e(_plan_line(r.plan.model_dump()))}</div>'
        + '<div class="kpis">'
        + "".join(f'<div class="kpi"><b>{_e(v)}</b><span>{_e(k)}</span></div>' for k, v in kpis)
        + "</div>"
        + '<dl class="facts">'
        + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in facts)
        + "</dl>"
        + why
        + "</header>"
    )


def _plan_line(plan: dict[str, Any]) -> str:
    rec = plan.get("recompute")
    rec = rec if isinstance(rec, str) else ",".join(rec or [])
    return (
        f"dp={plan.get('dp')} tp={plan.get('tp')} pp={plan.get('pp')} cp={plan.get('cp')} "
        f"ep={plan.get('ep')} vp={plan.get('vp')} micro_batch={plan.get('micro_batch')} "
        f"zero={plan.get('zero')} sp={'on' if plan.get('sequence_parallel') else 'off'} "
        f"recompute={rec} layers_per_stage={plan.get('layers_per_stage')} "
        f"order={'-'.join(plan.get('order') or [])}"
    )


def _schedule(ctx: ExportContext, terms: StageTerms) -> str:
    q, plan = ctx.result.predicted, ctx.plan
    shares = backward_shares(terms, list(plan.layers_per_stage), list(plan.recompute))
    legend = legend_html(
        [
            (COLORS["forward"], "forward"),
            (COLORS["backward"], "backward (recompute included)"),
            (COLORS["exposed"], "exposed communication"),
            (COLORS["overlapped"], "communication hidden behind compute"),
            ("#C9CED6", "bubble: pipeline fill/drain, stall for the slowest stage"),
            (COLORS["optimizer"], "optimizer step"),
        ]
    )
    return (
        '<section id="schedule"><h2>Pipeline schedule of one step</h2>'
        f'<p class="note">The modelled step ({q.step_time_s * 1e3:,.1f} ms): each pipeline stage '
        f"runs {q.num_micro_batches} micro-batch slots of its forward and backward work, then the "
        "exposed gradient sync and the optimizer; the slowest stage (bold) is the critical path. "
        "Link lanes show when each group's traffic is on the wire. Hover a block for its time."
        f"</p>{legend}{schedule_svg(build_trace(ctx), shares)}</section>"
    )


def _memory(ctx: ExportContext, terms: StageTerms) -> str:
    q = ctx.result.predicted
    caps = [terms.stage_capacity_bytes(s.stage) for s in q.stages]
    legend = legend_html(
        [(MEMORY_COLORS[k % len(MEMORY_COLORS)], part_label(p)) for k, p in enumerate(memory_parts())]
        + [(COLORS["capacity"], "device capacity")]
    )
    rows = "".join(
        f"<tr><td>{s.stage}</td>"
        + "".join(f"<td>{getattr(s, p) / GIB:,.2f}</td>" for p in memory_parts())
        + f"<td>{s.allocated_bytes / GIB:,.2f}</td><td>{s.reserved_bytes / GIB:,.2f}</td>"
        + f"<td><b>{s.total_bytes / GIB:,.2f}</b></td><td>{caps[i] / GIB:,.2f}</td></tr>"
        for i, s in enumerate(q.stages)
    )
    head = (
        "<tr><th>stage</th>"
        + "".join(f"<th>{_e(part_label(p))}</th>" for p in memory_parts())
        + "<th>allocated</th><th>reserved</th><th>total</th><th>capacity</th></tr>"
    )
    fits = "fits" if q.fits_memory else "does NOT fit"
    return (
        '<section id="memory"><h2>Memory per stage</h2>'
        f'<p class="note">Per device of each pipeline stage, GiB; the plan {fits} '
        f"(peak {q.peak_memory_bytes / GIB:,.1f} of {q.memory_capacity_bytes / GIB:,.1f} GiB). "
        "Allocated: tensor bytes (torch max_memory_allocated); reserved: allocated plus the "
        "caching allocator's overhead (max_memory_reserved); total adds the CUDA context and "
        "NCCL buffers (cost/memory.py)."
        f"</p>{legend}{memory_svg(q, caps)}"
        f'<table class="memory">{head}{rows}</table></section>'
    )


def _cluster(ctx: ExportContext) -> str:
    rows = group_rows(ctx.cluster, ctx.plan)
    order = "-".join(a.value for a in ctx.plan.order)
    return (
        '<section id="cluster"><h2>Cluster, link tiers and parallel groups</h2>'
        f'<p class="note">Rank order {_e(order)} (innermost first). Each tier band lists the '
        "groups whose traffic crosses it, with the group's fan-in there (members per domain one "
        "tier in); the devices below are coloured by pipeline stage, and dots mark the members "
        "of rank 0's groups.</p>"
        f"{cluster_svgs(ctx.cluster, ctx.plan, rows)}{groups_table(rows)}</section>"
    )


def _knob(plan: dict[str, Any], key: str) -> str:
    v = plan.get(key)
    if key == "etp" and v is None:
        v = plan.get("tp")
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, list):
        if not v:
            return "-"
        return "-".join(map(str, v)) if key == "order" else ", ".join(map(str, v))
    return "-" if v is None else str(v)


def _time_cell(t: float, t0: float, top: float) -> str:
    """A step time, its difference to the chosen plan's and a bar to compare at a glance."""
    rel = (t - t0) / t0
    delta = "" if t == t0 else " (tie)" if abs(rel) < 5e-5 else f" ({rel:+.2%})"
    return (
        f'<td class="mono">{t:.4f} s{delta}<svg viewBox="0 0 120 8" width="120" height="8">'
        f'<rect width="{120 * t / top:.1f}" height="8" rx="2" fill="{COLORS["backward"]}"/>'
        "</svg></td>"
    )


def _alternatives(r: Result) -> str:
    head = '<section id="alternatives"><h2>Runner-up plans</h2>'
    if not r.alternatives:
        return (
            head + '<p class="note">No runner-ups in this result: <span class="mono">'
            "paraplan plan SCENARIO --top 3 --report plan.html</span> lists the next best "
            "plans that differ in a degree or mode.</p></section>"
        )
    best = r.plan.model_dump()
    plans = [("#1 (chosen)", best, r.predicted.step_time_s)] + [
        (f"#{i}", a.plan.model_dump(), a.step_time_s) for i, a in enumerate(r.alternatives, 2)
    ]
    t0 = plans[0][2]
    band = r.predicted.step_time_band_s
    top = max(t for _, _, t in plans)
    cols = "".join(f"<th>{_e(n)}</th>" for n, _, _ in plans)
    lines = ["<tr><th>step time</th>" + "".join(_time_cell(t, t0, top) for _, _, t in plans) + "</tr>"]
    if band:
        lines.append(
            "<tr><th>inside #1's band</th>"
            + "".join(f"<td>{'yes' if band.p10 <= t <= band.p90 else 'no'}</td>" for _, _, t in plans)
            + "</tr>"
        )
    diffs = []
    for _, plan, _ in plans:
        changed = [k for k in COMPARED_KNOBS if plan and _knob(plan, k) != _knob(best, k)]
        diffs.append(
            ", ".join(f"{k} {_knob(best, k)} → {_knob(plan, k)}" for k in changed)
            if plan is not best
            else "-"
        )
    lines.append("<tr><th>what differs</th>" + "".join(f"<td>{_e(d)}</td>" for d in diffs) + "</tr>")
    for k in COMPARED_KNOBS:
        cells = [_knob(p, k) for _, p, _ in plans]
        if all(c == "-" for c in cells):
            continue
        lines.append(
            f"<tr><th>{_e(k)}</th>"
            + "".join(
                f'<td class="{"diff" if i and c != cells[0] else ""}">{_e(c)}</td>'
                for i, c in enumerate(cells)
            )
            + "</tr>"
        )
    return (
        head + '<p class="note">The next best plans the solver proved, in order; cells that '
        "differ from the chosen plan are highlighted.</p>"
        f'<table class="alts"><tr><th></th>{cols}</tr>{"".join(lines)}</table></section>'
    )


def capacity_html(result: Result) -> str:
    """The time-to-train and cluster-search section (paraplan/capacity/html.py); "" without."""
    from paraplan.capacity.html import capacity_section

    return capacity_section(result)


def report_html(result: Result) -> str:
    """The report page of ``result`` (module docstring); ConfigError if its scenario no longer
    loads."""
    ctx = context(result)
    title = f"paraplan: {_model_name(result.scenario)} on {_devices(ctx.cluster.num_devices)}"
    terms = stage_terms(ctx.inst.graph, ctx.plan, ctx.inst.job, ctx.cluster)
    body = (
        _summary(result, ctx)
        + _schedule(ctx, terms)
        + _memory(ctx, terms)
        + _cluster(ctx)
        + _alternatives(result)
        + capacity_html(result)
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body><main>{body}"
        f"<footer>paraplan {_e(result.version)} · modelled by paraplan's cost model; times and "
        "memory are predictions, not measurements</footer></main></body></html>\n"
    )


def check_report_path(path: str | Path) -> Path:
    """``path`` if a report can be written there (checked before solving); else ConfigError."""
    out = Path(path)
    if out.is_dir():
        raise ConfigError(f"--report {out}: is a folder; give a file name such as {out / 'plan.html'}")
    if not out.parent.is_dir():
        raise ConfigError(f"--report {out}: folder {out.parent} does not exist; create it first")
    return out


def write_report(result: Result, path: str | Path) -> Path:
    """Write ``report_html(result)`` to ``path`` (UTF-8); returns the path. ConfigError when the
    file cannot be written."""
    out = check_report_path(path)
    page = report_html(result)
    try:
        out.write_text(page, encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"--report {out}: cannot write it ({e.strerror or e})") from None
    return out
