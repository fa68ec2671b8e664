"""The GEMM terms of a serving step (cost/serving_step.py's docstring, "GEMMs" and "Routed
experts", gives the model): the tensor-core precision a checkpoint runs at, the serving GEMM
efficiencies, the roofline of one GEMM, a layer's dense GEMMs over its TP ranks, and the routed
experts' grouped GEMMs on the busiest EP group. Split from cost/serving_step.py (one concern per
module, STYLE.md Sec. 1): the step there adds these to attention, collectives and host time."""

from __future__ import annotations

import math
from dataclasses import replace

from paraplan.cost.kv import WorkerShape
from paraplan.cost.memo import IdentityMemo
from paraplan.graph.layer import Gemm, Layer
from paraplan.hardware import Accelerator, Cluster, Efficiency
from paraplan.hardware.serving import ServingFit, gemm_kernel_rates, gemm_priors

__all__ = [
    "ACT_BYTES",
    "GROUPED_GEMM_M_HALF",
    "MOE_TILE_MIN_ROWS",
    "MOE_TILE_MAX_ROWS",
    "TILED_MOE_ENGINES_READ",
    "TILED_MOE_ENGINES_DEFAULT",
    "DEEPEP_MOE_ENGINES",
    "compute_precision",
    "serving_efficiency",
    "gemm_roofline_s",
    "dense_gemms_s",
    "experts_s",
    "grouped_gemm_row_fraction",
    "is_tiled_moe",
    "is_deepep_moe",
    "check_tiled_moe_engines",
    "moe_tile_rows",
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
    tiled: bool = False,
) -> float:
    """Routed experts of one MoE layer on the busiest EP group (cost/serving_step.py's docstring,
    "Routed experts"). Each active expert computes its m rows plus the padding of its kernel:
    ``tiled`` (an engine whose MoE kernels pick their row tile from the tokens per expert,
    ``is_tiled_moe``) pads m to whole tiles (``moe_tile_rows``), else m + GROUPED_GEMM_M_HALF."""
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
        share = m / moe_tile_rows(m, mean_copies / per_group) if tiled else grouped_gemm_row_fraction(m)
        frac = fit.moe_gemm_efficiency * share
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


MOE_TILE_MIN_ROWS = 16
"""Smallest row tile of vLLM's MoE kernels: its Triton fused_moe (BLOCK_SIZE_M 16 at up to 32
tokens in 241-249 of the 287 tuned JSON configs of vllm 0.15.1 model_executor/layers/fused_moe/
configs/), the Marlin MoE (fused_marlin_moe.py: the smallest of 8, 16, 32, 48, 64 covering the
mean tokens per expert, at least 16) and triton_kernels' matmul_ogs (the MXFP4 path on Hopper,
vllm/third_party/triton_kernels/matmul_ogs_details/opt_flags.py: block_m = max(16,
min(next_power_of_2(tokens_per_expt), 128))). FlashInfer 0.6.1's trtllm-gen MoE (Blackwell FP4,
vLLM's first choice there) goes down to 8 (trtllm_fused_moe_kernel_launcher.cu
computeSelectedTileN); 8 or 16 changes no calibration row (both leave a decode expert
memory-bound)."""

MOE_TILE_MAX_ROWS = 128
"""Largest row tile of those kernels (the same sources: triton_kernels' and trtllm-gen's clamp at
128; the tuned Triton configs reach 128 from about 1,024 tokens)."""

TILED_MOE_ENGINES_READ = frozenset({"vllm", "sglang"})
"""Engines whose MoE kernels size their row tile by the tokens per expert, as read (2026-12-02,
wheels from PyPI): vllm 0.15.1 (mxfp4.py ``get_mxfp4_backend``: FlashInfer's trtllm-gen MoE on
Blackwell, triton_kernels on Hopper; oracle/nvfp4.py tries FLASHINFER_TRTLLM first; the FP8 / BF16
Triton fused_moe reads its tuned BLOCK_SIZE_M by batch; int4 runs Marlin) and sglang 0.5.9
(server_args.py: ``moe_a2a_backend`` "none" and ``moe_runner_backend`` "auto" by default, which is
``flashinfer_trtllm`` for DeepSeek FP8 / FP4 on Blackwell and the Triton fused_moe elsewhere,
layers/quantization/fp8.py ``create_moe_runner``). TensorRT-LLM's wheel is not on PyPI (unread)."""

TILED_MOE_ENGINES_DEFAULT = frozenset({"vllm"})
"""The engines that tile by default: vLLM (rule A of docs/serving_model.md Sec. 6.0e, kept from
2026-12-02, eleventh session, Sec. 6.0f, once the front-end time was measured rather than fitted
per fold: in-sample TPOT and TTFT better, leave-one-source-out not worse in total). SGLang stays
on GROUPED_GEMM_M_HALF (rules B and C lost out of sample; which MoE runner its rows ran is not
stated)."""

DEEPEP_MOE_ENGINES = frozenset({"sglang"})
"""Engines taken to run DeepEP's all-to-all under attention DP with expert parallelism, and so
DeepGEMM's masked grouped GEMM (GROUPED_GEMM_M_HALF, derived from that kernel): sglang 0.5.9
layers/quantization/fp8.py ``is_deepgemm_moe_runner_backend_enabled`` picks the DEEP_GEMM runner
when the a2a backend is DeepEP. ASSUMED, not stated by the rows: that SGLang's attention-DP + EP
rows ran ``--moe-a2a-backend deepep`` (not its default)."""


def check_tiled_moe_engines(engines: frozenset[str]) -> frozenset[str]:
    """``engines`` if every one is in TILED_MOE_ENGINES_READ (the engines whose MoE kernels were
    read), else a ValueError naming the others: the set ``is_tiled_moe`` may be asked of
    (python -m benchmarks.serving_fidelity --moe-tiles). Empty turns the tiles off."""
    unknown = engines - TILED_MOE_ENGINES_READ
    if unknown:
        raise ValueError(f"moe tiles: {sorted(unknown)} not among {sorted(TILED_MOE_ENGINES_READ)}")
    return engines


def is_tiled_moe(engine_name: str, engines: frozenset[str] = TILED_MOE_ENGINES_DEFAULT) -> bool:
    """Whether the engine's routed-expert GEMMs pad each expert's rows to a tile near its tokens:
    ``engine_name`` in ``engines`` (TILED_MOE_ENGINES_DEFAULT, vLLM, unless an experiment passes
    another set), outside the DeepEP layouts of ``is_deepep_moe``."""
    return engine_name in engines


def is_deepep_moe(engine_name: str) -> bool:
    """Whether the engine's attention-DP + EP layouts run DeepGEMM's masked grouped GEMM
    (``DEEPEP_MOE_ENGINES``)."""
    return engine_name in DEEPEP_MOE_ENGINES


def moe_tile_rows(m: float, tokens_per_expert: float) -> float:
    """Rows one expert's GEMM computes for its ``m`` tokens: m padded to whole tiles,
    ceil(m / tile) tile, tile = clamp(next power of two of the mean tokens per local expert
    (T top_k / E_local), MOE_TILE_MIN_ROWS, MOE_TILE_MAX_ROWS) (triton_kernels opt_flags.py
    block_m; FlashInfer trtllm-gen computeSelectedTileN with T top_k / num_local_experts; the
    tuned Triton configs' BLOCK_SIZE_M by batch). A decode step's experts, a few tokens each,
    compute one 16-row tile and stay memory-bound; a busiest EP group's extra tokens can take a
    second tile. Units: rows."""
    power = 2.0 ** math.ceil(math.log2(max(tokens_per_expert, 1.0)))
    tile = min(float(MOE_TILE_MAX_ROWS), max(float(MOE_TILE_MIN_ROWS), power))
    return max(1, math.ceil(m / tile)) * tile  # at least one tile: no expert without rows divides by 0
