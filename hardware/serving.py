"""Serving constants: each engine's KV-memory rule and the fitted step-time parameters
(``data/serving.yaml``; sources and fits in its comments). Units are converted here (GiB -> bytes,
ms/us -> s); the formulas that use them are cost/serving*.py's."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

__all__ = ["EngineMemory", "ServingFit", "engine_memory", "serving_fit", "engine_names", "FIT_NAMES"]

GIB_BYTES = 2**30
FIT_NAMES = ("step_overhead_ms", "per_sequence_us", "graph_kernel_overhead_us", "moe_decode_imbalance")
"""The fitted parameters of ``data/serving.yaml`` (file units)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineMemory:
    """How an engine sizes its KV cache. ``kv_fraction_of``: ``total`` (vLLM: the fraction of
    device memory holds weights, activations and KV), ``static`` (SGLang: weights and KV),
    ``free`` (TensorRT-LLM: the fraction of what weights and activations leave free)."""

    name: str
    kv_fraction: float
    kv_fraction_of: str
    kv_reserved_output: float  # share of the output tokens a running sequence holds
    buffer_bytes: float  # CUDA graphs, NCCL and context outside the fraction


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingFit:
    """The fitted step-time parameters, in seconds (and a dimensionless imbalance)."""

    step_overhead_s: float
    per_sequence_s: float
    graph_kernel_overhead_s: float
    moe_decode_imbalance: float

    @classmethod
    def from_values(cls, values: dict[str, float]) -> ServingFit:
        """From parameters named as in the data file (FIT_NAMES, file units)."""
        return cls(
            step_overhead_s=float(values["step_overhead_ms"]) * 1e-3,
            per_sequence_s=float(values["per_sequence_us"]) * 1e-6,
            graph_kernel_overhead_s=float(values["graph_kernel_overhead_us"]) * 1e-6,
            moe_decode_imbalance=float(values["moe_decode_imbalance"]),
        )

    def values(self) -> dict[str, float]:
        """The parameters in file units (inverse of from_values)."""
        return {
            "step_overhead_ms": self.step_overhead_s * 1e3,
            "per_sequence_us": self.per_sequence_s * 1e6,
            "graph_kernel_overhead_us": self.graph_kernel_overhead_s * 1e6,
            "moe_decode_imbalance": self.moe_decode_imbalance,
        }


@cache
def _raw() -> dict[str, Any]:
    text = resources.files("paraplan.hardware").joinpath("data/serving.yaml").read_text()
    return yaml.safe_load(text)


def engine_names() -> list[str]:
    return sorted(_raw()["engines"])


def engine_memory(name: str) -> EngineMemory:
    """The KV-memory rule of engine ``name``; ValueError naming engine.name if unknown."""
    raw = _raw()["engines"]
    if name not in raw:
        raise ValueError(
            f"engine.name={name!r} is not a known engine; choose one of {', '.join(sorted(raw))}"
        )
    e = raw[name]
    return EngineMemory(
        name=name,
        kv_fraction=float(e["kv_fraction"]),
        kv_fraction_of=str(e["kv_fraction_of"]),
        kv_reserved_output=float(e["kv_reserved_output"]),
        buffer_bytes=float(e["buffer_GiB"]) * GIB_BYTES,
    )


def serving_fit() -> ServingFit:
    """The fitted step-time parameters of the data file."""
    return ServingFit.from_values({k: float(v) for k, v in _raw()["fitted"].items() if k in FIT_NAMES})
