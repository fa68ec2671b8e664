"""Fit microbenchmark records (``paraplan profile``) to efficiency parameters."""

from __future__ import annotations

from collections.abc import Sequence

from paraplan.hardware.calibration import AcceleratorCalibration
from paraplan.records import MicroRecord

__all__ = ["fit_microbenchmarks"]


def fit_microbenchmarks(records: Sequence[MicroRecord]) -> dict[str, AcceleratorCalibration]:
    return {}
