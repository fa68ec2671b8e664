"""Prices per GPU-hour (``data/prices.yaml``) and checkpoint storage tiers (``data/storage.yaml``)
for capacity planning. Every figure carries its source in the data file; this module converts
units (GB/s -> bytes/s) and builds typed records."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

__all__ = [
    "Price",
    "StorageTier",
    "price_of",
    "price_keys",
    "storage_tier",
    "storage_tier_names",
    "custom_storage",
    "host_link_bytes_per_s",
]

GB_BYTES = 1e9


@dataclass(frozen=True, slots=True)
class Price:
    """USD per GPU-hour of one accelerator, with its range and source."""

    usd_per_gpu_hour: float
    low: float
    high: float
    kind: str
    source: str


@dataclass(frozen=True, slots=True)
class StorageTier:
    """Aggregate checkpoint write / read bandwidth (bytes/s) for ``gpus`` GPUs; ``per_gpu``: it
    scales with the cluster's GPU count."""

    name: str
    write_bytes_per_s: float
    read_bytes_per_s: float
    gpus: int
    per_gpu: bool
    source: str

    def for_gpus(self, gpus: int) -> tuple[float, float]:
        """(write, read) aggregate bytes/s for a cluster of ``gpus`` GPUs."""
        if not self.per_gpu:
            return self.write_bytes_per_s, self.read_bytes_per_s
        scale = gpus / self.gpus
        return self.write_bytes_per_s * scale, self.read_bytes_per_s * scale


@cache
def _load(name: str) -> dict[str, Any]:
    text = resources.files("paraplan.hardware").joinpath("data", name).read_text()
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    return data


def price_keys() -> list[str]:
    """Accelerators with a price in data/prices.yaml."""
    return sorted(_load("prices.yaml")["accelerators"])


def price_of(accelerator_key: str) -> Price | None:
    """The catalog price of ``accelerator_key`` (None when data/prices.yaml has none)."""
    raw = _load("prices.yaml")["accelerators"].get(accelerator_key)
    if raw is None:
        return None
    return Price(
        float(raw["usd_per_gpu_hour"]), float(raw["low"]), float(raw["high"]), raw["kind"], raw["source"]
    )


def storage_tier_names() -> list[str]:
    return sorted(_load("storage.yaml")["tiers"])


def storage_tier(name: str | None = None) -> StorageTier:
    """A named tier of data/storage.yaml (None: its default); ValueError naming the known ones."""
    data = _load("storage.yaml")
    key = name or data["default"]
    if key not in data["tiers"]:
        raise ValueError(
            f"cluster.storage={key!r} is not a storage tier; choose one of "
            + ", ".join(storage_tier_names())
            + " or give {write_GBps, read_GBps}"
        )
    raw = data["tiers"][key]
    return StorageTier(
        key,
        float(raw["write_GBps"]) * GB_BYTES,
        float(raw["read_GBps"]) * GB_BYTES,
        int(raw["gpus"]),
        bool(raw["per_gpu"]),
        raw["source"],
    )


def custom_storage(write_gbps: float, read_gbps: float) -> StorageTier:
    """A fixed aggregate tier given in GB/s by the scenario (cluster.storage)."""
    return StorageTier("custom", write_gbps * GB_BYTES, read_gbps * GB_BYTES, 1, False, "scenario")


def host_link_bytes_per_s(accelerator_key: str) -> float:
    """Device-to-host bytes/s one GPU copies an asynchronous checkpoint over; ValueError if
    data/storage.yaml has no figure for it."""
    links = _load("storage.yaml")["host_link_GBps"]
    if accelerator_key not in links:
        raise ValueError(
            f"no device-to-host link figure for {accelerator_key!r} in hardware/data/storage.yaml; "
            "give reliability.checkpoint_stall_s"
        )
    return float(links[accelerator_key]) * GB_BYTES
