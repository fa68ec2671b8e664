"""The only place that turns SI seconds into CP-SAT integers.

Times become ticks of ``TIME_RESOLUTION_S`` (1 ns), rounded to nearest. Memory never enters the
model as an integer: feasibility is decided in floating point by cost/ (most layers per stage and
mode) and passed as variable bounds, so no capacity rounding is needed.
Overflow: the objective is at most 12 x step ticks; a 10^5 s step is 1.2e15, far below 2**63.
Tolerance against ``cost.evaluate``: each per-layer coefficient is off by at most half a tick, so
a stage time by (k + 1)/2 ticks and the step by (m + pp + 2)(k_total + 1)/2 ticks.
"""

from __future__ import annotations

__all__ = ["TIME_RESOLUTION_S", "VP_SCALE", "to_ticks", "from_ticks", "tolerance_s"]

TIME_RESOLUTION_S = 1e-9
VP_SCALE = 12  # lcm(1, 2, 3, 4): the pipeline bubble (sum - max) / vp stays integral


def to_ticks(seconds: float) -> int:
    return int(round(seconds / TIME_RESOLUTION_S))


def from_ticks(ticks: float) -> float:
    return ticks * TIME_RESOLUTION_S


def tolerance_s(num_micro_batches: int, pp: int, k_total: int) -> float:
    return (num_micro_batches + pp + 2) * (k_total + 1) / 2 * TIME_RESOLUTION_S
