"""PNG plots of one benchmark run (matplotlib, Agg backend; the ``bench`` extra).

- ``scaling_<sweep>.png``: planning time of the solver and of exhaustive enumeration on the same
  axes, runs that did not finish drawn hollow at the time they were stopped, the crossover marked;
- ``fidelity.png``: predicted against published step time, log-log, y = x with a +-10% band;
- ``memory.png``: per-device memory by part, per pipeline stage, for the flagship scenarios;
- ``baselines.png``: each baseline's modelled step time relative to paraplan's plan.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
from matplotlib.ticker import NullFormatter, ScalarFormatter  # noqa: E402

from benchmarks.baselines import Attempt, Method, Outcome, enumeration_estimate_s  # noqa: E402
from benchmarks.harness import (  # noqa: E402
    SWEEP_LABELS,
    CalibrationResult,
    ScenarioResult,
    SweepPoint,
)

__all__ = [
    "crossover",
    "plot_scaling",
    "plot_fidelity",
    "plot_memory",
    "plot_baselines",
    "write_plots",
    "MEMORY_PARTS",
    "BASELINES",
]

GIB_BYTES = 2**30
DPI = 90
MEMORY_PARTS = (
    ("weights_bytes", "weights"),
    ("grads_bytes", "gradients"),
    ("optimizer_bytes", "optimizer"),
    ("activations_bytes", "activations"),
    ("buffers_bytes", "buffers"),
)
BASELINES = (Method.UNIFORM, Method.FIXED_PLACEMENT, Method.RULE_OF_THUMB, Method.EXHAUSTIVE)


def _finished(p: SweepPoint) -> bool:
    return p.exhaustive.outcome in (Outcome.PLAN, Outcome.NO_PLAN)


def crossover(points: list[SweepPoint]) -> SweepPoint | None:
    """First point (by x) where the solver beats an enumeration that was faster at the point
    before; None when one of them is faster everywhere."""
    pts = sorted(points, key=lambda p: p.x)
    for prev, cur in zip(pts, pts[1:], strict=False):
        enum_was_faster = _finished(prev) and prev.exhaustive.wall_s < prev.paraplan.wall_s
        solver_now_faster = not _finished(cur) or cur.paraplan.wall_s < cur.exhaustive.wall_s
        if enum_was_faster and solver_now_faster and _answered(cur.paraplan):
            return cur
    return None


def _answered(a: Attempt) -> bool:
    """A plan, or a proof that none fits: both are answers."""
    return a.has_plan or a.outcome is Outcome.NO_PLAN


def plot_scaling(points: list[SweepPoint], sweep: str, path: Path, enum_budget_s: float) -> None:
    """Solver and enumeration on the same axes; extrapolated enumeration times beyond the
    measured range are drawn as arrows at the top edge, labelled with their value."""
    pts = sorted((p for p in points if p.sweep == sweep), key=lambda p: p.x)
    fig, ax = plt.subplots(figsize=(10, 4.6))
    solved = [p for p in pts if _answered(p.paraplan)]
    ax.plot(
        [p.x for p in solved],
        [p.paraplan.wall_s for p in solved],
        "o-",
        color="C0",
        label="paraplan (CP-SAT), median wall",
    )
    late = [p for p in pts if not _answered(p.paraplan)]
    if late:
        ax.plot(
            [p.x for p in late],
            [p.paraplan.wall_s for p in late],
            "X",
            ms=10,
            color="C3",
            label="paraplan: no answer in its limit (stopped)",
        )
    done = [p for p in pts if _finished(p)]
    if done:
        ax.plot(
            [p.x for p in done],
            [p.exhaustive.wall_s for p in done],
            "s-",
            color="C1",
            label="exhaustive enumeration, finished",
        )
    cut = [p for p in pts if not _finished(p)]
    measured = [w for p in pts for w in (p.paraplan.wall_s, p.exhaustive.wall_s) if w > 0]
    top = max(measured, default=1.0) * 30
    bottom = min(measured, default=0.01) / 3
    if cut:
        ax.plot(
            [p.x for p in cut],
            [p.exhaustive.wall_s for p in cut],
            "^",
            mfc="none",
            ms=9,
            color="C1",
            label=f"enumeration: did not finish (stopped at {enum_budget_s:g} s)",
        )
        est = [(p.x, e) for p in cut if (e := enumeration_estimate_s(p.exhaustive)) is not None]
        if est:
            ax.plot(
                [x for x, _ in est],
                [min(e, top) for _, e in est],
                "d:",
                mfc="none",
                color="C1",
                alpha=0.6,
                label="enumeration, whole space at its measured rate\n"
                "(extrapolated; off-scale values written)",
            )
            for x, e in est:
                if e > top:
                    ax.annotate(
                        f"{e:.0e} s",
                        (x, top),
                        xytext=(4, -4),
                        textcoords="offset points",
                        ha="left",
                        va="top",
                        rotation=90,
                        fontsize=6,
                        color="C1",
                    )
    x = crossover(pts)
    if x is not None:
        ax.axvline(x.x, color="grey", ls="--", lw=1)
        ax.annotate(
            f"crossover: {x.label}",
            (x.x, x.paraplan.wall_s),
            xytext=(6, 12),
            textcoords="offset points",
            fontsize=8,
            color="dimgrey",
        )
    ax.set_xscale("log", base=2 if sweep in ("gpus", "layers") else 10)
    ax.set_yscale("log")
    ax.set_ylim(bottom, top * 1.5)
    if sweep in ("gpus", "layers") and pts:
        ax.set_xticks(
            [p.x for p in pts], [p.label for p in pts], fontsize=7, rotation=45 if sweep == "gpus" else 0
        )
        ax.minorticks_off()
    ax.set_xlabel(SWEEP_LABELS[sweep])
    ax.set_ylabel("planning wall time (s)")
    ax.set_title(f"Planning time vs {SWEEP_LABELS[sweep]}")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)


def plot_fidelity(rows: list[CalibrationResult], path: Path, median: float, p90: float) -> None:
    fig, ax = plt.subplots(figsize=(6.2, 5.6))
    lo = min(min(r.published_step_s, r.predicted_s) for r in rows) / 1.5
    hi = max(max(r.published_step_s, r.predicted_s) for r in rows) * 1.5
    line = [lo, hi]
    ax.fill_between(
        line, [v * 0.9 for v in line], [v * 1.1 for v in line], color="grey", alpha=0.2, label="±10%"
    )
    ax.plot(line, line, "k-", lw=0.8, label="y = x")
    for i, cluster in enumerate(sorted({r.cluster for r in rows})):
        sel = [r for r in rows if r.cluster == cluster]
        ax.scatter(
            [r.published_step_s for r in sel],
            [r.predicted_s for r in sel],
            s=16,
            color=f"C{i}",
            label=f"{cluster} ({len(sel)})",
            marker="o" if all(r.fits for r in sel) else "D",
        )
    unfit = [r for r in rows if not r.fits]
    if unfit:
        ax.scatter(
            [r.published_step_s for r in unfit],
            [r.predicted_s for r in unfit],
            s=60,
            facecolors="none",
            edgecolors="red",
            label="predicted out of memory",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("published step time (s)")
    ax.set_ylabel("paraplan predicted step time (s)")
    ax.set_title(
        f"Fidelity: {len(rows)} published runs; |error| median {median:.1%}, p90 {p90:.1%}", fontsize=9
    )
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)


def plot_memory(results: list[ScenarioResult], path: Path) -> None:
    """Stacked bars per pipeline stage of each flagship's chosen plan, capacity dashed."""
    shown = [r for r in results if r.attempts[Method.PARAPLAN].stages]
    fig, axes = plt.subplots(1, max(1, len(shown)), figsize=(3.6 * max(1, len(shown)), 4.2), squeeze=False)
    for ax, r in zip(axes[0], shown, strict=False):
        a = r.attempts[Method.PARAPLAN]
        stages = a.stages or []
        bottom = [0.0] * len(stages)
        for i, (key, label) in enumerate(MEMORY_PARTS):
            vals = [s[key] / GIB_BYTES for s in stages]
            ax.bar(range(len(stages)), vals, bottom=bottom, color=f"C{i}", label=label, width=0.8)
            bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
        cap = a.capacity_bytes
        if cap:
            ax.axhline(cap / GIB_BYTES, color="k", ls="--", lw=1, label="HBM capacity")
        p = a.plan or {}
        ax.set_title(
            f"{r.bench.name}\ndp={p.get('dp')} tp={p.get('tp')} pp={p.get('pp')} "
            f"cp={p.get('cp')} vp={p.get('vp')} mb={p.get('micro_batch')} "
            f"zero={p.get('zero')}",
            fontsize=7,
        )
        ax.set_xlabel("pipeline stage")
        ax.set_ylabel("GiB per device")
        ax.set_xticks(range(0, len(stages), max(1, len(stages) // 8)))
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="lower center", ncol=min(len(labels), 3 * max(1, len(shown))))
    fig.tight_layout(rect=(0, 0.1 if len(shown) < 2 else 0.06, 1, 1))
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)


def plot_baselines(results: list[ScenarioResult], path: Path) -> None:
    """Modelled step time of each baseline's plan / paraplan's plan, per scenario."""
    rows = [r for r in results if r.attempts[Method.PARAPLAN].has_plan]
    fig, ax = plt.subplots(figsize=(max(7.0, 0.22 * len(rows) + 2), 4.6))
    for i, m in enumerate(BASELINES):
        xs, ys = [], []
        for j, r in enumerate(rows):
            a = r.attempts.get(m)
            if a is not None and a.has_plan:
                xs.append(j + (i - 1.5) * 0.18)  # side by side, so equal ratios stay visible
                ys.append(a.step_time_s / r.attempts[Method.PARAPLAN].step_time_s)
        if xs:
            ax.plot(xs, ys, "osD^"[i], ms=4, color=f"C{i + 1}", label=m.value.replace("_", " "), alpha=0.85)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_yscale("log")
    lo, hi = ax.get_ylim()
    ax.set_yticks([t for t in (0.8, 0.9, 1, 1.1, 1.25, 1.5, 2, 2.5, 3, 4, 5) if lo <= t <= hi])
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(range(len(rows)), [r.bench.name for r in rows], rotation=90, fontsize=6)
    ax.set_ylabel("step time / paraplan's step time")
    ax.set_title("Baselines on paraplan's cost model (above 1: paraplan's plan is faster)")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)


def write_plots(
    out_dir: Path,
    scenarios: list[ScenarioResult],
    calibration: list[CalibrationResult],
    sweeps: list[SweepPoint],
    *,
    fidelity_summary: tuple[float, float],
    enum_budget_s: float,
    flagships: list[ScenarioResult],
) -> list[Path]:
    """Every plot of the run; returns the files written."""
    written = []
    for sweep in sorted({p.sweep for p in sweeps}):
        path = out_dir / f"scaling_{sweep}.png"
        plot_scaling(sweeps, sweep, path, enum_budget_s)
        written.append(path)
    if calibration:
        plot_fidelity(calibration, out_dir / "fidelity.png", *fidelity_summary)
        written.append(out_dir / "fidelity.png")
    plot_memory(flagships, out_dir / "memory.png")
    written.append(out_dir / "memory.png")
    if scenarios:
        plot_baselines(scenarios, out_dir / "baselines.png")
        written.append(out_dir / "baselines.png")
    return written
