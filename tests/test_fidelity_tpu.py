"""Fidelity on the TPU rows of the calibration set (MaxText's Dec-2023 tables on v4, v5e, v5p).

The bar (issue 14): every TPU row scored, median |error| <= 10% with the committed TPU
efficiencies (hardware/data/efficiency_tpu.yaml), and leaving one chip family out of the fit
(benchmarks/calibrate_tpu.py) still <= 10%. Memory is not yet at the bar: paraplan's activation
memory is Megatron's accounting (Korthikanti et al. 2022) with a CUDA/NCCL runtime reserve, and
MaxText under XLA keeps less (its "minimal" remat policy saves only matmul outputs, not
Megatron's selective set); KNOWN_OOM_ROWS lists the TPU rows predicted out of memory today.
"""

from __future__ import annotations

import statistics

import pytest

from benchmarks.calibrate import _generation
from benchmarks.fidelity import scored_rows

TPU_ROWS = 19  # v4 6, v5e 8, v5p 5
KNOWN_OOM_ROWS = {665, 666, 667, 668, 669, 670, 625, 626, 628, 642, 643}


@pytest.fixture(scope="module")
def tpu_rows():
    rows, skipped = scored_rows()
    assert not [s for s in skipped if "TPU" in s.reason or s.label.startswith("maxtext_tpu")]
    return [r for r in rows if _generation(r.case).startswith("tpu_")]


def test_every_tpu_row_is_scored(tpu_rows) -> None:
    assert len(tpu_rows) == TPU_ROWS
    families = {_generation(r.case) for r in tpu_rows}
    assert families == {"tpu_v4", "tpu_v5e", "tpu_v5p"}


def test_tpu_median_error_within_ten_percent(tpu_rows) -> None:
    median = statistics.median(abs(r.error) for r in tpu_rows)
    assert median <= 0.10, f"median |error| {median:.1%}"  # 6.5% (2026-12-01)


def test_tpu_out_of_memory_predictions_do_not_grow(tpu_rows) -> None:
    oom = {r.case.row_id for r in tpu_rows if not r.fits}
    assert oom <= KNOWN_OOM_ROWS, sorted(oom - KNOWN_OOM_ROWS)


def test_leave_one_chip_out_within_ten_percent() -> None:
    from benchmarks.calibrate_tpu import leave_one_chip_out, tpu_cases

    loco = leave_one_chip_out(tpu_cases())
    assert len(loco) == TPU_ROWS
    assert statistics.median(abs(e) for e in loco.values()) <= 0.10  # 5.1% (2026-12-01)
