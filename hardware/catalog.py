"""The hardware catalog: accelerators, node types and fabrics, loaded from ``data/catalog.yaml``.

Every figure in the data file carries the source ids of ``docs/data/hardware.json``; this module
only converts units (GB -> bytes, TFLOP/s -> FLOP/s, us -> s) and builds typed records.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

__all__ = [
    "Accelerator",
    "LinkSpec",
    "NodeType",
    "Fabric",
    "accelerator",
    "node_type",
    "fabric",
    "node_type_names",
    "fabric_names",
]

GB_BYTES = 1e9
GIB_BYTES = 2**30
TFLOPS = 1e12
US_S = 1e-6


@dataclass(frozen=True, slots=True, kw_only=True)
class Accelerator:
    key: str
    name: str
    generation: str
    peak_flops_per_s: dict[str, float]
    hbm_bytes: float
    hbm_bytes_per_s: float
    is_tpu: bool = False
    """A TPU chip run by XLA: buffers are assigned at compile time and collectives are compiled
    into the program (no CUDA context, NCCL communicators or caching allocator; cost/memory.py)."""

    def peak_for(self, precision: str) -> float:
        """Dense peak FLOP/s for ``precision``; ValueError if the part has no such tensor mode."""
        if precision not in self.peak_flops_per_s:
            modes = ", ".join(sorted(self.peak_flops_per_s))
            raise ValueError(
                f"job.precision={precision!r} is not supported by {self.name} "
                f"(its tensor cores run {modes}); choose one of those"
            )
        return self.peak_flops_per_s[precision]


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkSpec:
    """One link tier as the catalog describes it; ``domain_gpus`` None means the whole cluster."""

    name: str
    per_gpu_bytes_per_s: float
    alpha_s: float
    efficiency: float
    domain_gpus: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeType:
    key: str
    name: str
    accelerator: Accelerator
    devices_per_node: int
    scale_up: LinkSpec
    scale_out: LinkSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class Fabric:
    key: str
    name: str
    node: str
    tiers: tuple[LinkSpec, ...]


def _link(raw: dict[str, Any]) -> LinkSpec:
    return LinkSpec(
        name=raw["name"],
        per_gpu_bytes_per_s=float(raw["per_gpu_GBps"]) * GB_BYTES,
        alpha_s=float(raw["alpha_us"]) * US_S,
        efficiency=float(raw["efficiency"]),
        domain_gpus=raw.get("domain_gpus"),
    )


@cache
def _raw() -> dict[str, Any]:
    text = resources.files("paraplan.hardware").joinpath("data/catalog.yaml").read_text()
    return yaml.safe_load(text)


def _did_you_mean(field: str, value: str, known: list[str]) -> ValueError:
    return ValueError(f"{field}={value!r} is not a known preset; choose one of {', '.join(known)}")


def accelerator(key: str) -> Accelerator:
    raw = _raw()["accelerators"]
    if key not in raw:
        from paraplan.hardware.tpu import tpu_chip, tpu_chip_names  # data/tpu.yaml

        if key in tpu_chip_names():
            return tpu_chip(key)
        raise _did_you_mean("accelerator", key, sorted(raw) + tpu_chip_names())
    a = raw[key]
    return Accelerator(
        key=key,
        name=a["name"],
        generation=a["generation"],
        peak_flops_per_s={k: float(v) * TFLOPS for k, v in a["peak_tflops"].items()},
        hbm_bytes=(float(a["hbm_GiB"]) * GIB_BYTES if "hbm_GiB" in a else float(a["hbm_GB"]) * GB_BYTES),
        hbm_bytes_per_s=float(a["hbm_TBps"]) * 1e12,
    )


def node_type_names() -> list[str]:
    return sorted(_raw()["nodes"])


def fabric_names() -> list[str]:
    return sorted(_raw().get("fabrics", {}))


def node_type(key: str) -> NodeType:
    raw = _raw()["nodes"]
    if key not in raw:
        raise _did_you_mean(
            "cluster.preset",
            key,
            sorted(raw) + fabric_names() + ["a TPU slice <family>-<N> (v4-128, v5p-1024, v5e-256, v6e-256)"],
        )
    n = raw[key]
    return NodeType(
        key=key,
        name=n["name"],
        accelerator=accelerator(n["accelerator"]),
        devices_per_node=int(n["devices_per_node"]),
        scale_up=_link(n["scale_up"]),
        scale_out=_link(n["scale_out"]),
    )


def fabric(key: str) -> Fabric:
    raw = _raw().get("fabrics", {})
    if key not in raw:
        raise _did_you_mean("cluster.fabric", key, sorted(raw))
    f = raw[key]
    return Fabric(key=key, name=f["name"], node=f["node"], tiers=tuple(_link(t) for t in f["tiers"]))
