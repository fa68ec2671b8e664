"""Shape-aware efficiency (issue 11 item 2): per-device GEMM and attention shapes after every split.

A GEMM's time is max(compute, HBM roofline) + a fixed per-kernel overhead, so its efficiency rises
with the per-device M x N x K; fused attention's efficiency rises with the key chunk it iterates
(seq_len / cp under the CP ring). Splitting too finely (context parallelism at short sequences)
then costs time, which breaks the exact ties constant efficiency produced.
"""

from __future__ import annotations

import pytest
from paraplan.cost import AttentionKernel, Precision
from paraplan.cost.compute import (
    ACTIVATION_BYTES,
    ATTENTION_HALF_TOKENS,
    AttentionShape,
    GemmShape,
    attention_efficiency,
    attention_s,
    gemm_efficiency,
    gemm_s,
    gemm_shape,
)
from paraplan.graph import Gemm
from paraplan.hardware import build_cluster

import paraplan
from paraplan.errors import ConfigError

H100 = build_cluster("dgx-h100", gpus=8)
ACCEL, EFF = H100.accelerator, H100.efficiency


def test_gemm_time_is_roofline_plus_kernel_overhead() -> None:
    shape = GemmShape(4096, 4096, 4096)
    # max(2mnk / (peak * eff), bytes / (HBM * eff_hbm)) + overhead; this one is compute-bound
    compute = 2 * 4096**3 / (ACCEL.peak_for("bf16") * EFF.gemm("bf16"))
    assert gemm_s(shape, Precision.BF16, ACCEL, EFF) == pytest.approx(compute + EFF.kernel_overhead_s)
    thin = GemmShape(8, 8192, 8192)  # a few tokens: the weight read binds
    moved = (8 * 8192 + 8192 * 8192) * ACTIVATION_BYTES + 8 * 8192 * ACTIVATION_BYTES
    assert gemm_s(thin, Precision.BF16, ACCEL, EFF) == pytest.approx(
        moved / (ACCEL.hbm_bytes_per_s * EFF.hbm) + EFF.kernel_overhead_s
    )


def test_gemm_efficiency_rises_with_the_per_device_tokens_and_stays_below_large_gemm_eff() -> None:
    effs = [
        gemm_efficiency(GemmShape(m, 4096, 4096), Precision.BF16, ACCEL, EFF)
        for m in (16, 256, 1024, 4096, 16384)
    ]
    assert effs == sorted(effs) and effs[0] < 0.5 * effs[-1]
    assert effs[-1] <= EFF.gemm("bf16")


def test_gemm_shape_splits_the_tp_dimension_and_keeps_the_flops() -> None:
    col, row, rep = (Gemm(name="g", in_dim=4096, out_dim=8192, tp_split=s) for s in ("out", "in", "none"))
    assert gemm_shape(col, 1024, 4) == GemmShape(1024, 2048, 4096)
    assert gemm_shape(row, 1024, 4) == GemmShape(1024, 8192, 1024)
    assert gemm_shape(rep, 1024, 4) == GemmShape(256, 8192, 4096)
    for g in (col, row, rep):
        assert gemm_shape(g, 1024, 4).flops == pytest.approx(1024 * g.flops_per_token / 4)


def test_attention_efficiency_halves_at_the_half_length_and_pays_one_overhead_per_kernel() -> None:
    half = AttentionShape(1, ATTENTION_HALF_TOKENS)
    assert attention_efficiency(half, EFF) == pytest.approx(EFF.attention / 2)
    ring = AttentionShape(8, 1024.0)
    flops = 1e12
    # flops / (bf16 peak * attention * L / (L + L_half)) + kernels * overhead
    expected = (
        flops / (ACCEL.peak_for("bf16") * EFF.attention * 1024 / (1024 + ATTENTION_HALF_TOKENS))
        + 8 * EFF.kernel_overhead_s
    )
    assert attention_s(flops, ring, ACCEL, EFF) == pytest.approx(expected)


def _scenario(preset: str, cluster: str, gpus: int, seq_len: int, batch: int) -> dict:
    return {
        "model": {"preset": preset},
        "cluster": {"preset": cluster, "gpus": gpus},
        "job": {"seq_len": seq_len, "global_batch": batch, "precision": "bf16"},
    }


def test_context_parallel_degrees_no_longer_tie_on_llama3_8b_on_8_h100() -> None:
    """Issue 11: --top 3 tied dp4 x cp2, dp2 x cp4 and dp1 x cp8 at exactly one step time under
    constant efficiency. Now the finer the CP split, the shorter each rank's GEMMs and attention
    chunks and the slower the step, so no two of the top plans tie."""
    r = paraplan.solve(_scenario("llama3-8b", "dgx-h100", 8, 8192, 128), top=3, workers=1)
    times = [r.predicted.step_time_s] + [a.step_time_s for a in r.alternatives]
    assert len(times) == 3 and len(set(round(t, 6) for t in times)) == 3, times
    by_cp = {}
    for cp in (2, 4, 8):
        sc = _scenario("llama3-8b", "dgx-h100", 8, 8192, 128)
        sc["plan"] = {
            "dp": 8 // cp,
            "tp": 1,
            "pp": 1,
            "cp": cp,
            "micro_batch": 1,
            "zero": 1,
            "recompute": "none",
        }
        by_cp[cp] = paraplan.evaluate(sc).predicted.step_time_s
    assert by_cp[2] < by_cp[4] < by_cp[8], by_cp


def test_gpt3_175b_on_1024_a100_at_2k_tokens_uses_no_context_parallelism() -> None:
    """Issue 11: at 2K tokens cp = 4 left 512 tokens per rank; ring hops cannot hide behind such
    short attention chunks and the GEMMs shrink, so the optimum has cp = 1."""
    r = paraplan.solve(_scenario("gpt3-175b", "dgx-a100-80gb", 1024, 2048, 1536), workers=1)
    assert r.solver.status == "OPTIMAL"
    assert r.plan.cp == 1, r.plan


def test_flash_attention_2_is_slower_on_hopper_and_the_same_on_ampere() -> None:
    """job.attention_kernel: FlashAttention-2 reaches 1 / 1.5 of the fused (FA3 / cuDNN) rate on
    Hopper (Shah et al. 2024: FA3 1.5-2.0x FA2 forward, 1.5-1.75x backward); on Ampere it is the
    fused kernel. Overheads unchanged."""
    shape, flops = AttentionShape(1, 8192.0), 1e12
    fused = attention_s(flops, shape, ACCEL, EFF) - EFF.kernel_overhead_s
    fa2 = attention_s(flops, shape, ACCEL, EFF, AttentionKernel.FLASH2) - EFF.kernel_overhead_s
    assert fa2 == pytest.approx(fused * 1.5)
    a100 = build_cluster("dgx-a100-80gb", gpus=8)
    acc, eff = a100.accelerator, a100.efficiency
    assert attention_s(flops, shape, acc, eff, AttentionKernel.FLASH2) == attention_s(flops, shape, acc, eff)


def test_flash_attention_1_runs_at_half_flash_attention_2_on_hopper_and_blackwell() -> None:
    """FlashAttention-2 is about 2x FlashAttention-1 (Dao 2023): on Hopper and Blackwell flash1
    takes twice flash2's kernel time (three times the fused kernel's); on Ampere the fitted
    kernel stands for both (cost/compute.py FLASH1_FRACTION)."""
    shape, flops = AttentionShape(1, 8192.0), 1e12
    for preset in ("dgx-h100", "dgx-b200"):
        cluster = build_cluster(preset, gpus=8)
        acc, eff = cluster.accelerator, cluster.efficiency
        fused = attention_s(flops, shape, acc, eff) - eff.kernel_overhead_s
        fa2 = attention_s(flops, shape, acc, eff, AttentionKernel.FLASH2) - eff.kernel_overhead_s
        fa1 = attention_s(flops, shape, acc, eff, AttentionKernel.FLASH1) - eff.kernel_overhead_s
        assert fa1 == pytest.approx(2 * fa2)
        assert fa1 == pytest.approx(3 * fused)
    a100 = build_cluster("dgx-a100-80gb", gpus=8)
    acc, eff = a100.accelerator, a100.efficiency
    assert attention_s(flops, shape, acc, eff, AttentionKernel.FLASH1) == attention_s(flops, shape, acc, eff)


def test_scenario_attention_kernel_slows_a_long_context_h100_step_and_rejects_unknown_kernels() -> None:
    sc = _scenario("llama3-8b", "dgx-h100", 8, 32768, 8)
    sc["plan"] = {"dp": 8, "tp": 1, "pp": 1, "micro_batch": 1, "zero": 3, "recompute": "full"}
    fused = paraplan.evaluate(sc).predicted.step_time_s
    sc["job"]["attention_kernel"] = "flash2"
    flash2 = paraplan.evaluate(sc).predicted.step_time_s
    assert flash2 > 1.2 * fused
    sc["job"]["attention_kernel"] = "flash1"  # FlashAttention-1: slower again
    assert paraplan.evaluate(sc).predicted.step_time_s > 1.2 * flash2
    sc["job"]["attention_kernel"] = "flash9"
    with pytest.raises(ConfigError, match="attention_kernel"):
        paraplan.evaluate(sc)
