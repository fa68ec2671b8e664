"""Fit the TPU chip families' efficiency parameters (``hardware/data/efficiency_tpu.yaml``) to the
TPU rows of the calibration set, and cross-validate leaving one chip family out.

    python -m benchmarks.calibrate_tpu        # prints the fitted table, in-sample and LOCO errors

The same coordinate descent as the GPU generations (``benchmarks.calibrate.fit_table``: per
family, large-GEMM efficiency, fused-attention efficiency and the fixed per-kernel time, from the
priors of efficiency_tpu.yaml). Leave-one-chip-out: refit on the other two families' rows; the
held-out family keeps its priors times the mean fitted/prior ratio of the others (fit_table's
transfer), and its rows are scored with that.
"""

from __future__ import annotations

import statistics
import sys

import yaml

from benchmarks.calibrate import _generation, _table, fit_table, priors
from benchmarks.calibration_set import Case
from benchmarks.fidelity import evaluate_case, fidelity_cases

__all__ = ["tpu_cases", "fit_tpu", "leave_one_chip_out", "main"]


def tpu_cases() -> list[Case]:
    return [c for c in fidelity_cases() if _generation(c).startswith("tpu_")]


def _tpu_priors() -> dict[str, dict[str, float]]:
    return {g: v for g, v in priors().items() if g.startswith("tpu_")}


def fit_tpu(cases: list[Case], log=None) -> dict[str, dict[str, float]]:
    table, _ = fit_table(cases, _tpu_priors(), log=log)
    return table


def errors(cases: list[Case], table: dict) -> dict[int, tuple[float, bool]]:
    """row_id -> (predicted / published - 1, fits memory) under ``table``."""
    with _table(table):
        return {c.row_id: (r.error, r.fits) for c in cases for r in [evaluate_case(c)]}


def leave_one_chip_out(cases: list[Case], log=None) -> dict[int, float]:
    out: dict[int, float] = {}
    gens = {c.row_id: _generation(c) for c in cases}
    for gen in sorted(set(gens.values())):
        train = [c for c in cases if gens[c.row_id] != gen]
        table = fit_tpu(train)
        held = [c for c in cases if gens[c.row_id] == gen]
        errs = errors(held, table)
        out |= {i: e for i, (e, _) in errs.items()}
        if log:
            log(
                f"held out {gen}: {len(held)} runs, median |err| "
                f"{statistics.median(abs(e) for e, _ in errs.values()):.1%}"
            )
    return out


def main() -> int:
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    cases = tpu_cases()
    table = fit_tpu(cases, log=log)
    print(yaml.safe_dump({"generations": table}, default_flow_style=None, sort_keys=False))
    fitted = errors(cases, table)
    loco = leave_one_chip_out(cases, log=log)
    for c in cases:
        e, fits = fitted[c.row_id]
        print(
            f"row {c.row_id} {_generation(c)} {c.scenario['cluster']['gpus']} chips of "
            f"{c.scenario['cluster']['preset']}: in-sample {e:+.1%}, LOCO {loco[c.row_id]:+.1%}"
            + ("" if fits else "  (predicted out of memory)")
        )
    print(
        f"median |err| in-sample {statistics.median(abs(e) for e, _ in fitted.values()):.1%}, "
        f"leave-one-chip-out {statistics.median(abs(e) for e in loco.values()):.1%}; "
        f"{sum(not f for _, f in fitted.values())} of {len(cases)} predicted out of memory"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
