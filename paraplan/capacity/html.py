"""The report's capacity section: the time-to-train terms, the cluster search's explanation, and
the clusters solved as time against cost with their Pareto front (no other cluster solved is
both faster and cheaper)."""

from __future__ import annotations

from html import escape

from paraplan.capacity.out import ClusterOption
from paraplan.reports.svg import MEMORY_COLORS, Svg, nice_ticks
from paraplan.result import Result

__all__ = ["capacity_section", "pareto_front", "scatter_svg", "sweep_report_html"]


def pareto_front(options: list[ClusterOption]) -> list[ClusterOption]:
    """The options no other one beats in both time and cost (priced options only), fastest first."""
    priced = [o for o in options if o.cost_usd is not None]
    front = [
        o
        for o in priced
        if not any(
            p.time_to_train_days <= o.time_to_train_days
            and (p.cost_usd or 0.0) <= (o.cost_usd or 0.0)
            and (p.time_to_train_days, p.cost_usd) != (o.time_to_train_days, o.cost_usd)
            for p in priced
        )
    ]
    return sorted(front, key=lambda o: o.time_to_train_days)


Point = tuple[str, float, float, str]  # label, days, usd, group (the colour)


def _front(points: list[Point]) -> list[Point]:
    """The points no other one beats in both time and cost, fastest first."""
    front = [
        p
        for p in points
        if not any(q[1] <= p[1] and q[2] <= p[2] and (q[1], q[2]) != (p[1], p[2]) for q in points)
    ]
    return sorted(front, key=lambda p: p[1])


def scatter_svg(points: list[Point], chosen: str | None = None) -> str:
    """Time to train (x) against cost (y), one colour per group, the Pareto front dashed."""
    if not points:
        return ""
    width, height, left, bottom, top_pad, right = 900.0, 380.0, 80.0, 50.0, 20.0, 20.0
    x_top = max(p[1] for p in points) * 1.08 or 1.0
    y_top = max(p[2] for p in points) / 1e6 * 1.08 or 1.0
    plot_w, plot_h = width - left - right, height - bottom - top_pad
    svg = Svg(width, height, "time to train against cost")

    def at(days: float, usd: float) -> tuple[float, float]:
        return left + plot_w * days / x_top, top_pad + plot_h * (1 - usd / 1e6 / y_top)

    for t in nice_ticks(x_top, 8):
        x, _ = at(t, 0.0)
        svg.line(x, top_pad, x, top_pad + plot_h, "#E5E7EB")
        svg.text(x, height - bottom + 18, f"{t:g}", text_anchor="middle", font_size=11)
    for t in nice_ticks(y_top, 6):
        _, y = at(0.0, t * 1e6)
        svg.line(left, y, left + plot_w, y, "#E5E7EB")
        svg.text(left - 8, y + 4, f"${t:g}M", text_anchor="end", font_size=11)
    svg.text(left + plot_w / 2, height - 8, "time to train (days)", text_anchor="middle", font_size=12)
    groups = sorted({p[3] for p in points})
    colour = {g: MEMORY_COLORS[i % len(MEMORY_COLORS)] for i, g in enumerate(groups)}
    ends = [at(p[1], p[2]) for p in _front(points)]
    for (x1, y1), (x2, y2) in zip(ends, ends[1:], strict=False):
        svg.line(x1, y1, x2, y2, "#111827", stroke_width=1.5, stroke_dasharray="4 3")
    for label, days, usd, group in points:
        x, y = at(days, usd)
        mine = label == chosen
        tip = escape(f"{label}: {days:,.1f} days, ${usd / 1e6:,.2f}M")
        stroke = ' stroke="#111827" stroke-width="2"' if mine else ""
        svg.raw(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{7 if mine else 4.5}" fill="{colour[group]}"{stroke}>'
            f"<title>{tip}</title></circle>"
        )
    legend = "".join(
        f'<span><i style="background:{escape(colour[g])}"></i>{escape(g)}</span>' for g in groups
    )
    return svg.render("schedule") + f'<div class="legend">{legend}<span>- - Pareto front</span></div>'


def _label(o: ClusterOption) -> str:
    return f"{o.preset} x {o.gpus:,}"


def _scatter(options: list[ClusterOption], chosen: tuple[str, int]) -> str:
    points = [
        (_label(o), o.time_to_train_days, o.cost_usd, o.preset) for o in options if o.cost_usd is not None
    ]
    return scatter_svg(points, f"{chosen[0]} x {chosen[1]:,}")  # type: ignore[arg-type]


def sweep_report_html(rows: list[dict[str, str]], paths: list[str]) -> str:
    """A page of a sweep's rows (``paraplan sweep --report``): time against cost with the Pareto
    front, and the front's rows with their grid values."""
    from paraplan.reports.html import CSS

    points: list[Point] = []
    by_label: dict[str, dict[str, str]] = {}
    for r in rows:
        if r.get("status") != "ok" or not r.get("time_to_train_days") or not r.get("cost_usd"):
            continue
        label = f"#{r['index']} " + ", ".join(f"{p}={r.get(p, '')}" for p in paths)
        points.append((label, float(r["time_to_train_days"]), float(r["cost_usd"]), r.get("preset") or "-"))
        by_label[label] = r
    front = _front(points)
    head = "".join(
        f"<th>{escape(h)}</th>" for h in ["#", *paths, "cluster", "days", "cost", "goodput", "plan"]
    )
    body = "".join(
        "<tr>"
        + "".join(
            f"<td>{escape(v)}</td>"
            for v in [
                by_label[p[0]]["index"],
                *(by_label[p[0]].get(k, "") for k in paths),
                f"{by_label[p[0]]['preset']} x {by_label[p[0]]['gpus']}",
                f"{p[1]:,.1f}",
                f"${p[2]:,.0f}",
                f"{float(by_label[p[0]]['effective_training_time_ratio'] or 0):.1%}",
                " ".join(f"{k}={by_label[p[0]][k]}" for k in ("dp", "tp", "pp", "cp", "ep", "micro_batch")),
            ]
        )
        + "</tr>"
        for p in front
    )
    note = (
        f"{len(points):,} of {len(rows):,} rows have a time to train and a cost; "
        f"{len(front):,} are on the Pareto front (no other row is both faster and cheaper)."
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>paraplan sweep</title>'
        f"<style>{CSS}</style></head><body><main><section><h2>Sweep: time against cost</h2>"
        f'<p class="note">{escape(note)}</p>{scatter_svg(points)}'
        f'<h2>Pareto front</h2><table class="alts"><tr>{head}</tr>{body}</table></section>'
        "<footer>modelled by paraplan's cost model; predictions, not measurements</footer>"
        "</main></body></html>\n"
    )


def capacity_section(result: Result) -> str:
    p, t = result.predicted, result.training
    if t is None or p.time_to_train_days is None or result.cluster is None:
        return ""
    c = result.cluster
    cost = f"${p.cost_usd:,.0f}" if p.cost_usd is not None else "no price"
    rows = [
        (
            "time to train",
            f"{p.time_to_train_days:,.1f} days (band {t.time_to_train_band_days[0]:,.1f}-"
            f"{t.time_to_train_band_days[1]:,.1f})",
        ),
        ("cost", f"{cost} ({t.gpu_hours:,.0f} GPU-hours x ${t.price_per_gpu_hour or 0:,.2f})"),
        (
            "goodput",
            f"{p.effective_training_time_ratio:.1%} of {t.steps:,} steps ({t.compute_days:,.1f} days)",
        ),
        (
            "failures",
            f"MTBF {t.mtbf_h:,.2f} h, {p.expected_interruptions:,.0f} expected interruptions, "
            f"{t.lost_per_failure_s:,.0f} s lost each",
        ),
        (
            "checkpoint",
            f"{t.checkpoint_bytes / 1e12:,.2f} TB every {t.checkpoint_steps} steps "
            f"({p.checkpoint_interval_s:,.0f} s; Young/Daly {t.young_interval_s:,.0f} s), stall "
            f"{t.checkpoint_stall_s:.3g} s, write {t.checkpoint_write_s:,.1f} s, restore "
            f"{t.checkpoint_restore_s:,.1f} s ({t.storage})",
        ),
        ("price source", t.price_source or "none"),
    ]
    table = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows)
    html = (
        f'<section id="capacity"><h2>Time to train on {escape(c.preset)} x {c.gpus:,}</h2>'
        f'<table class="alts">{table}</table>'
    )
    cap = result.capacity
    if cap is not None:
        items = "".join(f"<li>{escape(line)}</li>" for line in cap.explanation)
        html += f"<h2>Cluster search ({escape(cap.status)})</h2><ul>{items}</ul>" + _scatter(
            cap.examined or cap.clusters, (c.preset, c.gpus)
        )
    return html + "</section>"
