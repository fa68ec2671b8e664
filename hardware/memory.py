"""The caching allocator's overhead per allocator mode (``data/memory.yaml``; sources and the fit
in its comments): reserved beyond allocated, a share of the allocated bytes."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

import yaml

__all__ = ["allocator_overhead_fit", "allocator_overhead_bounds"]


@cache
def _raw() -> dict[str, Any]:
    text = resources.files("paraplan.hardware").joinpath("data/memory.yaml").read_text()
    data: dict[str, Any] = yaml.safe_load(text)
    return data


def allocator_overhead_fit(allocator: str) -> float:
    """The overhead of ``allocator`` (default | expandable_segments), a fraction of allocated."""
    return float(_raw()["allocator_overhead"][allocator]["value"])


def allocator_overhead_bounds(allocator: str = "default") -> tuple[float, float, float]:
    """(lower bound, prior, upper bound) of the fitted overhead of ``allocator``."""
    entry = _raw()["allocator_overhead"][allocator]
    low, high = entry["bounds"]
    return float(low), float(entry["prior"]), float(high)
