"""Write one run's results: ``results.json``, CSV tables, ``report.md``, and the console table.

Every number comes from the :class:`~benchmarks.harness.Suite` of the run; ratios are
baseline / paraplan within that run (a step-time ratio above 1 means paraplan's plan is faster).
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.baselines import Attempt, Method, Outcome, enumeration_estimate_s
from benchmarks.fidelity import summary
from benchmarks.harness import SWEEP_LABELS, CalibrationResult, ScenarioResult, Suite, SweepPoint
from benchmarks.plots import BASELINES, MEMORY_PARTS, crossover

__all__ = ["write_results", "console_table", "findings", "flagships", "markdown", "BUG_TOLERANCE"]

BUG_TOLERANCE = 1e-4  # relative step-time margin beyond the solver's integer rounding
GIB_BYTES = 2**30
_NAMES = {
    Method.UNIFORM: "uniform split",
    Method.FIXED_PLACEMENT: "fixed placement",
    Method.RULE_OF_THUMB: "rule of thumb",
    Method.EXHAUSTIVE: "exhaustive",
    Method.PUBLISHED: "published",
}


def _s(x: float | None) -> str:
    if x is None or math.isnan(x):
        return "—"
    if x >= 100:
        return f"{x:.0f}"
    return f"{x:.3g}" if x >= 0.01 else f"{x:.2g}"


def _ratio(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}×" if abs(x - 1) < 0.1 else f"{x:.2f}×"


def _plan(p: dict[str, Any] | None) -> str:
    if not p:
        return "—"
    rec = p.get("recompute")
    rec = rec if isinstance(rec, str) else "per-stage"
    ep = f" ep{p['ep']}" if p.get("ep", 1) > 1 else ""
    return (
        f"dp{p['dp']} tp{p['tp']} pp{p['pp']} cp{p.get('cp', 1)}{ep} vp{p.get('vp', 1)} "
        f"mb{p['micro_batch']} z{p['zero']} {rec}"
    )


def _step_ratio(a: Attempt | None, ref: Attempt) -> float | None:
    if a is None or not a.has_plan or not ref.has_plan:
        return None
    return a.step_time_s / ref.step_time_s


def _against_paraplan(ratios: list[float]) -> str:
    """Published-plan / paraplan step ratios: geometric mean, range, and win/tie/loss counts."""
    return (
        f"{_ratio(_geomean(ratios))} paraplan's (geometric mean; worst {_ratio(max(ratios))}, "
        f"best {_ratio(min(ratios))}); paraplan's plan is faster on "
        f"{sum(x > 1 + BUG_TOLERANCE for x in ratios)}, equal on "
        f"{sum(abs(x - 1) <= BUG_TOLERANCE for x in ratios)}, slower on "
        f"{sum(x < 1 - BUG_TOLERANCE for x in ratios)}"
    )


def _geomean(xs: list[float]) -> float | None:
    return math.exp(statistics.fmean(math.log(x) for x in xs)) if xs else None


def _baseline_cell(a: Attempt, ref: Attempt) -> str:
    """'step ratio / planning-time ratio' or why there is no plan."""
    wall = a.wall_s / ref.wall_s if ref.wall_s > 0 else None
    if a.method == Method.EXHAUSTIVE and a.outcome is Outcome.NOT_FINISHED:
        est = enumeration_estimate_s(a)
        return f"not finished in {a.wall_s:.0f} s (>{wall:.2g}× time" + (
            f"; whole space ≈ {est:.1e} s)" if est else ")"
        )
    if not a.has_plan:
        return f"{a.outcome}" + (f" ({a.detail[:60]})" if a.outcome is Outcome.ERROR else "")
    r = _step_ratio(a, ref)
    return f"{_ratio(r)} / {_ratio(wall)} time" if r is not None else f"{_s(a.step_time_s)} s"


def findings(suite: Suite) -> list[str]:
    """Everything that looks wrong: a baseline beating paraplan, errors, nondeterminism,
    enumeration counts that disagree with the space size."""
    out = []
    for r in suite.scenarios:
        ref = r.attempts[Method.PARAPLAN]
        for m, a in r.attempts.items():
            if a.outcome is Outcome.ERROR:
                out.append(f"`{r.bench.name}`: {m} raised {a.detail}")
            if "NONDETERMINISTIC" in a.detail:
                out.append(f"`{r.bench.name}`: {m} {a.detail}")
            if m == Method.PARAPLAN:
                continue
            ratio = _step_ratio(a, ref)
            if ratio is not None and ratio < 1 - BUG_TOLERANCE:
                out.append(
                    f"`{r.bench.name}`: {_NAMES[m]} plan ({_plan(a.plan)}, "
                    f"{a.step_time_s:.4f} s) beats paraplan's ({_plan(ref.plan)}, "
                    f"{ref.step_time_s:.4f} s, {ref.solver_status}) by {1 - ratio:.2%}"
                )
            if a.has_plan and not ref.has_plan:
                out.append(
                    f"`{r.bench.name}`: {_NAMES[m]} found a plan ({a.step_time_s:.3f} s) but "
                    f"paraplan returned {ref.outcome} after {ref.wall_s:.1f} s "
                    f"({ref.detail[:80]})"
                )
        e = r.attempts.get(Method.EXHAUSTIVE)
        if e and e.outcome is Outcome.PLAN and e.num_plans != e.space_size:
            out.append(
                f"`{r.bench.name}`: enumeration visited {e.num_plans} plans, the space "
                f"count says {e.space_size}"
            )
    for c in _published_wins(suite.calibration, inside_space=True):
        ratio = _step_ratio(c.published, c.paraplan)
        out.append(
            f"calibration row {c.row_id} ({c.label}): the published plan "
            f"({_plan(c.published.plan)}, {c.published.step_time_s:.3f} s) beats "
            f"paraplan's ({_plan(c.paraplan.plan)}, {c.paraplan.step_time_s:.3f} s, "
            f"{c.paraplan.solver_status}) by {1 - ratio:.2%}, and it lies inside the "
            "search space"
        )
    for p in suite.sweeps:
        if p.exhaustive.outcome is Outcome.PLAN and p.paraplan.has_plan:
            if p.paraplan.step_time_s > p.exhaustive.step_time_s * (1 + BUG_TOLERANCE):
                out.append(
                    f"sweep {p.sweep} {p.label}: enumeration optimum "
                    f"{p.exhaustive.step_time_s:.4f} s < paraplan {p.paraplan.step_time_s:.4f} s"
                )
        if p.exhaustive.outcome is Outcome.PLAN and p.exhaustive.num_plans != p.space_size:
            out.append(
                f"sweep {p.sweep} {p.label}: enumeration visited {p.exhaustive.num_plans} "
                f"plans, the space count says {p.space_size}"
            )
    return out


def _published_wins(rows: list[CalibrationResult], *, inside_space: bool) -> list[CalibrationResult]:
    """Calibration runs whose published plan (fitting memory) is faster than paraplan's, split by
    whether it lies inside paraplan's search space (outside: micro_batch or vp above the limits)."""
    out = []
    for c in rows:
        if not (c.published and c.paraplan) or c.published.outcome is not Outcome.PLAN:
            continue
        ratio = _step_ratio(c.published, c.paraplan)
        if ratio is not None and ratio < 1 - BUG_TOLERANCE and (not c.published.detail) == inside_space:
            out.append(c)
    return out


def _compact(data: Any, keep_stages: bool = False) -> Any:
    """JSON-ready copy; per-stage detail only where the memory chart needs it."""
    if isinstance(data, dict):
        out = {}
        for k, v in data.items():
            if k == "stages" and not (keep_stages and data.get("method") == Method.PARAPLAN):
                continue
            out[k] = _compact(v, keep_stages)
        return out
    if isinstance(data, list | tuple):
        return [_compact(v, keep_stages) for v in data]
    if isinstance(data, Path):
        return str(data)
    return data


def _write_json(suite: Suite, path: Path) -> None:
    d = asdict(suite)
    d["scenarios"] = [_compact(s, keep_stages=s["bench"]["is_flagship"]) for s in d["scenarios"]]
    d["calibration"] = _compact(d["calibration"])
    d["sweeps"] = _compact(d["sweeps"])
    d["findings"] = findings(suite)
    path.write_text(json.dumps(_compact(d, keep_stages=True), indent=1, default=str))


def _write_csvs(suite: Suite, out: Path) -> list[Path]:
    paths = [out / "scenarios.csv", out / "calibration.csv", out / "sweeps.csv"]
    with paths[0].open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            [
                "scenario",
                "gpus",
                "method",
                "outcome",
                "solver_status",
                "gap",
                "step_time_s",
                "step_ratio_to_paraplan",
                "wall_s",
                "wall_ratio_to_paraplan",
                "num_runs",
                "plans_visited",
                "space_size",
                "plan",
                "detail",
            ]
        )
        for r in suite.scenarios:
            ref = r.attempts[Method.PARAPLAN]
            for m, a in r.attempts.items():
                w.writerow(
                    [
                        r.bench.name,
                        r.bench.num_devices,
                        m,
                        a.outcome,
                        a.solver_status,
                        a.gap,
                        a.step_time_s,
                        _step_ratio(a, ref),
                        f"{a.wall_s:.4f}",
                        f"{a.wall_s / ref.wall_s:.4f}",
                        len(a.wall_runs_s),
                        a.num_plans,
                        a.space_size,
                        _plan(a.plan),
                        a.detail,
                    ]
                )
    with paths[1].open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            [
                "row_id",
                "run",
                "gpus",
                "cluster",
                "published_step_s",
                "predicted_s",
                "error",
                "fits",
                "recompute",
                "constant_mfu_error",
                "paraplan_step_s",
                "paraplan_status",
                "paraplan_wall_s",
                "published_over_paraplan",
                "paraplan_plan",
                "published_plan",
                "published_outside_space",
                "defaults",
                "target",
                "paraplan_target_step_s",
                "published_over_paraplan_target",
                "paraplan_target_plan",
            ]
        )
        for c in suite.calibration:
            ours, matched = c.paraplan, c.paraplan_target
            w.writerow(
                [
                    c.row_id,
                    c.label,
                    c.num_devices,
                    c.cluster,
                    c.published_step_s,
                    f"{c.predicted_s:.4f}",
                    f"{c.error:.4f}",
                    c.fits,
                    c.recompute,
                    f"{c.const_mfu_error:.4f}",
                    ours.step_time_s if ours else None,
                    ours.solver_status if ours else None,
                    f"{ours.wall_s:.3f}" if ours else None,
                    _step_ratio(c.published, ours) if ours else None,
                    _plan(ours.plan) if ours else None,
                    _plan(c.published.plan) if c.published else None,
                    c.published.detail if c.published else None,
                    "; ".join(c.defaults),
                    c.target,
                    matched.step_time_s if matched else None,
                    _step_ratio(c.published, matched) if matched else None,
                    _plan(matched.plan) if matched else None,
                ]
            )
    with paths[2].open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            [
                "sweep",
                "x",
                "label",
                "space_size",
                "solver_outcome",
                "solver_status",
                "solver_wall_s",
                "solver_runs",
                "enum_outcome",
                "enum_wall_s",
                "plans_visited",
                "enum_estimate_s",
                "step_time_s",
                "enum_step_time_s",
            ]
        )
        for p in suite.sweeps:
            a, e = p.paraplan, p.exhaustive
            w.writerow(
                [
                    p.sweep,
                    p.x,
                    p.label,
                    p.space_size,
                    a.outcome,
                    a.solver_status,
                    f"{a.wall_s:.4f}",
                    len(a.wall_runs_s),
                    e.outcome,
                    f"{e.wall_s:.4f}",
                    e.num_plans,
                    enumeration_estimate_s(e),
                    a.step_time_s,
                    e.step_time_s,
                ]
            )
    return paths


def console_table(suite: Suite) -> str:
    """The per-scenario table printed at the end of a run."""
    head = (
        f"{'scenario':<38} {'GPUs':>5} {'step s':>8} {'status':<9} {'solve s':>8}  "
        + "  ".join(f"{_NAMES[m]:>15}" for m in BASELINES[:3])
        + "  exhaustive"
    )
    lines = [head, "-" * len(head)]
    for r in suite.scenarios:
        p = r.attempts[Method.PARAPLAN]
        cells = []
        for m in BASELINES[:3]:
            ratio = _step_ratio(r.attempts[m], p)
            cells.append(f"{_ratio(ratio) if ratio else r.attempts[m].outcome:>15}")
        e = r.attempts[Method.EXHAUSTIVE]
        enum = _ratio(_step_ratio(e, p)) if e.has_plan else f"{e.outcome}"
        lines.append(
            f"{r.bench.name:<38} {r.bench.num_devices:>5} {_s(p.step_time_s):>8} "
            f"{(p.solver_status or p.outcome)[:9]:<9} {p.wall_s:>8.2f}  " + "  ".join(cells) + f"  {enum}"
        )
    lines.append("(baseline columns: modelled step time / paraplan's step time)")
    return "\n".join(lines)


def _by_size(results: list[ScenarioResult]) -> list[tuple[str, list[float]]]:
    bands = (("8-64 GPUs", 1, 64), ("65-1,024 GPUs", 65, 1024), ("1,025-16,384 GPUs", 1025, 10**9))
    return [
        (
            name,
            [
                r.attempts[Method.PARAPLAN].wall_s
                for r in results
                if lo <= r.bench.num_devices <= hi and r.attempts[Method.PARAPLAN].has_plan
            ],
        )
        for name, lo, hi in bands
    ]


def _headline(suite: Suite, issues: list[str]) -> list[str]:
    res = suite.scenarios
    ours = [r.attempts[Method.PARAPLAN] for r in res]
    planned = [a for a in ours if a.has_plan]
    status = {k: sum(a.solver_status == k for a in planned) for k in ("OPTIMAL", "FEASIBLE")}
    lines = [
        f"- **paraplan** found a plan for {len(planned)}/{len(res)} scenarios "
        f"({status['OPTIMAL']} proven OPTIMAL, {status['FEASIBLE']} FEASIBLE); "
        f"{sum(a.outcome is Outcome.NO_PLAN for a in ours)} proven infeasible, "
        f"{sum(a.outcome is Outcome.NOT_FINISHED for a in ours)} without a plan in the "
        f"time limit, {sum(a.outcome is Outcome.ERROR for a in ours)} errors."
    ]
    if planned:
        walls = [a.wall_s for a in planned]
        bands = "; ".join(
            f"{name}: {_s(statistics.median(w))} s (n={len(w)})" for name, w in _by_size(res) if w
        )
        lines.append(
            f"- **Median solve time** {_s(statistics.median(walls))} s, max "
            f"{_s(max(walls))} s. By size: {bands}."
        )
    for m in BASELINES:
        ratios = [x for r in res if (x := _step_ratio(r.attempts[m], r.attempts[Method.PARAPLAN]))]
        walls = [
            r.attempts[m].wall_s / r.attempts[Method.PARAPLAN].wall_s
            for r in res
            if r.attempts[m].has_plan and r.attempts[Method.PARAPLAN].has_plan
        ]
        if m == Method.EXHAUSTIVE:
            done = [r for r in res if r.attempts[m].outcome in (Outcome.PLAN, Outcome.NO_PLAN)]
            same = sum(1 for x in ratios if abs(x - 1) <= BUG_TOLERANCE)
            sweep_done = [
                p for p in suite.sweeps if p.exhaustive.outcome is Outcome.PLAN and p.paraplan.has_plan
            ]
            sweep_same = sum(
                abs(p.exhaustive.step_time_s / p.paraplan.step_time_s - 1) <= BUG_TOLERANCE
                for p in sweep_done
            )
            lines.append(
                f"- **Exhaustive enumeration** finished on {len(done)}/{len(res)} scenarios "
                f"within {suite.config.enum_budget_s:g} s (matching paraplan's step time "
                f"on {same}/{len(ratios)} where it found a plan) and on "
                f"{len(sweep_done)} sweep points within "
                f"{suite.config.sweep_enum_budget_s:g} s, where its optimum equals "
                f"paraplan's on {sweep_same}/{len(sweep_done)}."
            )
            continue
        if not ratios:
            continue
        lines.append(
            f"- **{_NAMES[m]}**: step time {_ratio(_geomean(ratios))} paraplan's (geometric mean, "
            f"n={len(ratios)}; worst {_ratio(max(ratios))}, best {_ratio(min(ratios))}); "
            f"slower on {sum(x > 1 + BUG_TOLERANCE for x in ratios)}, equal on "
            f"{sum(abs(x - 1) <= BUG_TOLERANCE for x in ratios)}, no plan on "
            f"{sum(not r.attempts[m].has_plan for r in res if r.attempts[Method.PARAPLAN].has_plan)}"
            f"; planning time {_ratio(_geomean(walls))} paraplan's (geometric mean)."
        )
    comp = [c for c in suite.calibration if c.published and c.paraplan]
    ratios = [x for c in comp if (x := _step_ratio(c.published, c.paraplan))]
    if ratios:
        lines.append(
            f"- **Published expert plans** ({len(comp)} calibration runs compared): the published "
            f"plan's modelled step time is {_against_paraplan(ratios)} (of which "
            f"{len(_published_wins(comp, inside_space=False))} published plans lie outside "
            "paraplan's search space, e.g. micro_batch > solver.max_micro_batch or "
            "vp > solver.max_vp; see section 2)."
        )
    matched = [(c, x) for c in comp if (x := _step_ratio(c.published, c.paraplan_target))]
    if matched:
        ratios = [x for _, x in matched]
        frameworks = ", ".join(sorted({c.target for c, _ in matched if c.target}))
        lines.append(
            f"- **Published expert plans, same framework** ({len(matched)} runs; paraplan "
            f"restricted with solver.target to what the run's framework executes: {frameworks}): "
            f"the published plan's step time is {_against_paraplan(ratios)}."
        )
    if suite.calibration:
        med, p90 = summary([c.error for c in suite.calibration])
        cmed, cp90 = summary([c.const_mfu_error for c in suite.calibration])
        lines.append(
            f"- **Fidelity** over {len(suite.calibration)} published runs: median |error| "
            f"{med:.1%}, p90 {p90:.1%} (constant-MFU estimate at its best single MFU "
            f"{suite.calibration[0].const_mfu:.1%}: median {cmed:.1%}, p90 {cp90:.1%})."
        )
    for sweep in sorted({p.sweep for p in suite.sweeps}):
        pts = [p for p in suite.sweeps if p.sweep == sweep]
        x = crossover(pts)
        lines.append(
            f"- **Crossover ({SWEEP_LABELS[sweep]})**: "
            + (
                f"the solver overtakes enumeration at {x.label} ({_s(x.paraplan.wall_s)} s vs "
                f"{_enum_time(x.exhaustive)})"
                if x
                else "none in range ("
                + (
                    "enumeration never finished first"
                    if not any(
                        p.exhaustive.outcome is Outcome.PLAN and p.exhaustive.wall_s < p.paraplan.wall_s
                        for p in pts
                    )
                    else "enumeration was faster throughout"
                )
                + ")"
            )
            + "."
        )
    lines.append(
        f"- **Findings**: {len(issues)} (section 6)."
        if issues
        else "- **Findings**: none: no baseline beat paraplan, every repeat agreed, no errors."
    )
    return lines


def _enum_time(e: Attempt) -> str:
    if e.outcome in (Outcome.PLAN, Outcome.NO_PLAN):
        return f"{_s(e.wall_s)} s"
    est = enumeration_estimate_s(e)
    return f"> {e.wall_s:.1f} s" + (f", whole space ≈ {est:.1e} s" if est else "")


def _scenario_table(res: list[ScenarioResult]) -> list[str]:
    cols = [
        "scenario",
        "GPUs",
        "paraplan step (s)",
        "status (gap)",
        "solve (s)",
        "runs",
        "paraplan's plan",
    ] + [_NAMES[m] for m in BASELINES]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in res:
        p = r.attempts[Method.PARAPLAN]
        status = p.solver_status or str(p.outcome)
        if p.gap:
            status += f" ({p.gap:.1%})"
        cells = [
            f"`{r.bench.name}`",
            str(r.bench.num_devices),
            _s(p.step_time_s),
            status,
            _s(p.wall_s),
            str(len(p.wall_runs_s)),
            _plan(p.plan),
        ]
        cells += [_baseline_cell(r.attempts[m], p) for m in BASELINES]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _calibration_table(rows: list[CalibrationResult], compare: bool) -> list[str]:
    if compare:
        lines = [
            "| row | run | GPUs | published plan | its modelled step (s) | paraplan's plan | "
            "paraplan step (s) | published / paraplan | solve (s) | note |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for c in rows:
            if not (c.published and c.paraplan):
                continue
            pub, ours = c.published, c.paraplan
            note = "; ".join(
                x
                for x in (
                    "published plan predicted out of memory" if pub.outcome is Outcome.UNFIT else "",
                    f"outside the space: {pub.detail}" if pub.detail else "",
                    f"paraplan: {ours.outcome}" if not ours.has_plan else "",
                )
                if x
            )
            lines.append(
                f"| {c.row_id} | {c.label} | {c.num_devices} | {_plan(pub.plan)} | "
                f"{_s(pub.step_time_s)} | {_plan(ours.plan)} | {_s(ours.step_time_s)} | "
                f"{_ratio(_step_ratio(pub, ours))} | {_s(ours.wall_s)} | {note} |"
            )
        return lines
    lines = [
        "| row | run | GPUs | cluster | published (s) | predicted (s) | error | "
        "constant MFU error | fits | recompute | defaults assumed |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in rows:
        lines.append(
            f"| {c.row_id} | {c.label} | {c.num_devices} | {c.cluster} | "
            f"{_s(c.published_step_s)} | {_s(c.predicted_s)} | {c.error:+.1%} | "
            f"{c.const_mfu_error:+.1%} | {'yes' if c.fits else 'NO'} | {c.recompute} | "
            f"{'; '.join(c.defaults)} |"
        )
    return lines


def _sweep_table(pts: list[SweepPoint]) -> list[str]:
    first = "knobs free" if pts[0].sweep == "space" else SWEEP_LABELS[pts[0].sweep]
    lines = [
        f"| {first} | plans in space | solver (s) | runs | solver status | "
        "enumeration | plans visited | step (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in sorted(pts, key=lambda p: p.x):
        a, e = p.paraplan, p.exhaustive
        lines.append(
            f"| {p.label} | {p.space_size:.3g} | {_s(a.wall_s)} | {len(a.wall_runs_s)} | "
            f"{a.solver_status or a.outcome} | {_enum_time(e)} ({e.outcome}) | "
            f"{e.num_plans or '—'} | {_s(a.step_time_s)} |"
        )
    return lines


def _memory_table(res: list[ScenarioResult]) -> list[str]:
    cols = ["scenario", "plan", "stage"] + [n for _, n in MEMORY_PARTS] + ["total", "capacity"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in res:
        a = r.attempts[Method.PARAPLAN]
        if not a.stages:
            continue
        peak = max(a.stages, key=lambda st: st["total_bytes"])
        cells = [f"`{r.bench.name}`", _plan(a.plan), f"{peak['stage']} (peak)"]
        cells += [f"{peak[k] / GIB_BYTES:.1f}" for k, _ in MEMORY_PARTS]
        cells += [f"{peak['total_bytes'] / GIB_BYTES:.1f}", f"{(a.capacity_bytes or 0) / GIB_BYTES:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("\nGiB per device (2^30 bytes).")
    return lines


def flagships(suite: Suite) -> list[ScenarioResult]:
    """The scenarios the memory report shows (the largest ones when none is marked)."""
    marked = [r for r in suite.scenarios if r.bench.is_flagship]
    return marked or sorted(suite.scenarios, key=lambda r: r.bench.num_devices)[-3:]


def markdown(suite: Suite, plots: list[Path], issues: list[str]) -> str:
    cfg, m = suite.config, suite.machine
    names = {p.name for p in plots}
    img = lambda name, alt: [f"![{alt}]({name})", ""] if name in names else []  # noqa: E731
    mode = (
        "quick subset (`python -m benchmarks --quick`)"
        if cfg.is_quick
        else "full suite (`python -m benchmarks`)"
    )
    phases = ", ".join(f"{k} {v / 60:.1f} min" for k, v in suite.phase_wall_s.items())
    out = [
        "# paraplan benchmark report",
        "",
        f"- **Run**: {suite.started}; {mode}; total wall {suite.wall_s / 60:.1f} min ({phases}).",
        f"- **Machine**: {m['cpu']}, {m['cores']} cores, {m['memory']} RAM; {m['platform']}; "
        f"Python {m['python']}, OR-Tools {m['ortools']}, paraplan {m['paraplan']} at commit "
        f"{m['commit']}. Load average {m['load_average']} at the start, "
        f"{m.get('load_average_end', '?')} at the end (other work shared the machine).",
        f"- **Settings**: timings are medians of up to {cfg.repeats} runs, each in a fresh forked "
        f"process (runs slower than {cfg.repeat_below_s:g} s, and runs stopped by a limit, are "
        f"measured once; the `runs` column says how many). paraplan.solve time limit "
        f"{cfg.time_limit_s:g} s, {cfg.workers} workers, seed {cfg.seed}; a run still going at "
        f"2 x limit + 30 s is killed. Exhaustive enumeration budget {cfg.enum_budget_s:g} s per "
        f"scenario, {cfg.sweep_enum_budget_s:g} s per sweep point. These budgets (once-only "
        "timing of slow runs, short enumeration budgets) keep the full suite near 25 minutes on "
        "this 2-core machine; the largest scenarios were kept to a few per size class for the "
        "same reason.",
        "- **What is compared**: every plan is scored by paraplan's cost model, so step-time "
        "ratios compare plans, not models. Ratios are baseline / paraplan within this run: a "
        "step-time ratio above 1 means paraplan's plan is faster; a planning-time ratio below 1 "
        "means the baseline planned faster.",
        "",
        "## Headline",
        "",
        *_headline(suite, issues),
        "",
        "## 1. Scenarios and baselines",
        "",
        "Each baseline cell: *modelled step-time ratio / planning wall-time ratio* to paraplan. "
        "Baselines: **uniform split** = paraplan without uneven layer splits; **fixed placement** "
        "= paraplan with the rank order fixed to Megatron's tp-cp-dp-pp; **rule of thumb** = "
        "TP = GPUs per 8-GPU baseboard (capped by the heads), the smallest PP that fits, the rest "
        "DP, micro-batch 1, ZeRO-1, full recompute only if needed; **exhaustive** = brute force "
        "over the same unpruned space within its budget (the estimate extrapolates the measured "
        "plans/s to the whole space).",
        "",
        *_scenario_table(suite.scenarios),
        "",
        *img("baselines.png", "step-time ratio of each baseline"),
        "## 2. Published expert configurations",
        "",
        "For each calibration run: the published plan on paraplan's cost model against paraplan's "
        "own plan for the same model, cluster, batch and job settings (the experts' planning time "
        "is unknown, so there is no planning-time ratio).",
        "",
        *_calibration_table(suite.calibration, compare=True),
        "",
        "## 3. Scaling of planning time",
        "",
    ]
    for sweep in sorted({p.sweep for p in suite.sweeps}):
        pts = [p for p in suite.sweeps if p.sweep == sweep]
        out += [
            f"### vs {SWEEP_LABELS[sweep]}",
            "",
            *img(f"scaling_{sweep}.png", sweep),
            *_sweep_table(pts),
            "",
        ]
    out += [
        "Sweeps: GPU count = Llama 3 8B on 1 to 65,536 H100, 4K tokens x 4,096 sequences "
        "(1-4 GPUs cannot hold it: the answer there is a proof that no plan fits); layer "
        "count = a 4096-wide GPT (32 heads) on 64 H100, 4K x 512; search-space size = GPT-3 "
        "2.7B on 16 A100-80GB with every knob fixed, then freed one group at a time.",
        "",
    ]
    if suite.calibration:
        med, p90 = summary([c.error for c in suite.calibration])
        out += [
            "## 4. Fidelity: predicted vs published step time",
            "",
            f"{len(suite.calibration)} supported runs of the calibration set; |error| median "
            f"{med:.1%}, 90th percentile {p90:.1%}.",
            "",
            *img("fidelity.png", "fidelity scatter"),
            *_calibration_table(suite.calibration, compare=False),
            "",
        ]
    out += [
        "## 5. Memory of the chosen plans",
        "",
        *img("memory.png", "memory breakdown"),
        *_memory_table(flagships(suite)),
        "",
        "## 6. Findings",
        "",
    ]
    out += [f"- {x}" for x in issues] or ["None."]
    return "\n".join(out) + "\n"


def write_results(suite: Suite, out: Path, plots: list[Path]) -> list[Path]:
    """results.json, the CSVs and report.md under ``out``; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    _write_json(suite, out / "results.json")
    paths = _write_csvs(suite, out)
    (out / "report.md").write_text(markdown(suite, plots, findings(suite)))
    return [out / "results.json", *paths, out / "report.md"]
