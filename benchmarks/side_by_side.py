"""paraplan's serving error next to AIConfigurator's, on the rows both express.

    python -m benchmarks.side_by_side PARAPLAN.csv [AIC.csv] [--calibration CSV]

Both files have the columns ``id,metric,measured,predicted,error`` (``benchmarks/serving_fidelity.py
--out`` for paraplan, ``benchmarks/aiconfigurator_side.py --out`` for AIConfigurator; default AIC
file: the committed ``benchmarks/results/aiconfigurator_serving.csv``). They are joined on
(id, metric); a pair whose two ``measured`` values differ by more than 0.01% (more than the
files' rounding: the two benchmarks read different columns of the row) is left out and counted,
so both are scored against the same number. Per
source (the calibration file's ``source_key`` for the id) and metric, then overall per metric and
over all metrics last: the rows, and for each tool the median and p90 |error| (p90 by linear
interpolation between order statistics, numpy's default) and the signed median.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
DEFAULT_AIC = RESULTS / "aiconfigurator_serving.csv"
DEFAULT_CALIBRATION = Path(__file__).parent / "data" / "serving_runs_calibration.csv"
ALL = "all metrics"
OVERALL = "overall"

__all__ = ["Stat", "SideBySide", "side_by_side", "median", "p90", "read_error_csv"]


def median(xs: Sequence[float]) -> float:
    """The median (mean of the two middle values for an even count); nan when empty."""
    s = sorted(xs)
    n = len(s)
    if n == 0:
        return math.nan
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def p90(xs: Sequence[float]) -> float:
    """The 90th percentile, linear between order statistics (numpy.percentile's default)."""
    s = sorted(xs)
    if not s:
        return math.nan
    k = 0.9 * (len(s) - 1)
    lo = math.floor(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


@dataclass(frozen=True)
class Stat:
    """One group's errors for both tools (fractions: 0.1 = 10%)."""

    source: str
    metric: str
    n: int
    paraplan_median_abs: float
    paraplan_p90_abs: float
    paraplan_median: float
    aic_median_abs: float
    aic_p90_abs: float
    aic_median: float


@dataclass(frozen=True)
class SideBySide:
    stats: list[Stat]
    joined: int  # (id, metric) pairs both scored on the same measured value
    paraplan_only: int  # pairs only paraplan scored
    aic_only: int  # pairs only AIConfigurator scored
    measured_mismatch: list[tuple[str, str]]  # pairs left out: the two measured values differ

    def get(self, source: str, metric: str) -> Stat | None:
        return next((s for s in self.stats if s.source == source and s.metric == metric), None)


def _key(row: Mapping[str, Any]) -> tuple[str, str]:
    return str(row["id"]), str(row["metric"])


def _finite(row: Mapping[str, Any]) -> bool:
    try:
        return math.isfinite(float(row["error"])) and math.isfinite(float(row["measured"]))
    except (TypeError, ValueError):
        return False


def _stat(source: str, metric: str, pairs: Sequence[tuple[float, float]]) -> Stat:
    pp = [p for p, _ in pairs]
    aa = [a for _, a in pairs]
    return Stat(
        source,
        metric,
        len(pairs),
        median([abs(x) for x in pp]),
        p90([abs(x) for x in pp]),
        median(pp),
        median([abs(x) for x in aa]),
        p90([abs(x) for x in aa]),
        median(aa),
    )


def side_by_side(
    paraplan_csv_rows: Iterable[Mapping[str, Any]],
    aic_csv_rows: Iterable[Mapping[str, Any]],
    sources: Mapping[str, str] | None = None,
    rel_tol: float = 1e-4,
) -> SideBySide:
    """Join the two error files on (id, metric) and score both tools on the joined rows.

    ``sources`` maps a row id to its source; without it (or for an id it lacks) the source is the
    id's prefix up to the last '-' (e.g. 'srv'). Groups: each (source, metric), then (OVERALL,
    metric) for each metric, then (OVERALL, ALL) over every joined pair, in that order.
    """
    para = {_key(r): r for r in paraplan_csv_rows if _finite(r)}
    aic = {_key(r): r for r in aic_csv_rows if _finite(r)}
    both = sorted(para.keys() & aic.keys())
    mismatch = []
    groups: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for key in both:
        mp, ma = float(para[key]["measured"]), float(aic[key]["measured"])
        if not math.isclose(mp, ma, rel_tol=rel_tol, abs_tol=0.0):
            mismatch.append(key)
            continue
        row_id, metric = key
        src = (sources or {}).get(row_id) or row_id.rsplit("-", 1)[0]
        pair = (float(para[key]["error"]), float(aic[key]["error"]))
        groups.setdefault((src, metric), []).append(pair)
        groups.setdefault((OVERALL, metric), []).append(pair)
        groups.setdefault((OVERALL, ALL), []).append(pair)

    def order(k: tuple[str, str]) -> tuple[int, str, int, str]:
        src, metric = k
        return (src == OVERALL, src, metric == ALL, metric)

    stats = [_stat(src, metric, groups[(src, metric)]) for src, metric in sorted(groups, key=order)]
    return SideBySide(
        stats=stats,
        joined=len(both) - len(mismatch),
        paraplan_only=len(para.keys() - aic.keys()),
        aic_only=len(aic.keys() - para.keys()),
        measured_mismatch=mismatch,
    )


def table(result: SideBySide) -> str:
    """The printed table: one line per group, overall last."""
    head = (
        f"{'source':36} {'metric':22} {'n':>4}   {'paraplan med|err| p90|err|  med':>34}   "
        f"{'AIConfigurator med|err| p90|err|  med':>38}"
    )
    lines = [head]
    for s in result.stats:
        lines.append(
            f"{s.source:36} {s.metric:22} {s.n:4d}   {s.paraplan_median_abs:20.1%} {s.paraplan_p90_abs:8.1%} "
            f"{s.paraplan_median:+6.1%}   {s.aic_median_abs:24.1%} {s.aic_p90_abs:8.1%} {s.aic_median:+6.1%}"
        )
    lines.append(
        f"joined {result.joined} (id, metric) pairs; paraplan only {result.paraplan_only}, "
        f"AIConfigurator only {result.aic_only}, left out for differing measured values "
        f"{len(result.measured_mismatch)}"
    )
    return "\n".join(lines)


def read_error_csv(path: Path) -> list[dict[str, str]]:
    """Rows of an ``id,metric,measured,predicted,error`` file ('#' comment lines skipped)."""
    with Path(path).open(newline="") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def _sources(path: Path) -> dict[str, str]:
    if not Path(path).exists():
        return {}
    return {r["id"]: r["source_key"] for r in read_error_csv(path)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.side_by_side", description=__doc__.splitlines()[0]
    )
    ap.add_argument("paraplan", help="paraplan's id,metric,measured,predicted,error CSV")
    ap.add_argument("aic", nargs="?", default=str(DEFAULT_AIC), help="AIConfigurator's (default: committed)")
    ap.add_argument("--calibration", default=str(DEFAULT_CALIBRATION), help="for each id's source_key")
    args = ap.parse_args(argv)
    result = side_by_side(
        read_error_csv(Path(args.paraplan)), read_error_csv(Path(args.aic)), _sources(Path(args.calibration))
    )
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
