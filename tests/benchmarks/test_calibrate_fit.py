"""benchmarks.calibrate.fit_table: what a generation without runs takes (the crossval's rule)."""

from __future__ import annotations

import math

import pytest

from benchmarks.calibrate import _fixed_recompute, fit_table, platform, priors
from benchmarks.fidelity import fidelity_cases


@pytest.fixture(scope="module")
def fitted():
    # the eight torchtitan A100 runs: only the ampere generation has runs
    cases = [_fixed_recompute(c) for c in fidelity_cases() if c.source_key == "torchtitan_a100"]
    assert len(cases) == 8
    start = priors()
    table, names = fit_table(cases, start)
    return start, table, names


def test_only_a_generation_with_runs_is_fitted(fitted) -> None:
    _, _, names = fitted
    assert set(names) == {"ampere"} and "gemm_bf16" in names["ampere"]


def test_the_fitted_over_prior_ratio_transfers_within_its_platform_only(fitted) -> None:
    start, table, _ = fitted
    ratio = table["ampere"]["gemm_bf16"] / start["ampere"]["gemm_bf16"]
    assert not math.isclose(ratio, 1.0)
    for gen in ("hopper", "blackwell", "cdna3"):  # GPUs: prior x the GPU ratio
        assert platform(gen) == "gpu"
        assert table[gen]["gemm_bf16"] == pytest.approx(start[gen]["gemm_bf16"] * ratio, abs=1e-4)
    for gen in ("tpu_v4", "tpu_v5e"):  # TPUs: no TPU run, so their priors (XLA's stack differs)
        assert platform(gen) == "tpu"
        assert table[gen]["gemm_bf16"] == start[gen]["gemm_bf16"]
