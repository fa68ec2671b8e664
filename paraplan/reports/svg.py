"""Inline SVG pieces of the HTML plan report: a tiny SVG writer, the pipeline schedule of one
step and memory per stage against capacity.

The schedule draws the Chrome trace of the modelled step (``paraplan.export.trace.build_trace``,
itself built from the cost model): one lane per pipeline stage, one per communication link
group. Each micro-batch slot's compute block is split into forward and backward (recompute
included) by the stage's own cost terms (``StageTerms.stage_backward_s`` over
``stage_compute_s``); nothing here re-derives a cost.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from html import escape
from typing import Any

from paraplan.cost import StageTerms
from paraplan.cost.recompute_layers import recomputed_counts, stage_cost
from paraplan.export.trace import CRITICAL_PATH_KEY, US_PER_S
from paraplan.result import Predicted, StageOut

__all__ = [
    "Svg",
    "nice_ticks",
    "schedule_svg",
    "backward_shares",
    "memory_svg",
    "memory_parts",
    "part_label",
    "legend_html",
    "COLORS",
    "MEMORY_COLORS",
    "GIB",
]

GIB = 2**30
MS_PER_S = 1e3
MIN_DRAWN_PX = 0.25  # narrower events are not drawn (the trace keeps zero-length remainders)
LABEL_MIN_PX = 18  # a block this wide carries its micro-batch number

COLORS = {
    "forward": "#7EA8E6",
    "backward": "#2F5DA8",
    "exposed": "#F28E2B",
    "overlapped": "#FCD9B0",
    "bubble": "#D5D8DC",
    "optimizer": "#9C6ADE",
    "capacity": "#C0392B",
}
MEMORY_COLORS = [
    "#4E79A7",
    "#59A14F",
    "#EDC948",
    "#F28E2B",
    "#B07AA1",
    "#76B7B2",
    "#FF9DA7",
    "#9C755F",
    "#BAB0AC",
]


def _attrs(attrs: dict[str, Any]) -> str:
    """Keyword arguments as SVG attributes: ``class_`` -> class, ``stroke_width`` -> stroke-width."""
    return "".join(f' {k.rstrip("_").replace("_", "-")}="{escape(str(v))}"' for k, v in attrs.items())


def _num(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".")


@dataclass
class Svg:
    """An inline ``<svg>`` (no xmlns: HTML5 inline SVG needs none, so the page names no URL).
    Every text and tooltip is HTML-escaped here."""

    width: float
    height: float
    label: str
    parts: list[str] = field(default_factory=list)

    def rect(
        self, x: float, y: float, w: float, h: float, fill: str, title: str | None = None, **attrs: Any
    ) -> None:
        extra = _attrs(attrs)
        tip = f"<title>{escape(title)}</title>" if title else ""
        self.parts.append(
            f'<rect x="{_num(x)}" y="{_num(y)}" width="{_num(max(w, 0.0))}" '
            f'height="{_num(h)}" fill="{escape(fill)}"{extra}>{tip}</rect>'
        )

    def text(self, x: float, y: float, s: str, **attrs: Any) -> None:
        extra = _attrs(attrs)
        self.parts.append(f'<text x="{_num(x)}" y="{_num(y)}"{extra}>{escape(s)}</text>')

    def line(self, x1: float, y1: float, x2: float, y2: float, stroke: str, **attrs: Any) -> None:
        extra = _attrs(attrs)
        self.parts.append(
            f'<line x1="{_num(x1)}" y1="{_num(y1)}" x2="{_num(x2)}" y2="{_num(y2)}" '
            f'stroke="{escape(stroke)}"{extra}/>'
        )

    def raw(self, markup: str) -> None:
        """Trusted markup built in this package (definitions, groups); never user text."""
        self.parts.append(markup)

    def render(self, css_class: str) -> str:
        return (
            f'<svg class="{css_class}" viewBox="0 0 {_num(self.width)} {_num(self.height)}" '
            f'width="{_num(self.width)}" height="{_num(self.height)}" role="img" '
            f'aria-label="{escape(self.label)}">' + "".join(self.parts) + "</svg>"
        )


def nice_ticks(top: float, target: int = 8) -> list[float]:
    """Round tick values 0, d, 2d, ... <= top, d in {1, 2, 2.5, 5} x 10^k, about ``target`` ticks."""
    if top <= 0:
        return [0.0]
    raw = top / target
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    return [i * step for i in range(int(top / step + 1e-9) + 1)]


def legend_html(items: list[tuple[str, str]]) -> str:
    """An HTML legend: (colour, label) swatches."""
    return (
        '<div class="legend">'
        + "".join(f'<span><i style="background:{escape(c)}"></i>{escape(t)}</span>' for c, t in items)
        + "</div>"
    )


def _axis(svg: Svg, x0: float, width: float, top: float, y: float, unit: str, grid_top: float) -> None:
    for v in nice_ticks(top):
        x = x0 + v / top * width
        svg.line(x, grid_top, x, y, "#E5E7EB")
        svg.line(x, y, x, y + 4, "#6B7280")
        svg.text(x, y + 16, f"{v:,.6g}", text_anchor="middle", class_="tick")
    svg.line(x0, y, x0 + width, y, "#6B7280")
    svg.text(x0 + width, y + 32, unit, text_anchor="end", class_="axis-label")


# --------------------------------------------------------------------------- schedule


def _mb_label(name: str) -> str:
    """'mb 3 fwd+bwd' -> '3'; 'mb 8..55 (steady state) fwd+bwd' -> '8..55'."""
    m = re.match(r"mb (\S+)", name)
    return m.group(1) if m else ""


def backward_shares(terms: StageTerms, layers: list[int], recompute: list[Any]) -> list[float]:
    """Backward (recompute included) share of each stage's compute, from the cost terms (the
    plan's partial recompute too, cost/recompute_layers.py, when ``terms.plan`` has one)."""
    shares = []
    partial = bool(terms.plan.recompute_layers)
    rec = recomputed_counts(terms) if partial else ()
    counts = terms.stage_counts() if partial else ()
    for s, n in enumerate(layers):
        if partial:
            c = stage_cost(terms, s, counts[s], rec[s])
            compute, backward = c.compute_s, c.backward_s
        else:
            compute = terms.stage_compute_s(s, n, recompute[s])
            backward = terms.stage_backward_s(s, n, recompute[s])
        shares.append(backward / compute if compute > 0 else 0.0)
    return shares


def schedule_svg(trace: dict[str, Any], shares: list[float], width: float = 1100) -> str:
    """The trace's lanes as bars on a time axis in ms (module docstring)."""
    events = trace["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    lanes = sorted(names)
    critical = trace["otherData"][CRITICAL_PATH_KEY]
    step_ms = trace["otherData"]["step_time_s"] * MS_PER_S
    label_w, right, top = 240, 24, 8
    stage_h, comm_h, gap = 28, 16, 6
    heights = {t: stage_h if t < 100 else comm_h for t in lanes}
    ys, y = {}, top
    for t in lanes:
        if t >= 100 and t - 1 not in heights:  # a wider gap between stage and link lanes
            y += 10
        ys[t] = y
        y += heights[t] + gap
    plot_w = width - label_w - right
    svg = Svg(width, y + 40, "pipeline schedule of one step")
    svg.raw(
        '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="6" height="6" fill="#E5E7EB"/>'
        '<line x1="0" y1="0" x2="0" y2="6" stroke="#B8BDC4" stroke-width="2"/></pattern></defs>'
    )
    _axis(svg, label_w, plot_w, step_ms, y + 2, "time (ms)", top)

    def px(ms: float) -> float:
        return label_w + ms / step_ms * plot_w

    for t in lanes:
        bold = {"font_weight": "600"} if t == critical else {}
        svg.text(label_w - 8, ys[t] + heights[t] / 2 + 4, names[t], text_anchor="end", class_="lane", **bold)
        svg.rect(label_w, ys[t], plot_w, heights[t], "#F8FAFC")
    for e in events:
        if e.get("ph") != "X":
            continue
        t, start_ms, dur_ms = e["tid"], e["ts"] / US_PER_S * MS_PER_S, e["dur"] / US_PER_S * MS_PER_S
        x, w, h, yy = px(start_ms), dur_ms / step_ms * plot_w, heights[t], ys[t]
        if w < MIN_DRAWN_PX and not (e["cat"] == "comm" and dur_ms > 1e-4 * step_ms):
            continue
        w = max(w, 1.0)  # short communication stays visible; its tooltip has the exact time
        where = names[t]
        if e["cat"] == "compute":
            share = shares[t - 1] if 0 < t <= len(shares) else 0.0
            fwd, label = dur_ms * (1 - share), _mb_label(e["name"])
            svg.rect(
                x,
                yy,
                w * (1 - share),
                h,
                COLORS["forward"],
                class_="fwd",
                title=f"{where}, micro-batch {label}: forward {fwd:,.1f} ms",
            )
            svg.rect(
                x + w * (1 - share),
                yy,
                w * share,
                h,
                COLORS["backward"],
                class_="bwd",
                title=f"{where}, micro-batch {label}: backward (recompute included) {dur_ms - fwd:,.1f} ms",
            )
            if w >= LABEL_MIN_PX + 6 * max(0, len(label) - 2):
                svg.text(x + w / 2, yy + h / 2 + 4, label, text_anchor="middle", class_="mb")
        elif e["cat"] == "comm":
            exposed = e["args"].get("exposed", True)
            svg.rect(
                x,
                yy,
                w,
                h,
                COLORS["exposed" if exposed else "overlapped"],
                class_="exposed" if exposed else "overlapped",
                title=f"{where}: {e['name']} {dur_ms:,.2f} ms",
            )
        elif e["cat"] == "bubble":
            svg.rect(
                x, yy, w, h, "url(#hatch)", class_="bubble", title=f"{where}: {e['name']} {dur_ms:,.1f} ms"
            )
        else:
            svg.rect(
                x,
                yy,
                w,
                h,
                COLORS["optimizer"],
                class_="optimizer",
                title=f"{where}: {e['name']} {dur_ms:,.2f} ms",
            )
    svg.line(px(step_ms), top - 4, px(step_ms), y + 2, "#111827", stroke_dasharray="3 3")
    return svg.render("schedule")


# --------------------------------------------------------------------------- memory


def memory_parts() -> list[str]:
    """The per-stage memory parts a Result reports (every ``*_bytes`` field but the totals:
    total, allocated, reserved), in the Result's own field order: weights, grads, optimizer,
    activations, buffers, ..."""
    totals = ("total_bytes", "allocated_bytes", "reserved_bytes")
    return [f for f in StageOut.model_fields if f.endswith("_bytes") and f not in totals]


def part_label(part: str) -> str:
    return part.removesuffix("_bytes").replace("_", " ")


def memory_svg(predicted: Predicted, capacities: list[float], width: float = 1100) -> str:
    """Stacked bars of each stage's memory parts (GiB) with its device capacity as a red line."""
    parts = memory_parts()
    stages = predicted.stages
    label_w, right, top, bar_h, gap = 240, 230, 8, 22, 8
    top_gib = max([*capacities, *(s.total_bytes for s in stages)]) / GIB * 1.04
    plot_w = width - label_w - right
    y_end = top + len(stages) * (bar_h + gap)
    svg = Svg(width, y_end + 40, "memory per pipeline stage against device capacity")
    _axis(svg, label_w, plot_w, top_gib, y_end, "GiB per device", top)

    def px(gib_: float) -> float:
        return label_w + gib_ / top_gib * plot_w

    for i, st in enumerate(stages):
        y = top + i * (bar_h + gap)
        pool = f" · pool {st.pool}" if st.pool is not None else ""
        svg.text(
            label_w - 8,
            y + bar_h / 2 + 4,
            f"stage {st.stage} · {st.layers} layers · {st.recompute}{pool}",
            text_anchor="end",
            class_="lane",
        )
        x = label_w
        shown = 0.0
        for k, part in enumerate(parts):
            value = float(getattr(st, part))
            w = value / GIB / top_gib * plot_w
            svg.rect(
                x,
                y,
                w,
                bar_h,
                MEMORY_COLORS[k % len(MEMORY_COLORS)],
                class_=f"mem-{part}",
                title=f"stage {st.stage} {part_label(part)}: {value / GIB:,.2f} GiB",
            )
            x += w
            shown += value
        other = st.total_bytes - shown
        if other > 1e-6 * st.total_bytes:  # parts the Result totals but does not itemise
            svg.rect(
                x,
                y,
                other / GIB / top_gib * plot_w,
                bar_h,
                "#BAB0AC",
                class_="mem-other",
                title=f"stage {st.stage} other: {other / GIB:,.2f} GiB",
            )
        cap = capacities[i]
        svg.line(
            px(cap / GIB),
            y - 3,
            px(cap / GIB),
            y + bar_h + 3,
            COLORS["capacity"],
            stroke_width="2.5",
            class_="capacity",
        )
        over = st.total_bytes > cap
        svg.text(
            max(px(cap / GIB), px(st.total_bytes / GIB)) + 6,
            y + bar_h / 2 + 4,
            f"{st.total_bytes / GIB:,.1f} / {cap / GIB:,.1f} GiB "
            f"({st.total_bytes / cap:.0%})" + (" OVER" if over else ""),
            class_="total over" if over else "total",
        )
    return svg.render("memory")
