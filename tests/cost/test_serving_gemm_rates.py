"""The serving GEMM rates (cost/serving_gemm.py serving_efficiency): the part's measured serving
kernel rate per precision (hardware/data/serving.yaml gemm_kernel_rates) times gemm_fraction, the
MAMF prior where nothing was measured, and a compute-bound prefill step that follows them."""

from __future__ import annotations

from dataclasses import replace

import pytest
from paraplan.cost.kv import WorkerShape
from paraplan.cost.serving_gemm import serving_efficiency
from paraplan.cost.serving_step import StepInput, step_time
from paraplan.graph import build_graph, preset
from paraplan.hardware import build_cluster
from paraplan.hardware.serving import gemm_kernel_rates, gemm_priors, serving_fit


def test_a_measured_part_takes_its_kernel_rates_and_a_same_die_part_its_dies() -> None:
    h100 = gemm_kernel_rates("h100")
    assert h100["gemm_fp8"] == pytest.approx(0.720) and h100["gemm_bf16"] == pytest.approx(0.772)
    assert gemm_kernel_rates("gh200-96gb") == h100  # GH200's GPU is the H100 die
    assert gemm_kernel_rates("b200")["gemm_nvfp4"] == pytest.approx(0.466)
    assert gemm_kernel_rates("mi300x") == {}  # nothing measured


def test_serving_efficiency_is_the_fraction_of_the_kernel_rate_else_of_the_mamf_prior() -> None:
    fit = serving_fit()
    eff = serving_efficiency(build_cluster("dgx-h100", nodes=1), fit)
    assert eff.gemm("fp8") == pytest.approx(0.720 * fit.gemm_fraction)
    assert eff.gemm("bf16") == pytest.approx(0.772 * fit.gemm_fraction)
    # B300 has no NVFP4 table in the database: its MAMF prior stands in
    b300 = serving_efficiency(build_cluster("dgx-b300", nodes=1), fit)
    priors = gemm_priors("blackwell_ultra")
    assert priors is not None
    assert b300.gemm("nvfp4") == pytest.approx(priors["gemm_nvfp4"] * fit.gemm_fraction)


def test_a_prefill_step_is_as_fast_as_the_measured_rate_says() -> None:
    # an 8,192-token prompt step of Llama 3.1 8B is compute-bound: its GEMM time scales as
    # 1 / rate (the FP8 rate on H100 against the BF16 one, 0.720 / 0.772 of different peaks)
    graph = build_graph(preset("llama3.1-8b"))
    cluster = build_cluster("dgx-h100", nodes=1)
    fit = replace(serving_fit(), graph_kernel_overhead_s=0.0)

    def gemm_s(precision: str, w_bytes: float) -> float:
        x = StepInput(0.0, 0.0, 8192.0, 8192.0, 1.0)
        t = step_time(
            graph,
            cluster,
            WorkerShape(),
            x,
            w_bytes=w_bytes,
            weights_precision=precision,
            kv_bytes=2.0,
            fit=fit,
        )
        return t.gemm_s

    acc = cluster.accelerator
    ratio = (acc.peak_for("bf16") * 0.772) / (acc.peak_for("fp8") * 0.720)
    # the LM head runs bf16 in both (a single sampled token here): compare within 2%
    assert gemm_s("fp8", 1.0) / gemm_s("bf16", 2.0) == pytest.approx(ratio, rel=0.02)
