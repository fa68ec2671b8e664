"""Fitted efficiency parameters per accelerator generation (``data/efficiency.yaml``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources
from typing import Any

import yaml

__all__ = ["Efficiency", "efficiency", "catalog_parameters", "efficiency_from_parameters", "PARAMETER_NAMES"]

US_S = 1e-6
PARAMETER_NAMES = (
    "gemm_bf16",
    "gemm_fp8",
    "attention",
    "hbm",
    "kernel_overhead_us",
    "moe_layer_overhead_us",
    "gemm_fp8_blockwise",
    "gemm_mxfp8",
    "gemm_nvfp4",
)
"""The parameters of ``data/efficiency.yaml`` (and of calibration profiles), in its units."""
_OPTIONAL_GEMM = ("gemm_fp8_blockwise", "gemm_mxfp8", "gemm_nvfp4")  # default: gemm_fp8


@dataclass(frozen=True, slots=True, kw_only=True)
class Efficiency:
    gemm_bf16: float
    gemm_fp8: float
    attention: float
    hbm: float
    kernel_overhead_s: float
    moe_layer_overhead_s: float = 0.0  # host-side time per MoE layer per pass (see the data file)
    gemm_fp8_blockwise: float | None = None  # None: as gemm_fp8
    gemm_mxfp8: float | None = None  # None: as gemm_fp8
    gemm_nvfp4: float | None = None  # None: as gemm_fp8

    def gemm(self, precision: str) -> float:
        """Large-GEMM efficiency of ``precision`` (bf16/fp16 share gemm_bf16; the block-scaled
        formats fall back to gemm_fp8 where the data file gives none)."""
        if precision in ("bf16", "fp16"):
            return self.gemm_bf16
        own = getattr(self, f"gemm_{precision}", None)
        return self.gemm_fp8 if own is None else own


@cache
def _raw() -> dict[str, Any]:
    data = resources.files("paraplan.hardware").joinpath("data")
    gpus = yaml.safe_load(data.joinpath("efficiency.yaml").read_text())["generations"]
    tpus = yaml.safe_load(data.joinpath("efficiency_tpu.yaml").read_text())["generations"]
    return gpus | tpus  # TPU chip families: data/efficiency_tpu.yaml


def catalog_parameters(generation: str) -> dict[str, float]:
    """The data file's parameters of ``generation`` by name (``PARAMETER_NAMES``, file units)."""
    raw = _raw()
    if generation not in raw:
        raise ValueError(f"no efficiency calibration for accelerator generation {generation!r}")
    e = raw[generation]
    out = {name: float(e.get(name, 0.0)) for name in PARAMETER_NAMES if name not in _OPTIONAL_GEMM}
    return out | {name: float(e.get(name, e["gemm_fp8"])) for name in _OPTIONAL_GEMM}  # fallback


def efficiency_from_parameters(params: Mapping[str, float]) -> Efficiency:
    """Efficiency from parameters named as in the data file (``*_us`` converted to seconds)."""
    return Efficiency(
        gemm_bf16=float(params["gemm_bf16"]),
        gemm_fp8=float(params["gemm_fp8"]),
        attention=float(params["attention"]),
        hbm=float(params["hbm"]),
        kernel_overhead_s=float(params["kernel_overhead_us"]) * US_S,
        moe_layer_overhead_s=float(params.get("moe_layer_overhead_us", 0.0)) * US_S,
        **{name: float(params[name]) for name in _OPTIONAL_GEMM if params.get(name) is not None},
    )


def efficiency(generation: str) -> Efficiency:
    """``efficiency_from_parameters(catalog_parameters(generation))``, built once per distinct
    set of the generation's values in the data file (the cost model asks on every stage term;
    a fit that swaps or edits the table, benchmarks/calibrate.py, gives other values, so a
    table of its own)."""
    raw = _raw()
    if generation not in raw:
        return efficiency_from_parameters(catalog_parameters(generation))  # its ValueError
    entry = raw[generation]
    return _efficiency_of(generation, tuple(entry.get(name) for name in PARAMETER_NAMES))


@lru_cache(maxsize=256)
def _efficiency_of(generation: str, values: tuple[object, ...]) -> Efficiency:
    """``efficiency(generation)`` while the data file's entry holds ``values`` (by
    PARAMETER_NAMES: every value ``catalog_parameters`` reads), the key of the memo."""
    return efficiency_from_parameters(catalog_parameters(generation))
