"""Run the benchmark suite: planning speed, plan quality against baselines, and model fidelity.

    python -m benchmarks                  # full suite -> benchmarks/results/
    python -m benchmarks --quick          # the quick subset -> benchmarks/results/tmp/quick/
    python -m benchmarks --out DIR --repeats N

Writes results.json, scenarios.csv, calibration.csv, sweeps.csv, report.md and PNG plots, then
prints the per-scenario table. Progress goes to stderr. Exit code 0 when the run completed (its
findings, e.g. a baseline beating paraplan, are in the report and do not fail the run).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.fidelity import summary
from benchmarks.harness import Config, run_all
from benchmarks.plots import write_plots
from benchmarks.report import console_table, findings, flagships, write_results

DEFAULT_OUT = Path(__file__).parent / "results"
QUICK_OUT = DEFAULT_OUT / "tmp" / "quick"  # git-ignored: a smoke run never overwrites the results


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the quick subset (smoke test)")
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"output folder (default {DEFAULT_OUT}; with --quick {QUICK_OUT})",
    )
    ap.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="timing runs per measurement, median kept (default 3; --quick 1)",
    )
    args = ap.parse_args(argv)
    if args.out is None:
        args.out = QUICK_OUT if args.quick else DEFAULT_OUT
    if args.repeats is not None and args.repeats < 1:
        ap.error("--repeats must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    cfg = Config.for_mode(args.out, is_quick=args.quick, repeats=args.repeats)
    args.out.mkdir(parents=True, exist_ok=True)
    suite = run_all(cfg)
    fid = summary([c.error for c in suite.calibration]) if suite.calibration else (0.0, 0.0)
    plots = write_plots(
        args.out,
        suite.scenarios,
        suite.calibration,
        suite.sweeps,
        fidelity_summary=fid,
        enum_budget_s=cfg.sweep_enum_budget_s,
        flagships=flagships(suite),
    )
    files = write_results(suite, args.out, plots)
    print(console_table(suite))
    issues = findings(suite)
    if issues:
        print(f"\n{len(issues)} findings (see report.md, section 6):")
        for x in issues:
            print(f"  - {x}")
    print(f"\nwrote {len(files) + len(plots)} files to {args.out} in {suite.wall_s / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
