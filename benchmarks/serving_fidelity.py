"""Serving fidelity: paraplan's predicted serving figures against the measured serving runs.

    python -m benchmarks.serving_fidelity [CSV] [--out FILE.csv] [--crossval] [--fit] [--polish]
                                          [--source KEY] [--moe-tiles ENGINES]

Every row of the CSV (default benchmarks/data/serving_runs_calibration.csv) is mapped by
benchmarks/serving_set.py (rules: benchmarks/data/README.md, "Serving runs") and evaluated with
``paraplan.cost.serving.evaluate_serving``. Scored where the row measures it: output tokens/s per
GPU, TTFT (ms) and TPOT (ms); error = predicted / measured - 1. Printed: the skipped rows by
reason, per source (``source_key``) and metric the rows, median |error|, p90 |error| and the
signed median, and the overall line per metric LAST. ``--out`` writes
``id,metric,measured,predicted,error``.

``--fit`` refits the few parameters of hardware/data/serving.yaml (``fitted:``; coordinate
descent, grid passes around each parameter's prior then fine steps, on the mean over (source,
metric) groups of the median |log ratio|, each group weighted by sqrt(rows) (``group_weight``),
so no source or row dominates, plus a weak log-normal prior around the file's ``priors:``,
``PRIOR_WEIGHT``), from the priors and from the file's ``fitted:`` values, the lower objective
kept (``fit_from_starts``), and prints them. ``--polish`` adds a joint pattern search after the
coordinate passes (``benchmarks.serving_pattern``; tried and not kept, docs/serving_model.md Sec. 6.0d).
``--moe-tiles vllm[,sglang] | none`` sets the engines whose MoE GEMMs take the row tile read in
their kernels (cost/serving_gemm.py ``is_tiled_moe``, passed down to evaluate_serving; default
``vllm``, kept from 2026-12-02, eleventh session, docs/serving_model.md Sec. 6.0e-f; ``none`` is
the model before).
``--crossval`` refits once per held-out source on the other sources and scores the held-out
source with those parameters: leave-one-source-out (LOSO) beside the in-sample figures.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from paraplan.cost.serving import ServingPrediction, evaluate_serving
from paraplan.cost.serving_gemm import TILED_MOE_ENGINES_DEFAULT, check_tiled_moe_engines
from paraplan.hardware.serving import FIT_NAMES, ServingFit, serving_fit, serving_priors

from benchmarks.serving_pattern import pattern_search
from benchmarks.serving_precision import precision_lines
from benchmarks.serving_set import DEFAULT_CSV, METRICS, ServingCase, Skipped, serving_cases
from benchmarks.side_by_side import DEFAULT_AIC as AIC_RESULTS
from benchmarks.side_by_side import read_error_csv, side_by_side
from benchmarks.side_by_side import table as side_by_side_table

__all__ = [
    "Score",
    "score_cases",
    "summary",
    "fit_parameters",
    "fit_from_starts",
    "fit_objective",
    "crossval",
    "group_weight",
    "main",
    "BOUNDS",
]

# Physical bounds of the fitted parameters (file units): host step time 0.2-20 ms, per-sequence
# host time 0-100 us, per-kernel time inside a CUDA graph 2-5 us (a captured kernel node's
# launch, prologue and tail on Hopper / Blackwell: NVIDIA's "Getting Started with CUDA Graphs"
# blog, 2019, ~3.4 us per short kernel inside a graph, CITED FROM MEMORY; 0.5-15 us before
# 2026-12-02, sixth session, when the fold without the AIConfigurator rows floated it to 12 us and
# their held-out TPOT to 40.6%, docs/serving_model.md Sec. 6.0a), decode expert imbalance 1-2.5
# (EPLB range, hardware/data/serving.yaml), grouped-GEMM efficiency 0.2-1, first-wave share 0-1,
# the front-end time per request fixed at its measured value (FRONT_END_MS, benchmarks/
# serving_frontend.py; from 2026-12-02, eleventh session, docs/serving_model.md Sec. 6.0f: 1-10 ms
# before, when the folds without the TensorRT-LLM online rows set it from the AIConfigurator TTFT
# rows alone, 3.98-10 ms; 0-50 ms before the sixth session, 17.7 ms in that fold), serving GEMM
# rate 0.4-1 of the MAMF prior, a
# Python scheduler's time on a Grace host 1-2x the x86 host's (a single-thread speed ratio,
# hardware/data/serving.yaml).
FRONT_END_MS = serving_priors().values()["ttft_overhead_ms"]
"""The front-end time per request (hardware/data/serving.yaml ``ttft_overhead_ms``): measured,
not fitted, so its bounds are the one value."""

BOUNDS = {
    "step_overhead_ms": (0.2, 20.0),
    "per_sequence_us": (0.0, 100.0),
    "per_sequence_cpp_us": (0.0, 100.0),
    "graph_kernel_overhead_us": (2.0, 5.0),
    "moe_decode_imbalance": (1.0, 2.5),
    "moe_gemm_efficiency": (0.2, 1.0),
    "closed_loop_burst": (0.0, 1.0),
    "ttft_overhead_ms": (FRONT_END_MS, FRONT_END_MS),
    "gemm_fraction": (0.4, 1.0),
    "grace_host_factor": (1.0, 2.0),
}


@dataclass(frozen=True)
class Score:
    id: str
    source: str
    metric: str
    measured: float
    predicted: float

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0


def _predicted(p: ServingPrediction, metric: str) -> float:
    if metric == "output_tok_s_per_gpu":
        return p.output_tokens_per_s_per_gpu
    if metric == "ttft_ms":
        return p.ttft_ms_mean
    return p.tpot_ms_mean


def score_cases(
    cases: Sequence[ServingCase],
    fit: ServingFit | None = None,
    tiles: frozenset[str] = TILED_MOE_ENGINES_DEFAULT,
) -> list[Score]:
    """Every measured metric of every case against evaluate_serving's prediction (``tiles``: the
    engines whose MoE GEMMs tile near their tokens, ``--moe-tiles``)."""
    out: list[Score] = []
    for case in cases:
        p = evaluate_serving(
            case.spec, case.cluster, case.plan, case.workload, case.engine, fit=fit, tiled_moe_engines=tiles
        )
        for metric in METRICS:
            if metric in case.measured:
                out.append(Score(case.id, case.source, metric, case.measured[metric], _predicted(p, metric)))
    return out


def _quantile(values: list[float], q: float) -> float:
    v = sorted(values)
    if not v:
        return float("nan")
    i = q * (len(v) - 1)
    lo = math.floor(i)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (i - lo)


def summary(scores: Sequence[Score]) -> dict[tuple[str, str], tuple[int, float, float, float]]:
    """(source or 'overall', metric) -> (rows, median |err|, p90 |err|, signed median)."""
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for s in scores:
        groups[(s.source, s.metric)].append(s.error)
        groups[("overall", s.metric)].append(s.error)
    return {
        k: (
            len(e),
            _quantile([abs(x) for x in e], 0.5),
            _quantile([abs(x) for x in e], 0.9),
            _quantile(e, 0.5),
        )
        for k, e in groups.items()
    }


def _objective(scores: Sequence[Score]) -> float:
    """Mean over (source, metric) groups of the median |log(predicted / measured)|, each group
    weighted by the square root of its rows (``group_weight``)."""
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for s in scores:
        groups[(s.source, s.metric)].append(abs(math.log(max(s.predicted, 1e-12) / s.measured)))
    weights = {k: group_weight(len(v)) for k, v in groups.items()}
    total = sum(weights.values())
    return sum(weights[k] * _quantile(v, 0.5) for k, v in groups.items()) / max(total, 1e-12)


def group_weight(rows: int) -> float:
    """Weight of a (source, metric) group in the fit objective: sqrt(rows). Judged by
    leave-one-source-out (docs/serving_model.md Sec. 5; 2026-12-02, same model and priors, LOSO
    medians tokens/s/GPU / TPOT / TTFT): equal weights 14.1 / 21.4 / 23.0%, sqrt(rows) 13.9 /
    14.7 / 23.5%, rows 18.4 / 23.4 / 26.8%, one pooled median per metric 13.8 / 15.6 / 30.0%. With
    equal weights the two DeepSeek-R1 rows of trtllm_dsr1_best_perf pull as hard as the 173 of
    the TensorRT-LLM 1.0 tables (a median of two rows is mostly noise); with weights by rows the
    largest tables decide every parameter and the held-out sources lose most. The square root is
    the middle: a group's say grows with its evidence, but no source outvotes the others."""
    return math.sqrt(max(rows, 0))


PRIOR_WEIGHT = 0.001
"""Weight of the log-normal prior in the fit (``_penalty``): a parameter e times its prior
(hardware/data/serving.yaml ``priors:``) costs 0.001 of the objective, 0.1 points of median
|log error|. Weak, so the rows decide wherever they can; it keeps a parameter the rows barely
see from wandering to a bound on a flat objective (the front-end time ``ttft_overhead_ms``,
seen only by TTFT rows, went to 30.8 ms in the fold without the TensorRT-LLM online rows, 0.001
of objective better than 9.6 ms, and scored those rows at 87% instead of 14%)."""


def _penalty(values: dict[str, float], priors: dict[str, float]) -> float:
    """PRIOR_WEIGHT x the sum over parameters of log(value / prior)^2 (a maximum a posteriori
    fit with log-normal priors around the data file's ``priors:``)."""
    return PRIOR_WEIGHT * sum(
        math.log(max(values[k], 1e-9) / max(priors[k], 1e-9)) ** 2 for k in values if k in priors
    )


GRID_POINTS = 9
"""Points of the grid each parameter is scanned over in a grid pass of the fit (``_grid``)."""

FINE_FACTORS = (0.8, 0.9, 1.1, 1.25)
"""The factors of a fine pass of the fit: each parameter tried at x * f."""


def _grid(name: str, prior: float) -> list[float]:
    """GRID_POINTS values, log-spaced from prior / 4 to prior x 4 within the parameter's BOUNDS:
    the reach of the old first pass (x 0.25 ... 4), every step of it tried. A grid over the whole
    bounds (tried 2026-12-02) let a parameter its rows barely see cross a flat objective: the
    front-end time went to 18.6 ms in the fold without the TensorRT-LLM online rows, whose
    held-out TTFT was then 48% (docs/serving_model.md Sec. 6.0)."""
    lo, hi = BOUNDS[name]
    a, b = max(lo, prior / 4.0), min(hi, prior * 4.0)
    steps = GRID_POINTS - 1
    return [a * (b / a) ** (i / steps) for i in range(GRID_POINTS)]


def fit_parameters(
    cases: Sequence[ServingCase],
    start: ServingFit | None = None,
    rounds: int = 3,
    log: Callable[[str], None] | None = None,
    grid_rounds: int = 2,
    polish: bool = False,
    tiles: frozenset[str] = TILED_MOE_ENGINES_DEFAULT,
) -> ServingFit:
    """Coordinate descent over FIT_NAMES within BOUNDS from ``start`` (default the data file's
    ``priors:``), each trial kept when it lowers the objective plus the weak prior
    (``_penalty``; module docstring): ``grid_rounds`` passes that scan every parameter over a
    grid from a quarter to four times its prior (``_grid``), then ``rounds`` fine passes at x *
    FINE_FACTORS. The grid passes replace a first pass at x * (0.25, 0.5, 0.7, 1.4, 2, 4) of the
    current value (before 2026-12-02, fifth session), which stopped in a local optimum when a
    parameter's better basin lay between or beyond those steps: ``closed_loop_burst`` at 0.56
    against 1.0 (objective 0.1646 against 0.1546 with the serving-kernel GEMM rates,
    docs/serving_model.md Sec. 6.0). With ``polish`` (``--polish``; not the default) a joint
    pattern search follows (``benchmarks.serving_pattern``): it finds lower objectives (from the priors
    0.1536 -> 0.1498, from the shipped values 0.1507 -> 0.1491) but a worse leave-one-source-out
    in total (48.7 -> 51.6 points; docs/serving_model.md Sec. 6.0d), so it was not kept."""
    values = (start or serving_priors()).values()
    priors = serving_priors().values()

    def cost(trial: dict[str, float]) -> float:
        return _objective(score_cases(cases, ServingFit.from_values(trial), tiles)) + _penalty(trial, priors)

    best = cost(values)
    for r in range(grid_rounds + rounds):
        for name in FIT_NAMES:
            lo, hi = BOUNDS[name]
            base = values[name] if values[name] > 0 else 1.0
            if r < grid_rounds:
                trials = _grid(name, priors[name])
            else:
                trials = [min(hi, max(lo, base * f)) for f in FINE_FACTORS]
            for x in trials:
                if x == values[name]:
                    continue
                trial = {**values, name: x}
                obj = cost(trial)
                if obj < best - 1e-6:
                    best, values = obj, trial
            if log:
                log(f"round {r} {name} = {values[name]:.4g} (objective {best:.4f})")
    if polish:
        values, best = pattern_search(values, best, cost, BOUNDS, log)
    return ServingFit.from_values(values)


def fit_objective(
    cases: Sequence[ServingCase], fit: ServingFit, tiles: frozenset[str] = TILED_MOE_ENGINES_DEFAULT
) -> float:
    """What the fit minimises: ``_objective`` on ``cases`` under ``fit`` plus the weak prior."""
    return _objective(score_cases(cases, fit, tiles)) + _penalty(fit.values(), serving_priors().values())


def fit_from_starts(
    cases: Sequence[ServingCase],
    starts: Sequence[ServingFit | None],
    log: Callable[[str], None] | None = None,
    polish: bool = False,
    tiles: frozenset[str] = TILED_MOE_ENGINES_DEFAULT,
) -> ServingFit:
    """``fit_parameters`` from each start (None: the priors), the fit of the lowest objective kept
    (the first on a tie). ``--fit`` starts from the priors and from the data file's ``fitted:``
    values (the last fit: the descent has several minima, docs/serving_model.md Sec. 6.0d); a
    leave-one-source-out fold starts from the priors alone, as the held-out source shaped the
    file's values."""
    best: tuple[float, ServingFit] | None = None
    for i, start in enumerate(starts):
        fit = fit_parameters(cases, start=start, log=log, polish=polish, tiles=tiles)
        obj = fit_objective(cases, fit, tiles)
        if log:
            log(f"start {i} ({'priors' if start is None else 'given values'}): objective {obj:.4f}")
        if best is None or obj < best[0] - 1e-9:
            best = (obj, fit)
    if best is None:
        raise ValueError("fit_from_starts needs at least one start")
    return best[1]


def crossval(
    cases: Sequence[ServingCase],
    log: Callable[[str], None] | None = None,
    polish: bool = False,
    tiles: frozenset[str] = TILED_MOE_ENGINES_DEFAULT,
) -> list[Score]:
    """Leave one source out: fit on the other sources from the priors (as the in-sample fit),
    score the held-out one with that fit."""
    out: list[Score] = []
    for source in sorted({c.source for c in cases}):
        train = [c for c in cases if c.source != source]
        held = [c for c in cases if c.source == source]
        fit = fit_parameters(train, polish=polish, tiles=tiles)
        if log:
            log(f"held out {source}: " + ", ".join(f"{k} {v:.3g}" for k, v in fit.values().items()))
        out += score_cases(held, fit, tiles)
    return out


def _print_table(
    title: str,
    table: dict[tuple[str, str], tuple[int, float, float, float]],
    loso: dict[tuple[str, str], tuple[int, float, float, float]] | None,
) -> None:
    print(title)
    head = f"{'source':36} {'metric':22} {'rows':>5} {'median':>8} {'p90':>8} {'signed':>8}"
    print(head + (f" {'LOSO med':>9} {'LOSO p90':>9}" if loso is not None else ""))
    keys = sorted(k for k in table if k[0] != "overall") + sorted(k for k in table if k[0] == "overall")
    for k in keys:
        n, med, p90, signed = table[k]
        line = f"{k[0]:36} {k[1]:22} {n:5d} {med:8.1%} {p90:8.1%} {signed:+8.1%}"
        if loso is not None and k in loso:
            line += f" {loso[k][1]:9.1%} {loso[k][2]:9.1%}"
        print(line)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.serving_fidelity", description=__doc__.split("\n")[0]
    )
    ap.add_argument(
        "csv", nargs="?", default=str(DEFAULT_CSV), help="serving runs (the calibration file's columns)"
    )
    ap.add_argument("--out", help="write id,metric,measured,predicted,error to this CSV")
    ap.add_argument("--crossval", action="store_true", help="leave-one-source-out refit beside in-sample")
    ap.add_argument(
        "--fit", action="store_true", help="refit hardware/data/serving.yaml's parameters and print them"
    )
    ap.add_argument(
        "--polish",
        action="store_true",
        help="--fit and --crossval end with a joint pattern search (tried, not kept: serving_model.md 6.0d)",
    )
    ap.add_argument("--source", action="append", help="score only these source_key values")
    ap.add_argument(
        "--moe-tiles",
        default=",".join(sorted(TILED_MOE_ENGINES_DEFAULT)),
        help="engines (vllm,sglang) whose MoE GEMMs pad to a tile near their tokens, or none (cost/"
        "serving_gemm.py is_tiled_moe; default vllm: serving_model.md 6.0e-f)",
    )
    ap.add_argument("--rows", type=int, help="score only the first N mapped rows (quick checks)")
    ap.add_argument(
        "--aic",
        default=str(AIC_RESULTS),
        help="AIConfigurator's errors on the same rows (id,metric,measured,predicted,error; default: the "
        "committed run of benchmarks.aiconfigurator_side); 'none' leaves the side-by-side table out",
    )
    args = ap.parse_args(argv)
    tiles = check_tiled_moe_engines(frozenset(e for e in args.moe_tiles.split(",") if e and e != "none"))
    cases, skipped = serving_cases(Path(args.csv))
    if args.source:
        cases = [c for c in cases if c.source in args.source]
        skipped = [s for s in skipped if s.source in args.source]
    if args.rows:
        cases = cases[: args.rows]
    _print_skipped(skipped)
    fit = None
    if args.fit:
        fit = fit_from_starts(
            cases,
            (None, serving_fit()),
            log=lambda m: print(m, file=sys.stderr),
            polish=args.polish,
            tiles=tiles,
        )
        print("fitted: " + ", ".join(f"{k}: {v:.4g}" for k, v in fit.values().items()))
    scores = score_cases(cases, fit, tiles)
    loso = (
        summary(crossval(cases, log=lambda m: print(m, file=sys.stderr), polish=args.polish, tiles=tiles))
        if args.crossval
        else None
    )
    if args.out:
        with open(args.out, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["id", "metric", "measured", "predicted", "error"])
            for s in scores:
                w.writerow([s.id, s.metric, f"{s.measured:.6g}", f"{s.predicted:.6g}", f"{s.error:.4f}"])
    if args.aic != "none" and Path(args.aic).exists():
        rows = [{"id": s.id, "metric": s.metric, "measured": s.measured, "error": s.error} for s in scores]
        sources = {c.id: c.source for c in cases}
        print(
            "\nside by side with AIConfigurator 0.12.0 on the rows both express (benchmarks/side_by_side.py):"
        )
        print(side_by_side_table(side_by_side(rows, read_error_csv(Path(args.aic)), sources)) + "\n")
    for line in precision_lines(scores):  # a source's whole-ms rows: benchmarks/serving_precision.py
        print(line)
    print(f"scored {len(cases)} rows ({len(scores)} metric values); skipped {len(skipped)}")
    _print_table(
        "error = predicted / measured - 1 (in-sample" + (", beside leave-one-source-out)" if loso else ")"),
        summary(scores),
        loso,
    )
    return 0


def _print_skipped(skipped: Sequence[Skipped]) -> None:
    reasons: dict[str, list[str]] = defaultdict(list)
    for s in skipped:
        reasons[s.reason].append(s.id)
    for reason, ids in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
        shown = ", ".join(ids[:6]) + (f", ... ({len(ids)})" if len(ids) > 6 else "")
        print(f"skipped: {reason}: {shown}")


if __name__ == "__main__":
    raise SystemExit(main())
