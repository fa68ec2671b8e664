"""Microbenchmark records (``paraplan profile``) to efficiency parameters, per device.

Compute records fit the cost model's kernel form (cost/compute.py), t = flops / (peak * eff) +
overhead, by least squares of t on flops over the shapes of one kind and precision:

    t_i = a * flops_i + b   ->   eff = 1 / (a * peak),  overhead = max(b, 0)

with peak the catalog's dense peak of the record's accelerator (BF16 peak for attention);
``kernel_overhead_us`` is the BF16 GEMMs' intercept. Attention records take the cost model's
attention form, t = flops / (peak * attention * chunk(L)) + overhead with chunk(L) =
``paraplan.cost.compute.attention_chunk_factor`` of the record's key length L (``seq_len``): the
fit is on flops / chunk(L), so ``attention`` is the long-sequence rate the cost model scales down.
HBM efficiency is the best copy rate, max_i(bytes_i / t_i) / catalog HBM bandwidth (bytes = read +
write). Collectives are summarised
per operation and group size as t = alpha + bytes / bandwidth (``microbenchmarks.collectives``:
measured, not applied; the cluster's link tiers stay the catalog's, since one machine's groups
do not say which tier a plan's groups span).

Kernel microbenchmarks run alone, so their efficiencies are upper bounds of what a training step
reaches (the catalog's in-step GEMM efficiencies are below the MAMF of hardware.json); when a
generation also has measured steps, the step fit's parameters are the profile's and these are
kept beside them under ``microbenchmarks``. Records with no catalog accelerator (a CPU) become a
smoke-test entry keyed by the device name: raw rates only, never applied.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from paraplan.calibration.records import MicroRecord
from paraplan.cost.compute import attention_chunk_factor
from paraplan.errors import ConfigError
from paraplan.hardware import accelerator
from paraplan.hardware.calibration import PLAUSIBLE_RANGE, AcceleratorCalibration
from paraplan.hardware.efficiency import PARAMETER_NAMES

__all__ = ["fit_microbenchmarks", "line_fit"]

S_US = 1e6


def line_fit(x: Sequence[float], t: Sequence[float]) -> tuple[float, float]:
    """Least-squares (slope, intercept) of t = slope * x + intercept; through the origin when
    the intercept comes out negative or there is one point."""
    xs, ts = np.asarray(x, dtype=float), np.asarray(t, dtype=float)
    if len(xs) >= 2 and np.ptp(xs) > 0:
        slope, intercept = np.polyfit(xs, ts, 1)
        if slope > 0 and intercept >= 0:
            return float(slope), float(intercept)
    return float(np.dot(xs, ts) / np.dot(xs, xs)), 0.0


def _key(rec: MicroRecord) -> str:
    acc = rec.data.get("accelerator")
    if acc and not rec.data.get("smoke_test"):
        return str(acc)
    return re.sub(r"[^a-z0-9]+", "-", rec.device.lower()).strip("-") or "device"


def _work(rec: MicroRecord) -> float:
    """FLOPs of a compute record as the cost model charges them: a GEMM's flops; an attention
    kernel's flops / attention_chunk_factor(seq_len) (module docstring)."""
    if rec.kind == "attention" and rec.data.get("seq_len"):
        return float(rec.data["flops"]) / attention_chunk_factor(float(rec.data["seq_len"]))
    return float(rec.data["flops"])


def _rates(records: Sequence[MicroRecord]) -> dict[str, Any]:
    """Achieved rates: per kind/precision the fitted flops/s (1/a) and overhead, best copy
    bandwidth, collectives' alpha and bandwidth."""
    out: dict[str, Any] = {}
    compute: dict[str, list[MicroRecord]] = defaultdict(list)
    for r in records:
        if r.kind in ("gemm", "attention"):
            compute[f"{r.kind}_{r.data.get('precision', 'bf16')}"].append(r)
    for name, rs in sorted(compute.items()):
        slope, intercept = line_fit([_work(r) for r in rs], [r.data["time_s"] for r in rs])
        out[name] = {"flops_per_s": 1.0 / slope, "overhead_us": intercept * S_US, "num_shapes": len(rs)}
    copies = [r for r in records if r.kind == "hbm_copy"]
    if copies:
        out["hbm_copy_bytes_per_s"] = max(r.data["bytes"] / r.data["time_s"] for r in copies)
    coll: dict[tuple[str, int], list[MicroRecord]] = defaultdict(list)
    for r in records:
        if r.kind == "collective":
            coll[(r.data["op"], int(r.data["group_size"]))].append(r)
    if coll:
        out["collectives"] = {}
        for (op, n), rs in sorted(coll.items()):
            slope, intercept = line_fit([r.data["bytes"] for r in rs], [r.data["time_s"] for r in rs])
            out["collectives"].setdefault(op, {})[n] = {
                "alpha_us": intercept * S_US,
                "bytes_per_s": 1.0 / slope,
            }
    return out


def _clip(name: str, value: float) -> float:
    lo, hi = PLAUSIBLE_RANGE[name]
    return round(min(max(value, lo), hi), 4)


def _parameters(key: str, rates: Mapping[str, Any]) -> dict[str, float]:
    """Efficiency parameters of catalog accelerator ``key`` from its measured rates."""
    try:
        acc = accelerator(key)
    except ValueError as e:
        raise ConfigError(f"microbenchmark records: accelerator: {e}") from None
    out: dict[str, float] = {}
    for prec in ("bf16", "fp8"):
        gemm = rates.get(f"gemm_{prec}")
        if gemm and prec in acc.peak_flops_per_s:
            out[f"gemm_{prec}"] = _clip(f"gemm_{prec}", gemm["flops_per_s"] / acc.peak_for(prec))
    if "gemm_bf16" in rates:
        out["kernel_overhead_us"] = _clip("kernel_overhead_us", rates["gemm_bf16"]["overhead_us"])
    if "attention_bf16" in rates:
        out["attention"] = _clip("attention", rates["attention_bf16"]["flops_per_s"] / acc.peak_for("bf16"))
    if "hbm_copy_bytes_per_s" in rates:
        out["hbm"] = _clip("hbm", rates["hbm_copy_bytes_per_s"] / acc.hbm_bytes_per_s)
    return out


def _plain(value: Any) -> Any:
    """Rates as plain YAML-friendly floats (4 significant digits)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, float):
        return float(f"{value:.4g}")
    return value


def fit_microbenchmarks(records: Sequence[MicroRecord]) -> dict[str, AcceleratorCalibration]:
    """One profile entry per device of ``records`` (module docstring)."""
    groups: dict[str, list[MicroRecord]] = defaultdict(list)
    for r in records:
        groups[_key(r)].append(r)
    out = {}
    for key, rs in sorted(groups.items()):
        smoke = any(r.data.get("smoke_test") for r in rs) or not rs[0].data.get("accelerator")
        rates = _rates(rs)
        params = {} if smoke else _parameters(key, rates)
        out[key] = AcceleratorCalibration(
            key=key,
            parameters=params,
            is_smoke_test=smoke,
            not_determined=tuple(n for n in PARAMETER_NAMES if n not in params),
            microbenchmarks={"device": rs[0].device, "num_records": len(rs), **_plain(rates)},
        )
    return out
