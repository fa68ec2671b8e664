"""Fit the MoE host parameters to the calibration file's MoE rows, and cross-validate them.

    python -m benchmarks.calibrate_moe              # fit on every MoE row (~3 min on 2 cores)
    python -m benchmarks.calibrate_moe --crossval   # leave-one-source-out (~20 min)

The parameters (cost/host.py): ``moe_layer_overhead_us`` (hardware/data/efficiency.yaml, one
value for every generation: the router / permute / dispatch launches of a MoE layer pass with
nothing captured), ``EXPERT_LAUNCH_S`` (one local expert's launches under an FP8 recipe),
``EXPERT_LAUNCH_BF16_S`` (the same in BF16, without the per-expert quantisation: at most
``EXPERT_LAUNCH_S``, ``bf16_launch_bound``) and ``MOE_SYNC_S`` (the device-to-host sync's drain).
Each on a bounded grid; ``MOE_SYNC_S`` at most 300 us, where the
16-H100 nsys bound caps it (<= 1.9 s of a 24.7 s step GPU-idle over 6,144 layer passes,
moe_physics.md Sec. 3.3). Coordinate descent on median + p90 of |log(pred / published)|, the
objective benchmarks/calibrate.py uses for the efficiencies, plus the published one-setting pairs'
ratio misses (benchmarks/moe_pairs.py; e.g. alltoall without graphs against HybridEP with partial
graphs is what pins the launches partial graphs capture). The overlap efficiency and the
dropless imbalance (cost/ep.py) are fitted to the published pairs' ratios instead
(benchmarks/moe_pairs.py) and held fixed here.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import paraplan.cost.host as host
from paraplan.hardware.efficiency import catalog_parameters

from benchmarks.calibrate import _table
from benchmarks.calibration_set import Case, load_cases
from benchmarks.fidelity import evaluate_case, summary
from benchmarks.moe_pairs import PAIRS
from paraplan.errors import ConfigError

__all__ = ["GRID", "bf16_launch_bound", "moe_cases", "scored", "fit", "crossval", "main"]

GRID: dict[str, tuple[float, ...]] = {
    "moe_layer_overhead_us": (0.0, 250.0, 500.0, 1000.0, 1500.0, 2000.0),
    "expert_launch_us": (0.0, 40.0, 80.0, 120.0, 160.0, 200.0),
    "expert_launch_bf16_us": (0.0, 40.0, 80.0, 120.0, 160.0, 200.0),
    "sync_us": (0.0, 50.0, 100.0, 200.0, 300.0),
}


def moe_cases() -> list[Case]:
    return [c for c in load_cases(kind="moe")[0]]


@contextmanager
def parameters(values: dict[str, float]) -> Iterator[None]:
    """Evaluate with these MoE host parameters (file units: us)."""
    from importlib import import_module

    eff = import_module("paraplan.hardware.efficiency")
    table: dict[str, Any] = {g: dict(v) for g, v in eff._raw().items()}
    for params in table.values():
        params["moe_layer_overhead_us"] = values["moe_layer_overhead_us"]
    saved = host.EXPERT_LAUNCH_S, host.EXPERT_LAUNCH_BF16_S, host.MOE_SYNC_S
    host.EXPERT_LAUNCH_S, host.MOE_SYNC_S = values["expert_launch_us"] * 1e-6, values["sync_us"] * 1e-6
    host.EXPERT_LAUNCH_BF16_S = values["expert_launch_bf16_us"] * 1e-6
    try:
        with _table(table):
            yield
    finally:
        host.EXPERT_LAUNCH_S, host.EXPERT_LAUNCH_BF16_S, host.MOE_SYNC_S = saved


def scored(cases: list[Case], values: dict[str, float]) -> dict[int, float]:
    """Relative error of each case the model accepts, under ``values``."""
    out = {}
    with parameters(values):
        for c in cases:
            try:
                out[c.row_id] = evaluate_case(c).predicted_s / c.published_step_s - 1
            except ConfigError:
                continue
    return out


def _loss(errors: dict[int, float]) -> float:
    """median + p90 of the rows' |log(pred / pub)|, plus each published pair's |log| ratio miss
    (benchmarks/moe_pairs.py: pred_a / pred_b over pub_a / pub_b = (1 + e_a) / (1 + e_b)), so a
    setting's measured effect weighs in beside the rows' levels."""
    logs = sorted(abs(math.log1p(e)) for e in errors.values())
    pairs = sum(
        abs(math.log1p(errors[a]) - math.log1p(errors[b])) for a, b, _ in PAIRS if a in errors and b in errors
    )
    return statistics.median(logs) + logs[int(0.9 * (len(logs) - 1))] + pairs


def committed() -> dict[str, float]:
    """The committed values (efficiency.yaml's Hopper entry holds the one global value)."""
    return {
        "moe_layer_overhead_us": catalog_parameters("hopper")["moe_layer_overhead_us"],
        "expert_launch_us": host.EXPERT_LAUNCH_S * 1e6,
        "expert_launch_bf16_us": host.EXPERT_LAUNCH_BF16_S * 1e6,
        "sync_us": host.MOE_SYNC_S * 1e6,
    }


def bf16_launch_bound(values: dict[str, float]) -> bool:
    """BF16_LAUNCH_BOUND: an expert's BF16 launches are a subset of its FP8 ones (cost/host.py)."""
    return values["expert_launch_bf16_us"] <= values["expert_launch_us"]


def fit(cases: list[Case], start: dict[str, float], rounds: int = 2, log=None) -> dict[str, float]:
    best = dict(start)
    best_loss = _loss(scored(cases, best))
    for _ in range(rounds):
        for name, grid in GRID.items():
            for v in grid:
                trial = {**best, name: v}
                if not bf16_launch_bound(trial):
                    continue
                loss = _loss(scored(cases, trial))
                if loss < best_loss - 1e-9:
                    best, best_loss = trial, loss
            if log:
                log(f"  {name} -> {best[name]:g} (loss {best_loss:.3f})")
    return best


def crossval(log=None) -> tuple[dict[int, float], dict[int, float], dict[str, list[int]]]:
    """(in-sample errors, held-out errors, row ids by source): each source's rows scored with
    the parameters fitted on every other source's rows (warm-started at the committed fit)."""
    cases = moe_cases()
    start = committed()
    inside = scored(cases, start)
    by_source: dict[str, list[int]] = defaultdict(list)
    for c in cases:
        if c.row_id in inside:
            by_source[c.source].append(c.row_id)
    held: dict[int, float] = {}
    for source, ids in sorted(by_source.items()):
        train = [c for c in cases if c.row_id not in set(ids)]
        values = fit(train, start, rounds=1)
        held.update(scored([c for c in cases if c.row_id in set(ids)], values))
        if log:
            log(f"held out {source}: {values}")
    return inside, held, dict(by_source)


def main() -> int:
    if "--crossval" in sys.argv[1:]:
        inside, held, by_source = crossval(log=lambda m: print(m, file=sys.stderr))
        print(f"{'source (held out)':<48} {'runs':>4}  {'in-sample':>15}  {'LOSO':>15}")
        for source, ids in sorted(by_source.items(), key=lambda kv: -len(kv[1])):
            (m, p), (lm, lp) = summary([inside[i] for i in ids]), summary([held[i] for i in ids])
            print(f"{source[:48]:<48} {len(ids):>4}  {m:>6.1%} / {p:>6.1%}  {lm:>6.1%} / {lp:>6.1%}")
        ids = list(held)
        (m, p), (lm, lp) = summary([inside[i] for i in ids]), summary([held[i] for i in ids])
        head = f"\nMoE GPU runs ({len(ids)}): in-sample {m:.1%} / {p:.1%}"
        print(f"{head}, leave-one-source-out {lm:.1%} / {lp:.1%}")
        return 0
    values = fit(moe_cases(), committed(), log=print)
    print(f"fitted: {values}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
