"""Fidelity on the calibration set: predicted vs published step time of every supported run.

The bar: the best single constant MFU reaches only ~15% median / ~40-50% p90 absolute error on
these runs; paraplan must reach <= 10% median and <= 25% p90, and predict none of the published
(real, running) configurations out of memory.
"""

from __future__ import annotations

import pytest

from benchmarks.calibration_set import load_cases
from benchmarks.fidelity import constant_mfu_errors, fidelity_rows, summary


@pytest.fixture(scope="module")
def rows():
    return fidelity_rows()


def test_covers_the_supported_rows(rows) -> None:
    cases, skipped = load_cases()
    assert len(rows) == len(cases) >= 100
    sources = {r.case.source_key for r in rows}
    assert {"narayanan2021_t1", "korthikanti2022_t5", "nemo_2407", "megatron_bridge_perf",
            "mosaic_llmfoundry", "bloom176b"} <= sources
    assert all(s.reason for s in skipped)


def test_median_and_p90_error(rows) -> None:
    median, p90 = summary([r.error for r in rows])
    assert median <= 0.10, f"median |error| {median:.1%}"
    assert p90 <= 0.25, f"p90 |error| {p90:.1%}"


def test_beats_the_constant_mfu_estimate(rows) -> None:
    _, base = constant_mfu_errors(rows)
    assert summary([r.error for r in rows])[0] < summary(base)[0]


def test_no_published_run_is_predicted_out_of_memory(rows) -> None:
    oom = [r.case.label for r in rows if not r.fits]
    assert not oom, oom
