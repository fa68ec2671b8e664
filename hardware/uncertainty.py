"""The cost model's step-time uncertainty per accelerator generation (``data/uncertainty.yaml``).

The data file holds, per generation, the 10th and 90th percentiles of measured / predicted step
time over the published runs of the calibration set (written by ``python -m
benchmarks.uncertainty``); generations with too few runs carry the percentiles of all runs
pooled, marked ``source: pooled``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

__all__ = ["StepTimeBand", "step_time_band", "MemoryBand", "memory_band", "default_memory_headroom"]


@dataclass(frozen=True, slots=True, kw_only=True)
class StepTimeBand:
    """Ratios measured / predicted at the 10th and 90th percentile, and where they come from."""

    p10_ratio: float
    p90_ratio: float
    source: str

    def contains(self, predicted_s: float, other_s: float) -> bool:
        """``other_s`` lies within the band around ``predicted_s`` (p10 * T <= other <= p90 * T)."""
        return self.p10_ratio * predicted_s <= other_s <= self.p90_ratio * predicted_s


@cache
def _raw() -> dict[str, Any]:
    text = resources.files("paraplan.hardware").joinpath("data/uncertainty.yaml").read_text()
    return yaml.safe_load(text)


def _describe(generation: str, entry: dict[str, Any], raw: dict[str, Any]) -> str:
    own = entry["rows"]
    if entry["source"] == "generation":
        where = f"{own} published {generation} runs"
    else:
        where = (
            f"all {raw['pooled']['rows']} published runs pooled ({own} {generation} runs, "
            f"fewer than {raw['min_rows']})"
        )
    return f"p10-p90 of measured/predicted step time over {where}, in-sample, {raw['date']}"


def step_time_band(generations: Sequence[str], moe: bool = False) -> StepTimeBand:
    """The band of a cluster whose devices belong to ``generations`` (several on mixed-GPU
    clusters: the widest of them). An unknown generation takes the pooled band. A
    mixture-of-experts model takes the band of every published MoE run (``moe``), when the data
    file has one."""
    raw = _raw()
    if moe and "moe" in raw:
        m = raw["moe"]
        where = f"p10-p90 of measured/predicted step time over {m['rows']} published mixture-of-experts runs"
        return StepTimeBand(
            p10_ratio=float(m["p10"]), p90_ratio=float(m["p90"]), source=f"{where}, in-sample, {raw['date']}"
        )
    entries = []
    for gen in dict.fromkeys(generations):
        entry = raw["generations"].get(gen)
        if entry is None:
            entry = {**raw["pooled"], "rows": 0, "source": "pooled"}
        entries.append((gen, entry))
    return StepTimeBand(
        p10_ratio=min(float(e["p10"]) for _, e in entries),
        p90_ratio=max(float(e["p90"]) for _, e in entries),
        source="; ".join(_describe(g, e, raw) for g, e in entries),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryBand:
    """Ratios measured / predicted peak memory at the 50th and 90th percentile, and their source."""

    p50_ratio: float
    p90_ratio: float
    rows: int
    source: str


def memory_band() -> MemoryBand:
    """The peak-memory band of ``data/uncertainty.yaml`` (``memory:``, written by ``python -m
    benchmarks.uncertainty`` over the readings benchmarks/memory_fidelity.py scores)."""
    raw = _raw()
    m = raw["memory"]
    source = (
        f"p90 of measured/predicted peak memory over {m['rows']} readings of measured runs "
        f"(allocated and reserved), in-sample, {raw['date']}"
    )
    return MemoryBand(
        p50_ratio=float(m["p50"]), p90_ratio=float(m["p90"]), rows=int(m["rows"]), source=source
    )


def default_memory_headroom() -> float:
    """``solver.memory_headroom`` when the scenario leaves it unset: the share of device memory
    that keeps a plan whose need is the band's p90 times the prediction inside the device,
    1 - 1 / p90 (a plan fits HBM x (1 - headroom), so prediction x p90 <= HBM). Rounded to 0.1%."""
    return round(1.0 - 1.0 / memory_band().p90_ratio, 3)
