"""The GEMM terms of a serving step (cost/serving_step.py's docstring, "GEMMs" and "Routed
experts", gives the model): the tensor-core precision a checkpoint runs at, the serving GEMM
efficiencies, the roofline of one GEMM, a layer's dense GEMMs over its TP ranks, and the routed
experts' grouped GEMMs on the busiest EP group. Split from cost/serving_step.py (one concern per
module, STYLE.md Sec. 1): the step there adds these to attention, collectives and host time."""

from __future__ import annotations

from dataclasses import replace

from paraplan.cost.kv import WorkerShape
from paraplan.cost.memo import IdentityMemo
from paraplan.graph.layer import Gemm, Layer
from paraplan.hardware import Accelerator, Cluster, Efficiency
from paraplan.hardware.serving import ServingFit, gemm_kernel_rates, gemm_priors

__all__ = [
    "ACT_BYTES",
    "GROUPED_GEMM_M_HALF",
    "compute_precision",
    "serving_efficiency",
    "gemm_roofline_s",
    "dense_gemms_s",
    "experts_s",
    "grouped_gemm_row_fraction",
]

ACT_BYTES = 2.0  # bf16 activations between layers (the engines quantise only GEMM inputs)


def compute_precision(weights_precision: str, accel: Accelerator) -> str:
    """Tensor-core precision the GEMMs run at: the weights' own where the part has it (fp8 ->
    fp8; fp4 / nvfp4 / mxfp4 -> nvfp4, Blackwell's FP4 rate), else the next one it has (an FP4
    checkpoint on Hopper runs FP8 or BF16 after dequantisation: vLLM Marlin / TRT-LLM W4A16),
    else bf16."""
    wanted = {
        "fp8": ["fp8"],
        "fp8_blockwise": ["fp8"],
        "int8": ["fp8"],
        "nvfp4": ["nvfp4", "fp8"],
        "fp4": ["nvfp4", "fp8"],
        "mxfp4": ["nvfp4", "fp8"],
        "int4": [],
    }.get(weights_precision, [])
    for p in wanted:
        if p in accel.peak_flops_per_s:
            return p
    return "bf16"


_EFFICIENCIES: IdentityMemo[Efficiency] = IdentityMemo(256)
"""serving_efficiency's memo, by the cluster's identity and the fit (cost/memo.py)."""


def serving_efficiency(cluster: Cluster, fit: ServingFit) -> Efficiency:
    """The cluster's efficiencies with the GEMM rates of serving: ``gemm_fraction`` x the part's
    measured serving-kernel rate per precision (hardware/serving.py gemm_kernel_rates:
    TensorRT-LLM's linear layers at large m in AIConfigurator 0.12.0's GEMM database, e.g. H100
    FP8 0.72 and B200 NVFP4 0.47 of peak), else x the generation's MAMF prior (gemm_priors: an
    isolated large GEMM's rate, where the part or precision was not measured); the routed
    experts' grouped GEMMs take the same rate (``experts_s`` scales it by m / (m + 128) x
    moe_gemm_efficiency). A calibration profile's values as they are; the fitted values where the
    generation has no priors. Memoised: every step of a search asks for the same cluster's."""
    return _EFFICIENCIES.get(cluster, fit, lambda: _serving_efficiency(cluster, fit))


def _serving_efficiency(cluster: Cluster, fit: ServingFit) -> Efficiency:
    eff = cluster.efficiency
    priors = gemm_priors(cluster.accelerator.generation)
    if cluster.efficiency_override is not None or priors is None:
        return eff
    rates = gemm_kernel_rates(cluster.accelerator.key)
    return replace(eff, **{k: rates.get(k, v) * fit.gemm_fraction for k, v in priors.items()})


def gemm_roofline_s(
    m: float,
    n: float,
    k: float,
    w_bytes: float,
    prec: str,
    accel: Accelerator,
    eff: Efficiency,
    compute_fraction: float = 1.0,
) -> float:
    """Roofline of one GEMM without the overhead: max(2mnk / (peak eff f), bytes / (HBM
    eff_hbm)), f the ``compute_fraction`` of the dense rate the kernel reaches (1 for dense
    GEMMs, moe_gemm_efficiency for grouped expert GEMMs)."""
    if m <= 0.0:
        return 0.0
    compute = 2.0 * m * n * k / (accel.peak_for(prec) * eff.gemm(prec) * compute_fraction)
    moved = k * n * w_bytes + (m * k + m * n) * ACT_BYTES
    return max(compute, moved / (accel.hbm_bytes_per_s * eff.hbm))


def dense_gemms_s(
    gemms: tuple[Gemm, ...],
    tokens: float,
    tp: int,
    w_bytes: float,
    prec: str,
    accel: Accelerator,
    eff: Efficiency,
    overhead_s: float,
) -> float:
    """The layer's GEMMs on ``tokens`` tokens per rank: column-parallel n / tp, row-parallel
    k / tp, replicated whole (cost/compute.py gemm_shape without sequence parallelism)."""
    total = 0.0
    for g in gemms:
        n, k = float(g.out_dim), float(g.in_dim)
        if g.tp_split == "out":
            n /= tp
        elif g.tp_split == "in":
            k /= tp
        b = 2.0 if g.name == "router" else w_bytes  # routers stay bf16 in quantised checkpoints
        total += (
            gemm_roofline_s(tokens, n, k, b, "bf16" if g.name == "router" else prec, accel, eff) + overhead_s
        )
    return total


def experts_s(
    ly: Layer,
    tokens: float,
    shape: WorkerShape,
    w_bytes: float,
    prec: str,
    accel: Accelerator,
    eff: Efficiency,
    overhead_s: float,
    fit: ServingFit,
) -> float:
    """Routed experts of one MoE layer on the busiest EP group (cost/serving_step.py's docstring,
    "Routed experts")."""
    assert ly.experts is not None
    e = ly.experts
    per_group = e.num_experts / shape.ep
    mean_copies = tokens * e.top_k / shape.ep
    copies = mean_copies * (fit.moe_decode_imbalance if shape.ep > 1 else 1.0)
    # distinct experts a group's copies hit (drawn uniformly over its experts): the weights it
    # streams; the busiest group's extra copies land on the experts it already holds hot
    hit = 1.0 - (1.0 - 1.0 / per_group) ** mean_copies if per_group > 1 else 1.0
    active = max(1.0, per_group * hit)
    m = copies / active
    total = 0.0
    for g in e.gemms:
        n, k = float(g.out_dim), float(g.in_dim)
        if g.tp_split == "out":
            n /= shape.moe_tp
        elif g.tp_split == "in":
            k /= shape.moe_tp
        frac = fit.moe_gemm_efficiency * grouped_gemm_row_fraction(m)
        total += active * gemm_roofline_s(m, n, k, w_bytes, prec, accel, eff, frac) + overhead_s
    return total


GROUPED_GEMM_M_HALF = 128.0
"""Rows a grouped expert GEMM computes beyond its tokens, per expert (tile padding and pipeline
fill): DeepGEMM's masked grouped FP8 GEMM reaches 815-932 TFLOPS at 256 rows per group against
1,214-1,346 for its contiguous layout at 4-8K rows per group, itself about the dense rate
(DeepGEMM README; shared docs moe_physics.md Sec. 3.4): 256 / (256 + m_half) = 0.67 gives m_half
~ 128, the kernels' BLOCK_M."""


def grouped_gemm_row_fraction(m: float) -> float:
    """Share of a grouped expert GEMM's compute that does its ``m`` tokens' rows: m / (m +
    GROUPED_GEMM_M_HALF). Each expert computes as if it had m_half more rows, so experts fed a
    few tokens (Qwen3-30B-A3B's 128 experts in a decode step) run far below the dense rate and
    Mixtral's 8 experts fed thousands of prompt tokens near it; the weight stream of a decode step
    is not affected (its roofline term stays). Dimensionless."""
    return m / (m + GROUPED_GEMM_M_HALF)
