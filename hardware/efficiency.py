"""Fitted efficiency parameters per accelerator generation (``data/efficiency.yaml``)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources

import yaml

__all__ = ["Efficiency", "efficiency"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Efficiency:
    gemm_bf16: float
    gemm_fp8: float
    attention: float
    hbm: float
    kernel_overhead_s: float
    moe_layer_overhead_s: float = 0.0  # host-side time per MoE layer per pass (see the data file)

    def gemm(self, precision: str) -> float:
        return self.gemm_fp8 if precision == "fp8" else self.gemm_bf16


@cache
def _raw() -> dict:
    text = resources.files("paraplan.hardware").joinpath("data/efficiency.yaml").read_text()
    return yaml.safe_load(text)["generations"]


def efficiency(generation: str) -> Efficiency:
    raw = _raw()
    if generation not in raw:
        raise ValueError(f"no efficiency calibration for accelerator generation {generation!r}")
    e = raw[generation]
    return Efficiency(
        gemm_bf16=float(e["gemm_bf16"]),
        gemm_fp8=float(e["gemm_fp8"]),
        attention=float(e["attention"]),
        hbm=float(e["hbm"]),
        kernel_overhead_s=float(e["kernel_overhead_us"]) * 1e-6,
        moe_layer_overhead_s=float(e.get("moe_layer_overhead_us", 0.0)) * 1e-6,
    )
