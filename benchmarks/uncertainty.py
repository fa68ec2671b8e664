"""The model's uncertainty band per accelerator generation, from the calibration residuals.

    python -m benchmarks.uncertainty            # rewrite hardware/data/uncertainty.yaml
    python -m benchmarks.uncertainty --check    # print the band, write nothing

Every published run of the calibration set (benchmarks/data/published_runs_calibration.csv,
mapped to scenarios by benchmarks/calibration_set.py and scored by benchmarks/fidelity.py, the
same rows and mapping as the fidelity figures) gives a ratio measured / predicted step time.
Per accelerator generation the band is the 10th and 90th percentile of those ratios (linear
interpolation between order statistics, ``statistics.quantiles(method="inclusive")``): a
prediction of T seconds is then reported as [p10 * T, p90 * T]. A generation with fewer than
``MIN_ROWS`` runs, or none, uses the percentiles of all rows pooled, and the file says so.

The memory band (``memory:``) is the same percentiles of measured / predicted peak memory over
the readings of benchmarks/data/memory_runs_calibration.csv (benchmarks/memory_fidelity.py).

Regenerate after any change to the cost model's fidelity (efficiency.yaml, cost/, new
calibration rows): the band describes the model that scored the rows.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from datetime import date
from pathlib import Path

import yaml
from paraplan.hardware import build_cluster, node_type, node_type_names, tpu_chip
from paraplan.hardware.tpu import tpu_chip_names

import paraplan
from benchmarks.calibration_set import CSV_PATH
from benchmarks.fidelity import Row, fidelity_rows
from benchmarks.memory_fidelity import MemoryRow, memory_rows
from benchmarks.memory_set import MEMORY_CSV_PATH

__all__ = ["MIN_ROWS", "OUT_PATH", "band_table", "generation_of", "memory_band", "main"]

MIN_ROWS = 8  # fewer runs than this: the generation's own percentiles are too noisy to report
OUT_PATH = Path(__file__).resolve().parents[1] / "hardware" / "data" / "uncertainty.yaml"

_HEADER = """\
# Uncertainty band of the cost model's step time, per accelerator generation (dense models), and one
# band for mixture-of-experts models (`moe`, every MoE run pooled).
# Empirical: written by `python -m benchmarks.uncertainty` (benchmarks/uncertainty.py), {today},
# from the residuals of the calibration set: {csv},
# {num_rows} runs scored with the mapping of benchmarks/calibration_set.py and benchmarks/fidelity.py.
# In-sample: efficiency.yaml is fitted to these runs, so runs outside the set err more.
# ratio = measured / predicted step time; p10 / p90 are its 10th / 90th percentiles, so a
# prediction of T s is reported as [p10 * T, p90 * T] (result JSON: predicted.step_time_band_s).
# source: "generation" = that generation's own runs; "pooled" = fewer than {min_rows} runs of
# its own, so the percentiles of all runs pooled.
# memory: the band of the peak memory, ratio = measured / predicted over every reading (allocated
# and reserved) of {memory_csv}, scored by benchmarks/memory_fidelity.py
# ({memory_rows} readings); in-sample for the fitted allocator overhead (hardware/data/memory.yaml).
# solver.memory_headroom defaults to 1 - 1/p90 (hardware/uncertainty.py default_memory_headroom).
# Do not edit by hand: regenerate after any change to the cost model or the calibration rows.
"""


def generation_of(row: Row) -> str:
    """The accelerator generation of the run's cluster preset (hardware/data/catalog.yaml; TPU
    slices: hardware/data/tpu.yaml)."""
    return build_cluster(row.case.scenario["cluster"]["preset"], nodes=1).accelerator.generation


def _percentiles(ratios: list[float]) -> dict[str, float]:
    deciles = statistics.quantiles(ratios, n=10, method="inclusive")
    return {
        "p10": round(deciles[0], 4),
        "p50": round(statistics.median(ratios), 4),
        "p90": round(deciles[-1], 4),
    }


def _catalog_generations() -> list[str]:
    return sorted(
        {node_type(k).accelerator.generation for k in node_type_names()}
        | {tpu_chip(k).generation for k in tpu_chip_names()}
    )


def _is_moe(row: Row) -> bool:
    return bool(row.case.scenario["model"].get("experts"))


def band_table(rows: list[Row]) -> dict:
    """The data file's content: per generation the band of its dense runs, row count and source,
    and the pool; mixture-of-experts models one band of every MoE run (``moe``: their residuals
    are several times the dense ones', so they would widen every dense generation's band)."""
    by_gen: dict[str, list[float]] = defaultdict(list)
    moe = [r.case.published_step_s / r.predicted_s for r in rows if _is_moe(r)]
    for r in rows:
        if not _is_moe(r):
            by_gen[generation_of(r)].append(r.case.published_step_s / r.predicted_s)
    every = [x for v in by_gen.values() for x in v]
    pooled = {**_percentiles(every), "rows": len(every)}
    generations = {}
    for gen in sorted(set(by_gen) | set(_catalog_generations())):
        own = by_gen.get(gen, [])
        if len(own) >= MIN_ROWS:
            generations[gen] = {**_percentiles(own), "rows": len(own), "source": "generation"}
        else:
            generations[gen] = {**pooled, "rows": len(own), "source": "pooled"}
    return {
        "date": date.today().isoformat(),
        "calibration_rows": len(every),
        "min_rows": MIN_ROWS,
        "paraplan_version": paraplan.paraplan_version(),
        "pooled": pooled,
        "moe": {**_percentiles(moe), "rows": len(moe)},
        "generations": generations,
    }


def memory_band(rows: list[MemoryRow]) -> dict:
    """The memory band: percentiles of measured / predicted peak over every reading of the
    measured-memory file (allocated and reserved: both are what a run asked of the device)."""
    ratios = [measured / predicted for r in rows for _, measured, predicted in r.readings()]
    return {**_percentiles(ratios), "rows": len(ratios)}


def _render(table: dict) -> str:
    csv = CSV_PATH.relative_to(CSV_PATH.parents[2]).as_posix()
    head = _HEADER.format(
        csv=csv,
        num_rows=table["calibration_rows"],
        today=table["date"],
        min_rows=MIN_ROWS,
        memory_csv=MEMORY_CSV_PATH.relative_to(MEMORY_CSV_PATH.parents[2]).as_posix(),
        memory_rows=table["memory"]["rows"],
    )
    return head + yaml.safe_dump(table, sort_keys=False, default_flow_style=None, width=100)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.uncertainty", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="print the band; write nothing")
    ap.add_argument("--out", type=Path, default=OUT_PATH, help=f"data file ({OUT_PATH})")
    args = ap.parse_args(argv)
    table = band_table(fidelity_rows())  # the runs the fidelity figures score
    table["memory"] = memory_band(memory_rows()[0])
    print(f"{'generation':<16} {'rows':>5} {'p10':>7} {'p50':>7} {'p90':>7}  source")
    for gen, g in table["generations"].items():
        print(f"{gen:<16} {g['rows']:>5} {g['p10']:>7.3f} {g['p50']:>7.3f} {g['p90']:>7.3f}  {g['source']}")
    for name, p in (
        ("(dense pooled)", table["pooled"]),
        ("(MoE)", table["moe"]),
        ("(memory)", table["memory"]),
    ):
        print(f"{name:<16} {p['rows']:>5} {p['p10']:>7.3f} {p['p50']:>7.3f} {p['p90']:>7.3f}")
    if not args.check:
        args.out.write_text(_render(table))
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
