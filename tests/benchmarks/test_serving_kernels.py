"""benchmarks/serving_kernels.py: the four-number GEMM kernel form fitted to AIConfigurator's
measured tables recovers known numbers from synthetic latencies (the figures docs/serving_model.md
Sec. 6 quotes)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.serving_kernels import WEIGHT_BYTES, fit_kernel


def test_the_kernel_fit_recovers_the_numbers_it_was_made_from() -> None:
    pytest.importorskip("scipy")
    peak, hbm, w_b = 9.0e15, 8.0e12, WEIGHT_BYTES["nvfp4"]
    rows = (1, 16, 128, 512, 2048, 8192)
    grid = [(m, n, k) for m in rows for n in (2048, 8192, 28672) for k in (4096, 8192)]
    m, n, k = (np.array([float(g[i]) for g in grid]) for i in range(3))
    # t = fixed + max(2mnk / (peak compute), bytes / (HBM stream)) + act m k / HBM
    compute, stream, fixed_s, act = 0.47, 0.52, 10e-6, 5.5
    flops_s = 2 * m * n * k / (peak * compute)
    stream_s = (n * k * w_b + (m * k + m * n) * 2) / (hbm * stream)
    t = fixed_s + np.maximum(flops_s, stream_s) + act * m * k / hbm
    got, err = fit_kernel(m, n, k, t, peak, hbm, w_b)
    assert err < 0.01
    assert got["compute"] == pytest.approx(compute, rel=0.05)
    assert got["stream"] == pytest.approx(stream, rel=0.05)
    assert got["fixed_us"] == pytest.approx(10.0, rel=0.1)
