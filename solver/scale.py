"""The only place that turns SI seconds into CP-SAT integers.

Times become ticks of a resolution (1 ns unless the step is so long that its ticks would not fit
in 62 bits: ``resolution_for``), rounded to nearest; one resolution per solve. Memory of a model
with one block kind never enters the model as an integer: feasibility is decided in floating
point by cost/ (most layers per stage and mode) and passed as variable bounds. With several
kinds a stage's memory depends on which blocks it holds, so it enters as a linear row in units
of ``MEMORY_UNIT_BYTES``, each coefficient rounded up and the capacity down (``bytes_up``,
``bytes_down``): the model never accepts a split cost/ says does not fit, and rejects one that
does only when it fits by less than the rounding (a KiB per coefficient).
Overflow: the objective is at most vp x (m + pp) x the slowest stage's ticks plus the sync and
optimizer terms; ``resolution_for`` keeps that ceiling below 2**62 for any step time.
Tolerance against ``cost.evaluate``: each per-layer coefficient is off by at most half a tick, so
a stage time by (k + 1)/2 ticks and the step by (m + pp + 2)(k_total + 1)/2 ticks.
"""

from __future__ import annotations

import math

__all__ = [
    "TIME_RESOLUTION_S",
    "MEMORY_UNIT_BYTES",
    "to_ticks",
    "from_ticks",
    "bytes_up",
    "bytes_down",
    "tolerance_s",
    "resolution_for",
    "objective_scale",
    "SERVING_RESOLUTION",
    "serving_units",
]

TIME_RESOLUTION_S = 1e-9
MEMORY_UNIT_BYTES = 1024
_MAX_TICKS = 2**62


def to_ticks(seconds: float, resolution_s: float = TIME_RESOLUTION_S) -> int:
    return int(round(seconds / resolution_s))


def from_ticks(ticks: float, resolution_s: float = TIME_RESOLUTION_S) -> float:
    return ticks * resolution_s


def bytes_up(num_bytes: float) -> int:
    return math.ceil(num_bytes / MEMORY_UNIT_BYTES)


def bytes_down(num_bytes: float) -> int:
    return math.floor(num_bytes / MEMORY_UNIT_BYTES)


def tolerance_s(
    num_micro_batches: int, pp: int, k_total: int, resolution_s: float = TIME_RESOLUTION_S
) -> float:
    return (num_micro_batches + pp + 2) * (k_total + 1) / 2 * resolution_s


def resolution_for(ceiling_s: float, scale: int) -> float:
    """The finest power-of-ten tick (at least 1 ns) at which ``scale`` x ``ceiling_s`` (the
    largest objective the model can take, in seconds) stays below 2**62 ticks."""
    if not math.isfinite(ceiling_s) or ceiling_s <= 0:
        return TIME_RESOLUTION_S
    need = ceiling_s * scale / _MAX_TICKS
    if need <= TIME_RESOLUTION_S:
        return TIME_RESOLUTION_S
    return 10.0 ** math.ceil(math.log10(need))


def objective_scale(denominators: list[int]) -> int:
    """Multiplier that keeps the pipeline bubble (sum - max) x w integral for every layout's
    bubble weight w (vp, or 1000 vp for the zero-bubble and DualPipe schedules, the
    denominators): their least common multiple."""
    return math.lcm(*denominators) if denominators else 1


SERVING_RESOLUTION = {"req_s": 1e-9, "ms": 1e-6}
"""Serving objectives in integers: requests/s (per GPU) in units of 1e-9 req/s, latencies in
units of 1 ns (1e-6 ms). Goodput per GPU stays below 1e6 req/s (schema MAX_REQUEST_RATE), so
its units below 1e15; a TTFT below an hour, 3.6e12 units."""


def serving_units(value: float, unit: str) -> int:
    """``value`` (requests/s or ms) as the nearest integer of SERVING_RESOLUTION[unit]."""
    return int(round(value / SERVING_RESOLUTION[unit]))
