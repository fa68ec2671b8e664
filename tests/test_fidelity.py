"""Fidelity on the calibration set: predicted vs published step time of every supported run.

The bar: the best single constant MFU reaches only ~15% median / ~40-50% p90 absolute error on
these runs; paraplan must reach <= 10% median and <= 25% p90, and predict none of the published
(real, running) configurations out of memory.
"""

from __future__ import annotations

import pytest

from benchmarks.fidelity import constant_mfu_errors, scored_rows, summary


@pytest.fixture(scope="module")
def scored():
    return scored_rows()


@pytest.fixture(scope="module")
def rows(scored):
    return scored[0]


def test_covers_the_supported_rows(scored) -> None:
    rows, skipped = scored
    assert len(rows) + len(skipped) == 312
    assert len(rows) >= 200
    sources = {r.case.source_key for r in rows}
    assert {"narayanan2021_t1", "korthikanti2022_t5", "nemo_2407", "megatron_bridge_perf",
            "mosaic_llmfoundry", "bloom176b"} <= sources
    assert all(s.reason for s in skipped)


def test_median_and_p90_error(rows) -> None:
    median, p90 = summary([r.error for r in rows])
    # 8.7% / 20.5% on 243 runs (2026-11-30; 7.9% / 19.2% on the 225 before the 18 uneven-vp
    # runs were scored, which the efficiency fit has not seen yet)
    assert median <= 0.09, f"median |error| {median:.1%}"
    assert p90 <= 0.215, f"p90 |error| {p90:.1%}"


def test_beats_the_constant_mfu_estimate(rows) -> None:
    _, base = constant_mfu_errors(rows)
    assert summary([r.error for r in rows])[0] < summary(base)[0]


# Known out-of-memory predictions (issue 11): torchtitan's per-op selective checkpointing on Llama 2
# 70B / 64 A100 (row 407) saves less than Megatron's selective recompute, the only selective mode
# modelled (84 GiB of activations predicted); NeMo AutoModel Qwen3-30B-A3B on 8 H100 with FSDP2
# (row 378) needs 85 GiB even with full recompute under 16 B/parameter mixed-precision Adam.
KNOWN_OOM_ROWS = {378, 407}
# TPU rows (MaxText on v4, v5e, v5p; tests/test_fidelity_tpu.py): Megatron's activation accounting
# and a CUDA runtime reserve keep more than MaxText under XLA does (issue 14)
KNOWN_OOM_ROWS |= {665, 666, 667, 668, 669, 670, 625, 626, 628, 642, 643}


def test_no_published_run_is_predicted_out_of_memory(rows) -> None:
    oom = sorted(r.case.row_id for r in rows if not r.fits)
    assert set(oom) <= KNOWN_OOM_ROWS, oom


def _by_id(rows) -> dict:
    return {r.case.row_id: r for r in rows}


MOE_ROWS = (323, 332, 340, 346)  # Megatron-Bridge 25.11 Qwen3-30B-A3B: 8 GB300, 8 GB200, 8 B200, 16 H100
GB300_ROWS = (316, 317, 318, 323)  # Megatron-Bridge 25.11 on GB300: Llama 3 8B (x2), 70B, Qwen3-30B-A3B
LONG_CONTEXT_ROWS = (570, 581, 592, 603, 614)  # MosaicML MPT at seq 32K on 8 A100 40GB
CONTEXT_PARALLEL_ROWS = (58, 59)  # NeMo 24.07 Llama 3 8B / 70B with cp = 2


def test_moe_rows_are_covered(rows) -> None:
    by_id = _by_id(rows)
    assert set(MOE_ROWS) <= set(by_id), sorted(set(MOE_ROWS) - set(by_id))
    assert all(by_id[i].case.scenario["model"].get("experts") == 128 for i in MOE_ROWS)


def test_moe_rows_on_blackwell_within_15_percent(rows) -> None:
    """Qwen3-30B-A3B (128 experts of width 768, top-8) on 8 B200 and 8 GB200, pp = 1."""
    by_id = _by_id(rows)
    errors = {i: by_id[i].error for i in (332, 340)}
    assert all(abs(e) <= 0.15 for e in errors.values()), errors


def test_gb300_rows_predicted_from_blackwell_within_25_percent(rows) -> None:
    """GB300 (blackwell_ultra) is fitted since 2026-11-30 to its 13 scored B300/GB300 runs
    (hardware/data/efficiency.yaml); these four stay within the calibration set's p90 bar."""
    by_id = _by_id(rows)
    assert set(GB300_ROWS) <= set(by_id), sorted(set(GB300_ROWS) - set(by_id))
    assert all(by_id[i].case.scenario["cluster"]["preset"] == "gb300-nvl72" for i in GB300_ROWS)
    errors = {i: round(by_id[i].error, 3) for i in GB300_ROWS}
    assert all(abs(e) <= 0.25 for e in errors.values()), errors


def test_moe_h100_pipeline_row_stays_a_known_under_prediction(rows) -> None:
    """Row 346 (16 H100, pp=2 x vp=24, one MoE layer per virtual stage) is predicted about
    twice as fast as published; its cause is not modelled (benchmarks/fidelity.py notes). This
    bound fails if a model change moves it, so the note is revisited rather than forgotten."""
    error = _by_id(rows)[346].error
    assert -0.6 <= error <= -0.3, f"row 346 error {error:+.1%}: update the note and this bound"


def test_long_context_and_context_parallel_rows_within_15_percent(rows) -> None:
    by_id = _by_id(rows)
    ids = LONG_CONTEXT_ROWS + CONTEXT_PARALLEL_ROWS
    assert set(ids) <= set(by_id), sorted(set(ids) - set(by_id))
    assert all(by_id[i].case.scenario["job"]["seq_len"] >= 32768 for i in LONG_CONTEXT_ROWS)
    assert all(by_id[i].case.scenario["plan"]["cp"] == 2 for i in CONTEXT_PARALLEL_ROWS)
    errors = {i: round(by_id[i].error, 3) for i in ids}
    assert all(abs(e) <= 0.15 for e in errors.values()), errors
