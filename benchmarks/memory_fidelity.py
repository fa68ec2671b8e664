"""Memory fidelity: paraplan's predicted peaks against measured ones, and what it says fits.

``python -m benchmarks.memory_fidelity [CSV] [--out FILE]`` maps every row of the measured-memory
file (default ``benchmarks/data/memory_runs_calibration.csv``) to a scenario with its fixed plan
(benchmarks/memory_set.py gives the rules), evaluates it, and compares the row's statistic with the
matching prediction: ``measured_what`` allocated with ``predicted.peak_allocated_bytes`` (tensor
bytes: torch's max_memory_allocated), reserved with ``predicted.peak_reserved_bytes`` (what the
caching allocator holds: max_memory_reserved). A row's error is predicted / measured - 1.
Any file with the calibration file's columns is scored the same way (measured peaks outside the
calibration file): a row the rules cannot map, or whose scenario paraplan refuses, is skipped
with the reason and counted, never raised; a file without the columns exits 2 naming them.

Fit: a row fits when ``predicted.peak_memory_bytes`` (the figure the solver keeps under
capacity) is at most the row's device memory (memory_set.py); the counts are given twice, at
the device's capacity and under the search's default headroom (the memory band's margin,
hardware/uncertainty.py default_memory_headroom: what a plan paraplan picks keeps free). A
*false fit* is a row reported out of memory that paraplan says fits; a *false refusal* a row
that ran that paraplan says does not.

Printed: one line per row, per source (median / p90 |error| per statistic), and the overall line
last. ``--fit`` prints the default allocator's overhead (reserved beyond allocated, a share of
allocated: hardware/data/memory.yaml) that minimises the median |error| of every reserved
reading within its bounds; ``--crossval`` fits it on all sources but one and scores the one left
out, beside the shipped value's in-sample figures.

``--out`` writes ``id,measured_gib,predicted_gib,error,oom,predicted_fits,statistic``, one line
per reading (a row that gives allocated and reserved has two; empty measured / error where the
row gives no reading, statistic ``unstated``).
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from paraplan.cost.memory_reserve import ALLOCATOR_OVERHEAD
from paraplan.cost.plan import Allocator
from paraplan.hardware import default_memory_headroom
from paraplan.hardware.memory import allocator_overhead_bounds

import paraplan
from benchmarks.fidelity import summary
from benchmarks.memory_set import GIB, MEMORY_CSV_PATH, MemoryCase, MemorySkipped, load_memory_cases
from paraplan.errors import ConfigError
from paraplan.instance import build_instance, fixed_plan

__all__ = [
    "MemoryRow",
    "errors_of",
    "evaluate_memory_case",
    "memory_rows",
    "write_memory_rows",
    "main",
    "OUT_HEADER",
]

OUT_HEADER = ("id", "measured_gib", "predicted_gib", "error", "oom", "predicted_fits", "statistic")


@dataclass(frozen=True)
class MemoryRow:
    case: MemoryCase
    predicted_gib: float  # the statistic the row measured (allocated or reserved; reserved if none)
    peak_gib: float  # predicted.peak_memory_bytes, what must fit
    capacity_gib: float
    fits: bool  # at the device's capacity
    fits_with_headroom: bool = True  # under the search's default headroom (the memory band)
    predicted_reserved_gib: float = 0.0  # predicted.peak_reserved_bytes (for a second reading)
    predicted_allocated_gib: float = 0.0  # predicted.peak_allocated_bytes

    @property
    def error(self) -> float | None:
        m = self.case.measured_gib
        return None if m is None or self.case.statistic == "unstated" else self.predicted_gib / m - 1.0

    def readings(self) -> list[tuple[str, float, float]]:
        """(statistic, measured GiB, predicted GiB) of every reading the row gives: its own
        statistic, and reserved too where the source gives it beside allocated."""
        out = []
        if self.case.measured_gib is not None and self.case.statistic != "unstated":
            out.append((self.case.statistic, self.case.measured_gib, self.predicted_gib))
        if self.case.reserved_gib is not None:
            out.append(("reserved", self.case.reserved_gib, self.predicted_reserved_gib))
        return out


def errors_of(rows: list[MemoryRow], statistic: str) -> list[float]:
    """predicted / measured - 1 of every reading of ``statistic`` in ``rows``."""
    return [p / m - 1.0 for r in rows for s, m, p in r.readings() if s == statistic]


def _predicted_bytes(predicted: object, statistic: str) -> float:
    name = "peak_allocated_bytes" if statistic == "allocated" else "peak_reserved_bytes"
    return float(getattr(predicted, name, predicted.peak_memory_bytes))


def evaluate_memory_case(case: MemoryCase) -> MemoryRow:
    inst = build_instance(paraplan.load_scenario(case.scenario))
    p = paraplan.api.evaluate_plan(inst, fixed_plan(inst)).predicted
    capacity = case.capacity_gib * GIB if case.capacity_gib is not None else p.memory_capacity_bytes
    return MemoryRow(
        case,
        _predicted_bytes(p, case.statistic) / GIB,
        p.peak_memory_bytes / GIB,
        capacity / GIB,
        fits=p.peak_memory_bytes <= capacity,
        fits_with_headroom=p.peak_memory_bytes <= capacity * (1.0 - default_memory_headroom()),
        predicted_reserved_gib=p.peak_reserved_bytes / GIB,
        predicted_allocated_gib=p.peak_allocated_bytes / GIB,
    )


def memory_rows(path: Path | str = MEMORY_CSV_PATH) -> tuple[list[MemoryRow], list[MemorySkipped]]:
    cases, skipped = load_memory_cases(path)
    rows: list[MemoryRow] = []
    for c in cases:
        try:
            rows.append(evaluate_memory_case(c))
        except ConfigError as e:
            skipped.append(MemorySkipped(c.row_id, f"plan not expressible: {str(e)[:80]}"))
    return rows, skipped


def write_memory_rows(rows: list[MemoryRow], path: Path | str) -> None:
    with Path(path).open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(OUT_HEADER)
        for r in rows:
            fit = ["yes" if r.case.oom else "no", "yes" if r.fits else "no"]
            readings = r.readings()
            if not readings:  # fit only
                measured = "" if r.case.measured_gib is None else f"{r.case.measured_gib:.4g}"
                out.writerow([r.case.row_id, measured, f"{r.predicted_gib:.4f}", "", *fit, "unstated"])
            for stat, measured_gib, predicted_gib in readings:
                err = predicted_gib / measured_gib - 1.0
                out.writerow(
                    [r.case.row_id, f"{measured_gib:.4g}", f"{predicted_gib:.4f}", f"{err:.6f}", *fit, stat]
                )


def reserved_at(row: MemoryRow, overhead: float) -> float:
    """The row's predicted reserved GiB had the default allocator's overhead been ``overhead``:
    allocated x (1 + overhead), at most the cap a saturated row (reserved held at its device's
    capacity, paraplan/result.py) shows."""
    shipped = row.predicted_allocated_gib * (1 + ALLOCATOR_OVERHEAD[Allocator.DEFAULT])
    saturated = row.predicted_reserved_gib < shipped * (1 - 1e-9)
    grown = row.predicted_allocated_gib * (1 + overhead)
    return min(grown, row.predicted_reserved_gib) if saturated else grown


def _default_readings(rows: list[MemoryRow]) -> list[tuple[MemoryRow, float]]:
    return [
        (r, m)
        for r in rows
        if r.case.scenario["job"].get("allocator", "default") == "default"
        for s, m, _ in r.readings()
        if s == "reserved"
    ]


def reserved_errors(rows: list[MemoryRow], overhead: float) -> list[float]:
    """Errors of the reserved readings of default-allocator rows under ``overhead``."""
    return [reserved_at(r, overhead) / m - 1.0 for r, m in _default_readings(rows)]


def fit_overhead(rows: list[MemoryRow]) -> float:
    """The default allocator's overhead minimising the median |error| of ``rows``' reserved
    readings, on a 0.001 grid within hardware/data/memory.yaml's bounds (ties: nearest the prior);
    the prior where ``rows`` have no reserved reading."""
    low, prior, high = allocator_overhead_bounds("default")
    if not _default_readings(rows):
        return prior
    grid = [round(low + i / 1000, 3) for i in range(round((high - low) * 1000) + 1)]
    return min(grid, key=lambda o: (summary(reserved_errors(rows, o))[0], abs(o - prior)))


def crossval_lines(rows: list[MemoryRow]) -> list[str]:
    """Leave one source out: the overhead fitted on the other sources' reserved readings, and the
    held-out source's reserved median / p90 |error| under it, beside the shipped value's."""
    shipped = ALLOCATOR_OVERHEAD[Allocator.DEFAULT]
    lines = [
        f"allocator overhead (default): shipped {shipped:.3f}, "
        f"fitted on every source {fit_overhead(rows):.3f}"
    ]
    held_all: list[float] = []
    for source in sorted({r.case.source for r in rows}):
        own = [r for r in rows if r.case.source == source]
        if not _default_readings(own):
            continue
        rest = [r for r in rows if r.case.source != source]
        o = fit_overhead(rest)
        held, ins = reserved_errors(own, o), reserved_errors(own, shipped)
        held_all += held
        lines.append(
            f"  {source:<16} {len(held):>3} reserved: "
            f"in-sample {summary(ins)[0]:.1%} / {summary(ins)[1]:.1%}; "
            f"left out (overhead {o:.3f} from the rest) {summary(held)[0]:.1%} / {summary(held)[1]:.1%}"
        )
    every = reserved_errors(rows, shipped)
    lines.append(
        f"  all {len(every):>3} reserved: in-sample {summary(every)[0]:.1%} / {summary(every)[1]:.1%}; "
        f"leave-one-source-out {summary(held_all)[0]:.1%} / {summary(held_all)[1]:.1%}"
    )
    return lines


def _figures(rows: list[MemoryRow]) -> str:
    parts = []
    for stat in ("allocated", "reserved"):
        errs = errors_of(rows, stat)
        if errs:
            med, p90 = summary(errs)
            signed = statistics.median(errs)
            parts.append(f"{stat} {len(errs)}: median |err| {med:.1%}, p90 {p90:.1%}, signed {signed:+.1%}")
    ran = [r for r in rows if not r.case.oom]
    ooms = sum(r.case.oom for r in rows)
    fits = sum(r.case.oom and r.fits for r in rows), sum(r.case.oom and r.fits_with_headroom for r in rows)
    refused = sum(not r.fits for r in ran), sum(not r.fits_with_headroom for r in ran)
    parts.append(f"false fits {fits[0]}/{ooms} OOM rows ({fits[1]} with the default headroom)")
    parts.append(
        f"false refusals {refused[0]}/{len(ran)} rows that ran ({refused[1]} with the default headroom)"
    )
    return "; ".join(parts)


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    doc = __doc__ or ""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.memory_fidelity", description=doc.split("\n")[0]
    )
    parser.add_argument(
        "csv", nargs="?", default=MEMORY_CSV_PATH, type=Path, help="measured peaks (default: %(default)s)"
    )
    parser.add_argument("--out", type=Path, help="write " + ",".join(OUT_HEADER) + " here")
    parser.add_argument(
        "--fit", action="store_true", help="print the default allocator's overhead fitted to every reading"
    )
    parser.add_argument(
        "--crossval",
        action="store_true",
        help="print the allocator overhead's leave-one-source-out figures beside the in-sample ones",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    try:
        rows, skipped = memory_rows(args.csv)
    except (ConfigError, OSError, UnicodeDecodeError, csv.Error) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.out is not None:
        write_memory_rows(rows, args.out)
    reasons = Counter(s.reason for s in skipped)
    if not rows:
        print(f"0 rows scored; {len(skipped)} skipped: " + "; ".join(f"{n} {r}" for r, n in reasons.items()))
        return 1
    print(
        f"{'id':<50} {'stat':<9} {'measured':>8} {'paraplan':>8} {'err':>7} {'peak':>7} {'cap':>6} oom fits"
    )
    for r in rows:
        c, err = r.case, r.error
        measured = "" if c.measured_gib is None else f"{c.measured_gib:.2f}"
        print(
            f"{c.row_id[:50]:<50} {c.statistic:<9} {measured:>8} {r.predicted_gib:>8.2f} "
            f"{'' if err is None else f'{err:+.1%}':>7} {r.peak_gib:>7.2f} {r.capacity_gib:>6.1f} "
            f"{'yes' if c.oom else 'no':<3} {'yes' if r.fits else 'NO'}"
            + (f"  [{'; '.join(c.defaults)}]" if c.defaults else "")
        )
        if c.reserved_gib is not None:  # the same run's second reading
            err2 = r.predicted_reserved_gib / c.reserved_gib - 1.0
            print(
                f"{'':<50} {'reserved':<9} {c.reserved_gib:>8.2f} "
                f"{r.predicted_reserved_gib:>8.2f} {err2:>+7.1%}"
            )
    print(
        f"\n{len(rows)} rows scored; {len(skipped)} skipped: "
        + "; ".join(f"{n} {r}" for r, n in reasons.items())
    )
    by_source: dict[str, list[MemoryRow]] = defaultdict(list)
    for r in rows:
        by_source[r.case.source].append(r)
    print()
    for source, group in by_source.items():
        print(f"{source:<16} {len(group):>3} rows  {_figures(group)}")
    if args.fit:
        print(f"\nfit: allocator_overhead.default {fit_overhead(rows):.3f} (hardware/data/memory.yaml)")
    if args.crossval:
        print("\n" + "\n".join(crossval_lines(rows)))
    print(f"\nparaplan: {len(rows)} rows  {_figures(rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
