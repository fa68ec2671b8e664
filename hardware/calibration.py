"""Calibration profiles: per-accelerator efficiency parameters fitted to a user's own measurements.

A profile is data (docs/DESIGN.md §7): ``paraplan calibrate`` writes it, this module reads
and validates it and turns it into ``Efficiency`` overrides on a ``Cluster``
(``Cluster.efficiency_override``); the cost model only ever reads ``cluster.efficiency``.

File format (YAML; every parameter name and unit as in ``data/efficiency.yaml``)::

    format: paraplan-calibration/1
    paraplan_version: 0.1.0
    created: 2026-11-30
    source: examples/calibration/a100-megatron-records.yaml
    accelerators:
      ampere:                      # an efficiency generation, or an accelerator key (a100-80gb)
        parameters: {gemm_bf16: 0.70, kernel_overhead_us: 3.1}   # only what the data determined
        not_determined: [gemm_fp8, attention, hbm, moe_layer_overhead_us]   # catalog values kept
        catalog: {gemm_bf16: 0.66, ...}                          # the prior the fit started from
        smoke_test: false          # true: fitted on a CPU (paraplan profile); never applied
        fit: {num_records: 5, loss_before: ..., loss_after: ..., median_abs_error_before: ...}
        records:                   # per record: measured and predicted before/after, errors
          - {name: ..., measured_step_time_s: ..., predicted_before_s: ..., error_before: ...}

An entry keyed by an accelerator key (``h100-sxm``) takes precedence over one keyed by its
generation (``hopper``). Parameters not listed keep the catalog's values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from paraplan.hardware.catalog import Accelerator
from paraplan.hardware.efficiency import (
    PARAMETER_NAMES,
    Efficiency,
    catalog_parameters,
    efficiency_from_parameters,
)
from paraplan.hardware.topology import Cluster

__all__ = [
    "AcceleratorCalibration",
    "CalibrationProfile",
    "PLAUSIBLE_RANGE",
    "FORMAT",
    "profile_from_dict",
    "profile_to_dict",
    "load_profile",
    "apply_calibration",
]

FORMAT = "paraplan-calibration/1"

PLAUSIBLE_RANGE: dict[str, tuple[float, float]] = {
    # fractions of the catalog peak a training step reaches (MAMF of large GEMMs is 0.7-0.9 of
    # peak on A100/H100, hardware.json gemm_efficiency; in-step values are lower)
    "gemm_bf16": (0.2, 0.98),
    "gemm_fp8": (0.15, 0.98),
    "gemm_fp8_blockwise": (0.15, 0.98),
    "gemm_mxfp8": (0.15, 0.98),
    "gemm_nvfp4": (0.1, 0.98),
    "attention": (0.1, 0.98),
    # fraction of HBM bandwidth (hbm_stream in hardware.json: 0.8-0.9 for copies)
    "hbm": (0.3, 0.98),
    # fixed time per kernel and per MoE layer pass, microseconds
    "kernel_overhead_us": (0.0, 100.0),
    "moe_layer_overhead_us": (0.0, 20000.0),
}
"""Physically plausible range of each parameter: profiles outside it are rejected and the fit is
bounded to it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AcceleratorCalibration:
    """One profile entry: fitted parameters for an accelerator generation or key."""

    key: str
    parameters: Mapping[str, float]
    not_determined: tuple[str, ...] = ()
    is_smoke_test: bool = False
    catalog: Mapping[str, float] = field(default_factory=dict)
    fit: Mapping[str, Any] = field(default_factory=dict)
    records: tuple[Mapping[str, Any], ...] = ()
    microbenchmarks: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class CalibrationProfile:
    accelerators: Mapping[str, AcceleratorCalibration]
    paraplan_version: str = ""
    created: str = ""
    source: str = ""

    def entry_for(self, accel: Accelerator) -> AcceleratorCalibration | None:
        """The entry for ``accel``: by accelerator key first, then by generation."""
        return self.accelerators.get(accel.key) or self.accelerators.get(accel.generation)

    def efficiency_for(self, accel: Accelerator) -> Efficiency | None:
        """Catalog parameters of ``accel``'s generation with the entry's fitted ones replacing
        them; None when the profile has no (non smoke-test) entry for it."""
        entry = self.entry_for(accel)
        if entry is None or entry.is_smoke_test:
            return None
        return efficiency_from_parameters({**catalog_parameters(accel.generation), **entry.parameters})


def _check_parameters(where: str, raw: Any) -> dict[str, float]:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} must be a mapping of parameter: value")
    out: dict[str, float] = {}
    for name, value in raw.items():
        if name not in PLAUSIBLE_RANGE:
            raise ValueError(f"{where}.{name}: unknown parameter; choose from " + ", ".join(PARAMETER_NAMES))
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{where}.{name}={value!r} must be a number")
        lo, hi = PLAUSIBLE_RANGE[name]
        if not lo <= value <= hi:
            raise ValueError(f"{where}.{name}={value} is outside the plausible range [{lo:g}, {hi:g}]")
        out[name] = float(value)
    return out


def _entry(key: str, raw: Any) -> AcceleratorCalibration:
    where = f"accelerators.{key}"
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} must be a mapping with a parameters key")
    known = {"parameters", "not_determined", "smoke_test", "catalog", "fit", "records", "microbenchmarks"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"{where}.{unknown[0]}: unknown key; allowed: {', '.join(sorted(known))}")
    if "parameters" not in raw:
        raise ValueError(f"{where}.parameters is missing")
    not_determined = raw.get("not_determined") or []
    bad = [n for n in not_determined if n not in PARAMETER_NAMES]
    if bad:
        raise ValueError(f"{where}.not_determined: unknown parameter {bad[0]!r}")
    smoke = raw.get("smoke_test", False)
    if not isinstance(smoke, bool):
        raise ValueError(f"{where}.smoke_test={smoke!r} must be true or false")
    return AcceleratorCalibration(
        key=str(key),
        parameters=_check_parameters(f"{where}.parameters", raw["parameters"]),
        not_determined=tuple(not_determined),
        is_smoke_test=smoke,
        catalog=dict(raw.get("catalog") or {}),
        fit=dict(raw.get("fit") or {}),
        records=tuple(raw.get("records") or ()),
        microbenchmarks=dict(raw.get("microbenchmarks") or {}),
    )


def profile_from_dict(data: Any) -> CalibrationProfile:
    """Validated profile from its YAML mapping; ValueError names the bad field."""
    if not isinstance(data, Mapping):
        raise ValueError("a calibration profile must be a mapping with an accelerators key")
    if data.get("format", FORMAT) != FORMAT:
        raise ValueError(f"format={data.get('format')!r}: this paraplan reads {FORMAT!r}")
    known = {"format", "paraplan_version", "created", "source", "accelerators"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{unknown[0]}: unknown key; allowed: {', '.join(sorted(known))}")
    accels = data.get("accelerators")
    if not isinstance(accels, Mapping) or not accels:
        raise ValueError(
            "accelerators must map at least one accelerator generation or key to its fitted parameters"
        )
    return CalibrationProfile(
        accelerators={str(k): _entry(str(k), v) for k, v in accels.items()},
        paraplan_version=str(data.get("paraplan_version", "")),
        created=str(data.get("created", "")),
        source=str(data.get("source", "")),
    )


def profile_to_dict(profile: CalibrationProfile) -> dict[str, Any]:
    """The YAML mapping of ``profile`` (what ``profile_from_dict`` reads back)."""

    def entry(e: AcceleratorCalibration) -> dict[str, Any]:
        out: dict[str, Any] = {
            "parameters": dict(e.parameters),
            "not_determined": list(e.not_determined),
            "smoke_test": e.is_smoke_test,
        }
        if e.catalog:
            out["catalog"] = dict(e.catalog)
        if e.fit:
            out["fit"] = dict(e.fit)
        if e.microbenchmarks:
            out["microbenchmarks"] = dict(e.microbenchmarks)
        if e.records:
            out["records"] = [dict(r) for r in e.records]
        return out

    return {
        "format": FORMAT,
        "paraplan_version": profile.paraplan_version,
        "created": profile.created,
        "source": profile.source,
        "accelerators": {k: entry(e) for k, e in profile.accelerators.items()},
    }


def load_profile(path: str | Path) -> CalibrationProfile:
    """Profile from a YAML file; ValueError (naming the file and field) when unreadable or bad."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text())
    except OSError as e:
        raise ValueError(f"cannot read calibration profile {str(p)!r}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ValueError(f"{p}: not valid YAML: {e}") from None
    try:
        return profile_from_dict(data)
    except ValueError as e:
        raise ValueError(f"calibration profile {p}: {e}") from None


def apply_calibration(cluster: Cluster, profile: CalibrationProfile) -> Cluster:
    """``cluster`` (and each pool) with the profile's Efficiency for its accelerator.

    ValueError when the profile covers none of the cluster's accelerators, or only as a CPU smoke
    test (a CPU's rates say nothing about a GPU).
    """
    pools = cluster.pools or (cluster,)
    effs = [profile.efficiency_for(p.accelerator) for p in pools]
    if all(e is None for e in effs):
        names = ", ".join(sorted({f"{p.accelerator.key} ({p.accelerator.generation})" for p in pools}))
        smoke = [k for k, e in profile.accelerators.items() if e.is_smoke_test]
        covered = ", ".join(sorted(profile.accelerators))
        hint = f"; {', '.join(smoke)} is a CPU smoke-test entry and is never applied" if smoke else ""
        raise ValueError(
            f"calibration: the profile covers {covered}, not this cluster's "
            f"{names}{hint}; fit a profile on this hardware or drop calibration"
        )
    if not cluster.pools:
        return replace(cluster, efficiency_override=effs[0])
    new_pools = tuple(
        replace(p, efficiency_override=e) if e is not None else p for p, e in zip(pools, effs, strict=True)
    )
    return replace(cluster, pools=new_pools, efficiency_override=profile.efficiency_for(cluster.accelerator))
