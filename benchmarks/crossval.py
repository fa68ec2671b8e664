"""Leave-one-source-out cross-validation of the cost model's fitted efficiencies (issue 11 item 6).

    python -m benchmarks.crossval        # ~5 min on 2 cores

For each source (publication: the calibration file's ``source`` column up to its first comma or
parenthesis, ``Case.source``), refit the efficiency parameters (``benchmarks.calibrate.fit_table``,
from the physical priors of ``efficiency.yaml``) on every other source's runs and score the held-out
source's runs with them. Printed beside: the in-sample error (the committed ``efficiency.yaml``,
fitted on every run) and the best constant-MFU estimate on the same rows, in-sample and
cross-validated the same way (its one MFU fitted on the other sources). Recompute, where a run
does not state it, is fixed to the mode ``benchmarks.fidelity`` picks under the committed table.
A generation with no run left keeps its priors times the fitted/prior ratios of the other generations
of its platform (GPU or TPU; ``benchmarks.calibrate.platform``).
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass

from benchmarks.calibrate import _fixed_recompute, _generation, _table, fit_table, platform, priors
from benchmarks.fidelity import Row, constant_mfu_errors, evaluate_case, fidelity_rows, summary

__all__ = ["CrossVal", "crossval", "main"]


@dataclass(frozen=True)
class CrossVal:
    rows: list[Row]  # in-sample (committed table)
    loso_errors: dict[int, float]  # row_id -> held-out error
    mfu_loso_errors: dict[int, float]
    by_source: dict[str, list[int]]
    generations: dict[int, str]  # row_id -> accelerator generation


def _mfu_errors(rows: list[Row], mfu: float) -> list[float]:
    return [r.model_flops_per_step / (r.peak_flops * mfu) / r.case.published_step_s - 1 for r in rows]


def crossval(log=None) -> CrossVal:
    rows = fidelity_rows()
    cases = [_fixed_recompute(r.case) for r in rows]
    gens = {c.row_id: _generation(c) for c in cases}
    by_source: dict[str, list[int]] = defaultdict(list)
    for c in cases:
        by_source[c.source].append(c.row_id)
    full = fit_table(cases, priors())
    loso: dict[int, float] = {}
    mfu_loso: dict[int, float] = {}
    for source, ids in sorted(by_source.items()):
        held = set(ids)
        train = [c for c in cases if c.row_id not in held]
        table, _ = fit_table(train, priors(), reuse=full, only={gens[i] for i in held})
        with _table(table):
            for c in cases:
                if c.row_id in held:
                    loso[c.row_id] = evaluate_case(c).predicted_s / c.published_step_s - 1
        mfu, _ = constant_mfu_errors([r for r in rows if r.case.row_id not in held])
        for r, e in zip(
            [r for r in rows if r.case.row_id in held],
            _mfu_errors([r for r in rows if r.case.row_id in held], mfu),
            strict=True,
        ):
            mfu_loso[r.case.row_id] = e
        if log:
            med, p90 = summary([loso[i] for i in ids])
            log(f"held out {source}: {len(ids)} runs, median |err| {med:.1%}, p90 {p90:.1%}")
    return CrossVal(rows, loso, mfu_loso, dict(by_source), gens)


def main() -> int:
    cv = crossval(log=lambda m: print(m, file=sys.stderr))
    rows = cv.rows
    ins = {r.case.row_id: r.error for r in rows}
    mfu, base = constant_mfu_errors(rows)
    print(f"{'source (held out)':<48} {'runs':>4}  {'in-sample':>15}  {'LOSO':>15}  {'const MFU LOSO':>15}")
    for source, ids in sorted(cv.by_source.items(), key=lambda kv: -len(kv[1])):
        cols = [summary([d[i] for i in ids]) for d in (ins, cv.loso_errors, cv.mfu_loso_errors)]
        print(f"{source[:48]:<48} {len(ids):>4}  " + "  ".join(f"{m:>6.1%} / {p:>6.1%}" for m, p in cols))
    ids = [r.case.row_id for r in rows]
    lines = {
        "paraplan in-sample": summary([ins[i] for i in ids]),
        "paraplan leave-one-source-out": summary([cv.loso_errors[i] for i in ids]),
        f"constant MFU in-sample ({mfu:.1%})": summary(base),
        "constant MFU leave-one-source-out": summary([cv.mfu_loso_errors[i] for i in ids]),
    }
    print(f"\n{len(rows)} runs from {len(cv.by_source)} sources (median |err| / p90):")
    for name, (m, p) in lines.items():
        print(f"  {name:<40} {m:>6.1%} / {p:>6.1%}")
    per_source = [statistics.median(abs(cv.loso_errors[i]) for i in v) for v in cv.by_source.values()]
    print(f"  median over sources of the held-out median |err|: {statistics.median(per_source):.1%}")
    gpu = [r for r in rows if platform(cv.generations[r.case.row_id]) == "gpu"]
    for kind, moe in (("mixture-of-experts", True), ("dense", False)):
        kept = [r.case.row_id for r in gpu if bool(r.case.scenario["model"].get("experts")) is moe]
        (m, p), (lm, lp) = (summary([d[i] for i in kept]) for d in (ins, cv.loso_errors))
        print(f"  {kind} GPU runs ({len(kept)}): in-sample {m:.1%} / {p:.1%}, held out {lm:.1%} / {lp:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
