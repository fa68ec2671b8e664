"""cost/reliability.py: the failure rate, Young's interval, goodput and time to train, checked
against the figures their sources give (module docstring) and against direct arithmetic."""

from __future__ import annotations

import math

import pytest
from paraplan.cost.reliability import (
    LLAMA3_FAILURE_RATE_PER_GPU_HOUR,
    Checkpointing,
    Reliability,
    checkpoint_bytes,
    checkpointing,
    goodput,
    mtbf_s,
    time_to_train,
    young_interval_s,
)
from paraplan.hardware.capacity import host_link_bytes_per_s, price_of, storage_tier


def test_llama3_failure_rate() -> None:
    # 419 unexpected interruptions in 54 days on 16,384 GPUs: 1.97e-5 per GPU-hour, one per 3.1 h
    assert LLAMA3_FAILURE_RATE_PER_GPU_HOUR == pytest.approx(1.97e-5, rel=2e-3)
    assert mtbf_s(16_384, LLAMA3_FAILURE_RATE_PER_GPU_HOUR) / 3600 == pytest.approx(3.09, abs=0.01)


def test_young_interval() -> None:
    assert young_interval_s(10.0, 3600.0) == pytest.approx(math.sqrt(2 * 10 * 3600))


def _good(gpus: int, params: float, step_s: float):
    w, r = storage_tier().for_gpus(gpus)
    ck = checkpointing(checkpoint_bytes(params), gpus, w, r, host_link_bytes_per_s("h100"), Reliability())
    return goodput(gpus, step_s, ck, Reliability())


def test_goodput_against_published_scale_figures() -> None:
    # ByteRobust (arXiv 2509.16293): 97% effective training time on 9,600 GPUs
    assert _good(9_600, 70e9, 5.0).ratio == pytest.approx(0.97, abs=0.01)
    # Llama 3 (arXiv 2407.21783 Sec. 3.3.4): "higher than 90%" on 16,384 GPUs
    assert 0.90 < _good(16_384, 405e9, 7.8).ratio < 0.97
    # issue 25: at 131k GPUs a 10-minute restart alone costs ~43% of wall time
    g = _good(131_072, 405e9, 2.0)
    assert 600 / g.mtbf_s == pytest.approx(0.43, abs=0.01)
    assert g.ratio < 0.6


def test_goodput_terms_by_hand() -> None:
    ck = Checkpointing(bytes=1e12, stall_s=2.0, write_s=30.0, restore_s=60.0)
    rel = Reliability(failure_rate_per_gpu_hour=1e-5, restart_s=300.0)
    g = goodput(1000, 4.0, ck, rel)
    lam = 1000 * 1e-5 / 3600
    assert g.young_interval_s == pytest.approx(math.sqrt(2 * 2.0 / lam))
    period = g.checkpoint_steps * 4.0
    assert period >= 30.0  # the background write finishes before the next checkpoint
    assert abs(period - g.young_interval_s) <= 4.0
    lost = 300 + 60 + 30 + (period + 2.0) / 2
    assert g.lost_per_failure_s == pytest.approx(lost)
    assert g.ratio == pytest.approx(period / (period + 2.0) * (1 - lam * lost))


def test_time_to_train_grows_with_step_time() -> None:
    # whole-step rounding moves goodput a little, never enough to make a slower step train faster
    ck = Checkpointing(bytes=1e12, stall_s=2.0, write_s=30.0, restore_s=60.0)
    times = [s / goodput(4096, s, ck, Reliability()).ratio for s in (0.5, 1, 2, 3, 5, 8, 13, 40, 100)]
    assert all(a < b for a, b in zip(times, times[1:], strict=False))


def test_no_progress_when_failures_outpace_it() -> None:
    ck = Checkpointing(bytes=1e12, stall_s=1.0, write_s=1.0, restore_s=1.0)
    g = goodput(100_000, 1.0, ck, Reliability(failure_rate_per_gpu_hour=1e-2, restart_s=3600))
    assert g.ratio == 0.0
    assert time_to_train(1e12, 1_000_000, 1.0, g, 100_000, 2.0).wall_s == math.inf


def test_time_to_train_arithmetic() -> None:
    ck = Checkpointing(bytes=1e12, stall_s=0.0, write_s=0.0, restore_s=0.0)
    g = goodput(8, 2.0, ck, Reliability(failure_rate_per_gpu_hour=0.0))
    assert g.ratio == 1.0
    t = time_to_train(1e9, 1_000_000, 2.0, g, 8, 3.0)
    assert t.steps == 1000 and t.wall_s == 2000.0
    assert t.cost_usd == pytest.approx(2000 / 3600 * 8 * 3.0)
    assert t.expected_interruptions == 0.0


def test_price_data_has_sources() -> None:
    for key in ("h100", "h800", "b200", "gb200"):
        p = price_of(key)
        assert p is not None and p.low <= p.usd_per_gpu_hour <= p.high and p.source
    assert price_of("gb300") is None  # a capacity scenario must give cluster.price_per_gpu_hour
    assert price_of("h800").usd_per_gpu_hour == 2.0  # DeepSeek-V3 Table 1's assumption


@pytest.mark.parametrize("gpus", [8, 512, 4096, 16_384, 131_072])
def test_goodput_never_above_its_upper_bound(gpus: int) -> None:
    # the capacity bounds use it: goodput is not monotone in the step time (whole steps)
    from paraplan.cost.reliability import goodput_upper_bound

    for ck in (
        Checkpointing(bytes=1e12, stall_s=2.0, write_s=30.0, restore_s=60.0),
        Checkpointing(bytes=1e12, stall_s=0.01, write_s=0.5, restore_s=1.0),
    ):
        for rel in (Reliability(), Reliability(checkpoint_interval_s=900.0), Reliability(restart_s=60)):
            upper = goodput_upper_bound(gpus, ck, rel)
            for step in (0.3, 0.7, 1.0, 2.5, 3.3, 5.0, 8.0, 13.0, 31.0, 100.0):
                assert goodput(gpus, step, ck, rel).ratio <= upper
