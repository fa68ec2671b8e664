"""Serving errors at a source's published precision, reported beside the point errors.

A table that prints whole milliseconds states an interval, not a point: TensorRT-LLM 0.14's
online-serving table (perf-overview.md at 258c754, "Online Serving Measurements", the source of
``trtllm_perf_overview_v0.14_online``) prints Mean TTFT and Mean ITL as integers, so its 6 ms ITL
of Llama 3.1 8B on an H200 is a mean between 5.5 and 6.5 ms. ``interval_error`` scores a
prediction against that interval: 0 inside it, else ``predicted / nearer edge - 1``. The point
error (``predicted / measured - 1``) stays the benchmark's figure and the fit's objective; this
module only prints the interval figure beside it (docs/serving_model.md Sec. 6.0c), so a reader
sees how much of the median is the table's rounding and how much the model's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Protocol

__all__ = ["PUBLISHED_RESOLUTION_MS", "interval_error", "precision_summary", "precision_lines"]

PUBLISHED_RESOLUTION_MS = {"trtllm_perf_overview_v0.14_online": 1.0}
"""Source key -> the resolution (ms) its latency columns are printed at: TensorRT-LLM 0.14's
online table prints Mean TTFT and Mean ITL in whole milliseconds (benchmarks/data/
serving_runs_calibration.csv, its rows' source_url; every ttft_ms_mean and tpot_ms_mean of the
source is an integer). The other sources print fractions of a millisecond or tokens/s."""

MS_METRICS = ("ttft_ms", "tpot_ms")


class _Scored(Protocol):
    @property
    def source(self) -> str: ...
    @property
    def metric(self) -> str: ...
    @property
    def measured(self) -> float: ...
    @property
    def predicted(self) -> float: ...


def interval_error(measured: float, predicted: float, resolution: float) -> float:
    """Error of ``predicted`` against the interval [measured - r / 2, measured + r / 2] a value
    printed at resolution r stands for: 0 inside it, else predicted / (the nearer edge) - 1; the
    point error predicted / measured - 1 when r is 0. Dimensionless."""
    lo, hi = measured - resolution / 2.0, measured + resolution / 2.0
    if resolution <= 0.0 or lo <= 0.0:
        return predicted / measured - 1.0
    if predicted > hi:
        return predicted / hi - 1.0
    if predicted < lo:
        return predicted / lo - 1.0
    return 0.0


def _median(values: list[float]) -> float:
    v = sorted(values)
    n = len(v)
    return float("nan") if n == 0 else (v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2]))


def precision_summary(scores: Sequence[_Scored]) -> dict[tuple[str, str], tuple[int, float, float]]:
    """(source or 'overall', metric) -> (rows, median |interval error|, median |point error|) for
    the millisecond metrics of every source in PUBLISHED_RESOLUTION_MS and their overall lines
    (the other sources' rows enter the overall line with their point errors)."""
    interval: dict[tuple[str, str], list[float]] = defaultdict(list)
    point: dict[tuple[str, str], list[float]] = defaultdict(list)
    for s in scores:
        if s.metric not in MS_METRICS:
            continue
        r = PUBLISHED_RESOLUTION_MS.get(s.source, 0.0)
        e_int = abs(interval_error(s.measured, s.predicted, r))
        e_pt = abs(s.predicted / s.measured - 1.0)
        keys = [("overall", s.metric)] + ([(s.source, s.metric)] if r > 0.0 else [])
        for k in keys:
            interval[k].append(e_int)
            point[k].append(e_pt)
    return {k: (len(v), _median(v), _median(point[k])) for k, v in interval.items()}


def precision_lines(scores: Sequence[_Scored]) -> list[str]:
    """The printed block: one line per (source, metric) at a published resolution, then overall;
    interval median beside the point median."""
    table = precision_summary(scores)
    if not any(k[0] != "overall" for k in table):
        return []
    sources = ", ".join(f"{k} ({v:g} ms)" for k, v in PUBLISHED_RESOLUTION_MS.items())
    lines = [
        f"at the published precision ({sources}: error 0 within the printed value's interval, else "
        "to its nearer edge; the point error, the benchmark's figure, beside it):",
        f"{'source':36} {'metric':22} {'rows':>5} {'interval':>9} {'point':>8}",
    ]
    keys = sorted(k for k in table if k[0] != "overall") + sorted(k for k in table if k[0] == "overall")
    for k in keys:
        n, e_int, e_pt = table[k]
        lines.append(f"{k[0]:36} {k[1]:22} {n:5d} {e_int:9.1%} {e_pt:8.1%}")
    return lines
