"""The serving residuals grouped by what might explain them (issue 23).

    python -m benchmarks.serving_residuals [CSV] [--metric M] [--source KEY]

Scores the serving rows as ``python -m benchmarks.serving_fidelity`` does (``score_cases``) and
groups each metric's errors (predicted / measured - 1) by each feature of the row that a
systematic term could hang on: the source, the engine and its version, the GPU (node preset),
the weights' precision, the model, the layout (aggregated tp / pp / ep / attention DP, or the
prefill and decode pools), the loop (open at a rate, closed at a concurrency, or all at once),
the batch the model predicts (in powers of two) and the isl/osl pair. The values are those of
the ServingCase the row maps to (benchmarks/serving_set.py), defaults included. Per group: the
rows, the signed median, the median and the 90th percentile of |error|. A term that is
systematically wrong shows as a feature whose groups differ in sign; a feature whose groups all
straddle zero explains nothing. docs/serving_model.md Sec. 6 reads these tables.
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from paraplan.cost.serving import ServingPlan, WorkerPlan, evaluate_serving

from benchmarks.serving_fidelity import Score, _quantile
from benchmarks.serving_set import DEFAULT_CSV, METRICS, ServingCase, serving_cases

__all__ = ["FEATURES", "features", "grouped", "main"]

FEATURES = ("source", "engine", "gpu", "precision", "model", "layout", "loop", "batch", "isl_osl")

Group = tuple[int, float, float, float]  # rows, signed median, median |error|, p90 |error|


def _worker(w: WorkerPlan) -> str:
    return f"tp{w.tp} pp{w.pp} ep{w.ep}" + (" dpa" if w.dp_attention else "")


def _layout(p: ServingPlan) -> str:
    if p.mode == "disaggregated" and p.prefill is not None and p.decode is not None:
        return f"P({_worker(p.prefill)}) D({_worker(p.decode)})"
    return _worker(WorkerPlan(tp=p.tp, pp=p.pp, ep=p.ep, dp_attention=p.dp_attention))


def _loop(case: ServingCase) -> str:
    w = case.workload
    if w.request_rate == math.inf:
        return "all at once"
    return "open (rate)" if w.request_rate is not None else "closed (concurrency)"


def features(case: ServingCase, batch: float) -> dict[str, str]:
    """The row's value of every feature of FEATURES; ``batch`` the predicted decode batch."""
    w = case.workload
    return {
        "source": case.source,
        "engine": f"{case.engine.name} {case.engine.version or '(unstated)'}",
        "gpu": case.cluster_preset,
        "precision": w.weights_precision,
        "model": case.model,
        "layout": _layout(case.plan),
        "loop": _loop(case),
        "batch": f"<= {2 ** max(0, math.ceil(math.log2(max(batch, 1.0))))}",
        "isl_osl": f"{w.isl:g}/{w.osl:g}",
    }


def grouped(scores: Sequence[Score], values: dict[str, dict[str, str]]) -> dict[str, dict[str, Group]]:
    """Per feature, per value: (rows, signed median, median |error|, p90 |error|) of ``scores``
    (``values``: each row id's features)."""
    errors: dict[str, dict[str, list[float]]] = {f: defaultdict(list) for f in FEATURES}
    for s in scores:
        for f in FEATURES:
            errors[f][values[s.id][f]].append(s.error)
    return {
        f: {
            k: (
                len(e),
                statistics.median(e),
                _quantile([abs(x) for x in e], 0.5),
                _quantile([abs(x) for x in e], 0.9),
            )
            for k, e in groups.items()
        }
        for f, groups in errors.items()
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.serving_residuals", description=__doc__.split("\n")[0]
    )
    ap.add_argument("csv", nargs="?", default=str(DEFAULT_CSV))
    ap.add_argument("--metric", action="append", choices=METRICS, help="only these metrics (default all)")
    ap.add_argument("--source", action="append", help="only these source_key values")
    args = ap.parse_args(argv)
    cases, _ = serving_cases(Path(args.csv))
    if args.source:
        cases = [c for c in cases if c.source in args.source]
    scores: list[Score] = []
    values: dict[str, dict[str, str]] = {}
    for c in cases:
        p = evaluate_serving(c.spec, c.cluster, c.plan, c.workload, c.engine)
        values[c.id] = features(c, p.batch)
        predicted = {
            "output_tok_s_per_gpu": p.output_tokens_per_s_per_gpu,
            "ttft_ms": p.ttft_ms_mean,
            "tpot_ms": p.tpot_ms_mean,
        }
        scores += [Score(c.id, c.source, m, c.measured[m], predicted[m]) for m in METRICS if m in c.measured]
    for metric in args.metric or METRICS:
        table = grouped([s for s in scores if s.metric == metric], values)
        for feature, groups in table.items():
            print(f"\n{metric} by {feature}")
            print(f"  {'value':44} {'rows':>5} {'signed':>8} {'median':>8} {'p90':>8}")
            for key, (n, signed, med, p90) in sorted(groups.items(), key=lambda kv: (-kv[1][0], kv[0])):
                print(f"  {key[:44]:44} {n:5d} {signed:+8.1%} {med:8.1%} {p90:8.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
