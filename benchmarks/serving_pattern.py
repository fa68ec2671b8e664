"""A joint refine for the serving fit (benchmarks/serving_fidelity.py ``fit_parameters``,
``--polish``): Hooke and Jeeves' pattern search in log space inside each parameter's bounds.
Tried 2026-12-02 (ninth session) and not kept as the default: lower objectives, a worse
leave-one-source-out (docs/serving_model.md Sec. 6.0d)."""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["POLISH_STEPS", "pattern_search"]


POLISH_STEPS = (0.1, 0.05, 0.025, 0.0125)
"""Log-space step sizes of the joint refine after the coordinate passes (``_pattern_search``):
x e^(+-0.1) down to x e^(+-0.0125), about 1% of a value."""


def _clip_log(bounds: tuple[float, float], value: float, delta: float) -> float:
    """``value`` x e^delta inside ``bounds`` (a value at 0 moves to the upper bound's 1% first)."""
    lo, hi = bounds
    base = value if value > 0 else max(lo, 0.01 * hi)
    return min(hi, max(lo, base * math.exp(delta)))


def pattern_search(
    values: dict[str, float],
    best: float,
    cost: Callable[[dict[str, float]], float],
    bounds: dict[str, tuple[float, float]],
    log: Callable[[str], None] | None = None,
) -> tuple[dict[str, float], float]:
    """Hooke and Jeeves' pattern search (J. ACM 8(2), 1961) in log space within ``bounds`` (name
    -> (lo, hi)), from ``values`` at objective ``best``; returns the values and their objective.
    An exploratory sweep tries each parameter at x e^(+-step) on top of the moves already kept in
    the sweep; after a successful sweep the whole move is repeated jointly (the pattern move,
    every parameter at once) and explored around, while that keeps lowering the objective; else
    the step halves (POLISH_STEPS). The joint move reaches minima that one-parameter-at-a-time
    descent stops short of, where two parameters trade against each other along a valley."""

    def explore(point: dict[str, float], f: float, step: float) -> tuple[dict[str, float], float]:
        for name in bounds:
            for sign in (1.0, -1.0):
                x = _clip_log(bounds[name], point[name], sign * step)
                if x == point[name]:
                    continue
                trial = {**point, name: x}
                obj = cost(trial)
                if obj < f - 1e-6:
                    point, f = trial, obj
                    break
        return point, f

    for step in POLISH_STEPS:
        while True:
            new, f_new = explore(values, best, step)
            if f_new >= best - 1e-6:
                break
            base, values, best = values, new, f_new
            while True:  # pattern moves: x_new * (x_new / x_base), clipped, then explored
                moved = {
                    k: _clip_log(bounds[k], values[k], math.log(max(values[k], 1e-12) / max(base[k], 1e-12)))
                    if values[k] > 0 and base[k] > 0
                    else values[k]
                    for k in bounds
                }
                cand, f_cand = explore(moved, cost(moved), step)
                if f_cand >= best - 1e-6:
                    break
                base, values, best = values, cand, f_cand
        if log:
            log(f"pattern step {step:g}: objective {best:.4f}")
    return values, best
