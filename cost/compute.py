"""Compute time of one layer for one micro-batch on one device, from the per-device operation shapes.

Shape-aware efficiency (issue 11 item 2): every cost is that of the operation each device runs
after every split, so splitting too finely costs what it costs.

- GEMM of M x N x K per device (M = micro_batch * seq_len / cp tokens, the gathered sequence
  under TP + SP; N or K divided by tp as the GEMM is column- or row-parallel; replicated GEMMs
  run on the n / tp sequence-parallel tokens): ``max(W / (peak * eff), B / (HBM * eff_hbm)) +
  overhead``, W = 2 M N K FLOPs, B = (M K + K N) input bytes + M N output bytes. The fixed
  per-kernel overhead (launch, prologue, wave tail) and the HBM roofline are what make small
  per-device GEMMs inefficient; efficiency W / (peak * t) is then a function of M, N, K that rises
  to ``eff`` for large GEMMs. Checked against the cuBLASLt m=n=k sweeps of hardware.json
  (``gemm_efficiency.cublaslt_square_sweeps``, S34-S36): the intercepts they imply are about 10 us
  on A100 FP16, 4-6 us on H200 FP8 and 2-4 us on GB200 FP8 at 1024^3-2048^3.
- Fused (flash) attention over a key/value chunk of L tokens runs at the BF16 peak times
  ``attention * L / (L + ATTENTION_HALF_TOKENS)``, plus the per-kernel overhead per kernel: the
  per-query-block work (loading Q, writing O, the softmax rescale) is amortised over the L keys it
  iterates. Under context parallelism (ring, ``cp_comm`` p2p) each rank runs cp kernels, one per
  ring step, over chunks of L = seq_len / cp keys; under the all-gather variant one kernel over
  the gathered L = seq_len keys.
- The attention kernel (``job.attention_kernel``): ``fused`` is the generation's own kernel
  (cuDNN / Transformer Engine fused attention, FlashAttention-3 on Hopper), the one ``attention``
  is fitted to; ``flash2`` (FlashAttention-2) is written for Ampere's instructions and on newer
  parts runs at FLASH2_FRACTION of the fused kernel's rate, ``flash1`` (FlashAttention-1) at
  FLASH1_FRACTION, half that (docs/moe_physics.md Sec. 5.5).
- Element-wise work is HBM-bound.

Layer kinds: a sliding-window or chunked attention layer attends ``attended_keys`` keys per query
(fewer than the causal s / 2) and its kernels iterate at most the window / chunk; vision layers run
on ``micro_batch * image_tokens`` patch tokens (every cp rank encodes the whole images), with
bidirectional attention; a Mamba layer's scan (``scan_s``) runs as chunked matmul kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.cost.plan import AttentionKernel, CPComm, Job, Layout, Precision
from paraplan.graph import Gemm, Layer, LayerKind
from paraplan.hardware import Accelerator, Efficiency

__all__ = [
    "LayerTime",
    "tokens_per_device",
    "layer_forward",
    "BACKWARD_GEMM_FACTOR",
    "BACKWARD_ATTENTION_FACTOR",
    "ACTIVATION_BYTES",
    "GEMM_INPUT_BYTES",
    "gemm_input_bytes",
    "GemmShape",
    "gemm_shape",
    "gemm_s",
    "gemm_efficiency",
    "AttentionShape",
    "attention_shape",
    "attention_s",
    "attention_efficiency",
    "attention_chunk_factor",
    "ATTENTION_HALF_TOKENS",
    "attended_keys",
    "layer_tokens",
    "layer_seq_len",
    "layer_attention_shape",
    "attention_core_flops",
    "scan_s",
    "scan_times",
    "SSD_KERNELS",
    "SSD_BACKWARD_KERNELS",
    "FLASH2_FRACTION",
    "FLASH1_FRACTION",
    "kernel_fraction",
]

ACTIVATION_BYTES = 2  # bf16/fp16 activations (FP8 runs keep activations in bf16: Transformer Engine)
BACKWARD_GEMM_FACTOR = 2.0  # dgrad + wgrad, each the forward's FLOPs (Narayanan et al. 2021 Sec 5.1)
BACKWARD_ATTENTION_FACTOR = 2.5  # flash-attention backward / forward FLOPs (Dao 2023, FA2 Sec 3.1)
CAUSAL_FRACTION = 0.5  # causal masking skips half the score blocks (fused kernels)
# Key/value length at which a fused attention kernel reaches half its long-sequence throughput:
# FlashAttention-2 (Dao 2023, arXiv:2307.08691, Fig. 4-5: A100, head dim 128) and -3 (Shah et al.
# 2024, arXiv:2407.08608, Fig. 5-6: H100) run at roughly half their 16K-token TFLOP/s at 512
# tokens and at ~90% from 4K; L / (L + 512) gives 0.50 at 512, 0.89 at 4K, 0.97 at 16K.
ATTENTION_HALF_TOKENS = 512
# Kernels of one Mamba-2 SSD forward (mamba_ssm 2.3 ops/triton/ssd_combined.py
# _mamba_chunk_scan_combined_fwd: chunk_cumsum, chunk_state, state_passing, bmm_chunk, chunk_scan)
# and backward (_mamba_chunk_scan_combined_bwd: four recomputed forward kernels, then dz, dstates,
# state_passing_bwd, dx, dB, the states' cast, dC, dCB, two bmm_chunk_bwd, ddA, chunk_cumsum_bwd).
SSD_KERNELS = 5
SSD_BACKWARD_KERNELS = 16
# FlashAttention-2 on a part newer than Ampere, as a fraction of the generation's fused kernel
# (FlashAttention-3 on Hopper, with WGMMA and TMA; cuDNN's fused attention is of the same kind):
# FA3 is 1.5-2.0x faster than FA2 in the forward pass and 1.5-1.75x in the backward (Shah et al.
# 2024, arXiv:2407.08608, abstract and Sec. 4.1; the backward range cited from memory). A training
# step's attention is 2.5 parts backward to 1 forward (BACKWARD_ATTENTION_FACTOR), so its speed-up
# is the low end, 1.5: FA2 at 1 / 1.5 of the fused rate (the forward-only peak ratio, 35% against
# 75% of the H100's BF16 peak, Sec. 1, was used before 2026-12-02 and overstated it). Blackwell has
# no published FA2 figure: Hopper's ratio is its prior (FA2 uses neither part's asynchronous
# tensor-core instructions). On Ampere FA2 is the fused kernel (1.0); generations not listed (TPU,
# CDNA3) take 1.0.
FLASH2_FRACTION = {"hopper": 1 / 1.5, "blackwell": 1 / 1.5, "blackwell_ultra": 1 / 1.5}
# FlashAttention-1 (flash-attn 1.x, and the Triton port llm-foundry ran as attn_impl "triton"): FA2
# is about 2x faster than FA1 (Dao 2023, arXiv:2307.08691, abstract and Sec. 4.1, A100: "around 2x
# faster than FlashAttention"), from better work partitioning that does not depend on the part, so
# FA1 runs at half FA2's rate on Hopper and newer. On Ampere it is left at the fused kernel (1.0): the
# fitted Ampere ``attention`` is held by the FA1 rows themselves (MosaicML's 98 A100 runs), and no A100
# row of a known FA2 kernel is long enough to separate the two (not checked further).
FLASH1_FRACTION = {gen: fraction / 2 for gen, fraction in FLASH2_FRACTION.items()}
# Bytes per element of a GEMM input kept for backward (Transformer Engine stores the quantised
# copy): the element plus its share of the block scale (S-TE in hardware/data/catalog.yaml: FP8
# blockwise 1 scale (4 B) per 128 elements, MXFP8 1 B per 32, NVFP4 4 bits + 1 B per 16).
GEMM_INPUT_BYTES = {
    Precision.FP8: 1.0,
    Precision.FP8_BLOCKWISE: 1.0 + 4 / 128,
    Precision.MXFP8: 1.0 + 1 / 32,
    Precision.NVFP4: 0.5 + 1 / 16,
}


def gemm_input_bytes(precision: Precision) -> float:
    """Stored bytes per GEMM-input element for backward: ACTIVATION_BYTES unless low precision."""
    return GEMM_INPUT_BYTES.get(precision, float(ACTIVATION_BYTES))


@dataclass(frozen=True, slots=True)
class LayerTime:
    """Forward time of one layer, one micro-batch, split by resource; ``scan_backward_s`` is the
    backward of the state-space scan (its kernels differ from the forward's). Units: seconds."""

    gemm_s: float
    attention_s: float
    elementwise_s: float
    wgrad: float = 1.0  # weight-gradient GEMMs per forward GEMM: 1, or 0 for frozen weights
    scan_s: float = 0.0
    scan_backward_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.gemm_s + self.attention_s + self.elementwise_s + self.scan_s

    @property
    def forward_backward_s(self) -> float:
        return self.total_s + self.backward_s()

    def backward_s(self) -> float:
        return (
            (BACKWARD_GEMM_FACTOR - 1.0 + self.wgrad) * self.gemm_s
            + BACKWARD_ATTENTION_FACTOR * self.attention_s
            + 2.0 * self.elementwise_s
            + self.scan_backward_s
        )


def tokens_per_device(plan: Layout, job: Job) -> float:
    """Tokens of one micro-batch a device holds: micro_batch * seq_len / cp."""
    return plan.micro_batch * job.seq_len / plan.cp


@dataclass(frozen=True, slots=True)
class GemmShape:
    """One GEMM as a device runs it: (m x k) @ (k x n). Units: elements."""

    m: float
    n: float
    k: float

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k


def gemm_shape(gemm: Gemm, tokens: float, tp: int) -> GemmShape:
    """Per-device shape of ``gemm`` on ``tokens`` tokens (tokens_per_device) under ``tp``.

    Formula: column-parallel ("out"): m x (out/tp) x in; row-parallel ("in"): m x out x (in/tp);
    replicated ("none"): (m/tp) x out x in (the sequence-parallel shard; without SP it stands for
    the same FLOPs). Units: elements.
    """
    if gemm.tp_split == "out":
        return GemmShape(tokens, gemm.out_dim / tp, gemm.in_dim)
    if gemm.tp_split == "in":
        return GemmShape(tokens, gemm.out_dim, gemm.in_dim / tp)
    return GemmShape(tokens / tp, gemm.out_dim, gemm.in_dim)


def gemm_s(shape: GemmShape, precision: Precision, accel: Accelerator, eff: Efficiency) -> float:
    """Time of one GEMM kernel on one device.

    Formula: max(2mnk / (peak_p * eff_p), ((mk + kn) * in_B + mn * 2 B) / (HBM * eff_hbm))
             + kernel_overhead (in_B: gemm_input_bytes(precision)).
    Source: module docstring (roofline; overhead from the cuBLASLt sweeps). Units: seconds.
    """
    compute_s = shape.flops / (accel.peak_for(precision.value) * eff.gemm(precision.value))
    moved = (shape.m * shape.k + shape.k * shape.n) * gemm_input_bytes(
        precision
    ) + shape.m * shape.n * ACTIVATION_BYTES
    memory_s = moved / (accel.hbm_bytes_per_s * eff.hbm)
    return max(compute_s, memory_s) + eff.kernel_overhead_s


def gemm_efficiency(shape: GemmShape, precision: Precision, accel: Accelerator, eff: Efficiency) -> float:
    """Achieved fraction of the precision's peak: 2mnk / (peak * gemm_s). Dimensionless."""
    return shape.flops / (accel.peak_for(precision.value) * gemm_s(shape, precision, accel, eff))


@dataclass(frozen=True, slots=True)
class AttentionShape:
    """The fused-attention kernels of one layer on one device: ``kernels`` launches, each
    iterating ``kv_tokens`` keys per query block."""

    kernels: int
    kv_tokens: float


def attention_shape(plan: Layout, job: Job) -> AttentionShape:
    """cp = 1: one kernel over seq_len keys; ring CP (p2p): cp kernels over seq_len / cp keys
    (one per ring step, load-balanced chunks); all-gather CP: one kernel over seq_len keys."""
    if plan.cp > 1 and plan.cp_comm is CPComm.P2P:
        return AttentionShape(plan.cp, job.seq_len / plan.cp)
    return AttentionShape(1, float(job.seq_len))


def attention_chunk_factor(kv_tokens: float) -> float:
    """Share of its long-sequence rate a fused-attention kernel reaches over ``kv_tokens`` keys:
    L / (L + L_half). Source: ATTENTION_HALF_TOKENS. Dimensionless."""
    return kv_tokens / (kv_tokens + ATTENTION_HALF_TOKENS)


def kernel_fraction(kernel: AttentionKernel, accel: Accelerator) -> float:
    """Rate of ``kernel`` over the generation's fused kernel: FLASH2_FRACTION for flash2,
    FLASH1_FRACTION for flash1, else 1."""
    if kernel is AttentionKernel.FLASH2:
        return FLASH2_FRACTION.get(accel.generation, 1.0)
    if kernel is AttentionKernel.FLASH1:
        return FLASH1_FRACTION.get(accel.generation, 1.0)
    return 1.0


def attention_efficiency(shape: AttentionShape, eff: Efficiency) -> float:
    """Fraction of the BF16 peak the fused attention reaches: attention * L / (L + L_half).
    Source: ATTENTION_HALF_TOKENS. Dimensionless."""
    return eff.attention * attention_chunk_factor(shape.kv_tokens)


def attention_s(
    flops: float,
    shape: AttentionShape,
    accel: Accelerator,
    eff: Efficiency,
    kernel: AttentionKernel = AttentionKernel.FUSED,
) -> float:
    """Forward attention-core time: flops / (bf16 peak * attention_efficiency * kernel_fraction)
    + kernels * overhead. Units: seconds."""
    rate = (
        accel.peak_for(Precision.BF16.value)
        * attention_efficiency(shape, eff)
        * kernel_fraction(kernel, accel)
    )
    return flops / rate + shape.kernels * eff.kernel_overhead_s


def layer_tokens(layer: Layer, plan: Layout, job: Job) -> float:
    """Tokens of one micro-batch ``layer`` runs on, per device: tokens_per_device for sequence
    layers; for vision layers micro_batch * image tokens per sample (job.image_tokens, else the
    layer's default), not split by cp (each cp rank encodes the whole images)."""
    if layer.tokens_per_sample:
        return plan.micro_batch * _image_tokens(layer, job)
    return tokens_per_device(plan, job)


def _image_tokens(layer: Layer, job: Job) -> float:
    """Per-sample tokens of a vision layer: the job's (else the layer's default) image patches,
    divided by the patches the layer merges into one token (the merger)."""
    return (job.image_tokens or layer.tokens_per_sample) / layer.tokens_merged


def layer_seq_len(layer: Layer, job: Job) -> float:
    """The sequence a layer's attention runs over: job.seq_len, or a vision layer's image tokens
    per sample (all patches of a sample treated as one image: an upper bound for several)."""
    return float(_image_tokens(layer, job)) if layer.tokens_per_sample else float(job.seq_len)


def attended_keys(layer: Layer, seq_len: float) -> float:
    """Mean keys one query attends to over a sequence of ``seq_len`` tokens.

    Formula (s = seq_len, continuous in the position p): causal full attention s / 2 (each
    query sees p keys); sliding window w (query sees min(p, w)): s / 2 if s <= w, else
    w - w^2 / (2 s); chunked local attention c (block-diagonal causal, s = k c + r):
    (k c^2 + r^2) / (2 s); bidirectional (ViT): s, or min(w, s) inside windows of w tokens.
    Source: the masks of gpt-oss (openai/gpt-oss gpt_oss/torch/model.py sliding_window),
    Gemma 3 (transformers configuration_gemma3.py), Llama 4 (llama-models models/llama4/model.py
    chunked mask). Units: keys per query.
    """
    s = seq_len
    if not layer.causal:
        return min(layer.window, s) if layer.window else s
    if layer.window and s > layer.window:
        w = layer.window
        return w - w * w / (2 * s)
    if layer.chunk and s > layer.chunk:
        c = layer.chunk
        k, r = divmod(s, c)
        return (k * c * c + r * r) / (2 * s)
    return s * CAUSAL_FRACTION


def attention_core_flops(layer: Layer, tokens: float, seq_len: float, tp: int) -> float:
    """Forward attention-core FLOPs per device: tokens * attn_core * attended_keys / tp.
    Units: FLOPs."""
    return tokens * layer.attn_core_flops_per_token_per_seq * attended_keys(layer, seq_len) / tp


def layer_attention_shape(layer: Layer, plan: Layout, job: Job) -> AttentionShape:
    """attention_shape for sequence layers, its keys per kernel capped at the window / chunk
    (the kernel skips fully masked key blocks); a vision layer: one kernel over its window or
    its image tokens."""
    if layer.tokens_per_sample:
        s = layer_seq_len(layer, job)
        return AttentionShape(1, min(layer.window, s) if layer.window else s)
    shape = attention_shape(plan, job)
    extent = layer.window or layer.chunk
    return AttentionShape(shape.kernels, min(shape.kv_tokens, extent)) if extent else shape


def scan_s(
    flops: float, moved_bytes: float, kernels: int, layer: Layer, accel: Accelerator, eff: Efficiency
) -> float:
    """Time of a Mamba layer's scan and conv kernels (forward or backward): flops / (bf16 peak *
    attention * Q / (Q + ATTENTION_HALF_TOKENS)) + moved_bytes / (HBM * eff_hbm) + kernels *
    overhead, Q the SSD chunk. Assumes: the chunked SSD matmuls (Dao & Gu 2024, arXiv:2405.21060
    Sec. 6) run like a fused attention kernel over Q keys, and the kernels' state and block
    traffic (graph.mamba_layers.ssd_traffic) is not hidden under them (the state-passing and cast
    kernels move bytes only); Mamba-1's selective scan (one kernel, the state kept in SRAM) at
    half the fused attention efficiency (Q = ATTENTION_HALF_TOKENS). Units: seconds."""
    q = layer.scan_chunk or ATTENTION_HALF_TOKENS
    bf16_peak = accel.peak_for(Precision.BF16.value)
    efficiency = attention_efficiency(AttentionShape(kernels, float(q)), eff)
    memory_s = moved_bytes / (accel.hbm_bytes_per_s * eff.hbm)
    return flops / (bf16_peak * efficiency) + memory_s + kernels * eff.kernel_overhead_s


def scan_times(
    layer: Layer, tokens: float, tp: int, accel: Accelerator, eff: Efficiency
) -> tuple[float, float]:
    """(forward, backward) scan_s of a Mamba layer on ``tokens`` tokens, heads split over tp.
    Without the SSD's tallies (Mamba-1's fused scan): backward = 2 x the forward FLOPs, one
    kernel each way. Units: seconds."""
    if not layer.scan_flops_per_token:
        return 0.0, 0.0
    fwd_flops = tokens * layer.scan_flops_per_token / tp
    if not layer.scan_backward_flops_per_token:
        forward = scan_s(fwd_flops, 0.0, 1, layer, accel, eff)
        return forward, scan_s(2.0 * fwd_flops, 0.0, 1, layer, accel, eff)
    forward = scan_s(fwd_flops, tokens * layer.scan_bytes_per_token / tp, SSD_KERNELS, layer, accel, eff)
    backward = scan_s(
        tokens * layer.scan_backward_flops_per_token / tp,
        tokens * layer.scan_backward_bytes_per_token / tp,
        SSD_BACKWARD_KERNELS,
        layer,
        accel,
        eff,
    )
    return forward, backward


def layer_forward(layer: Layer, plan: Layout, job: Job, accel: Accelerator, eff: Efficiency) -> LayerTime:
    """Forward time of ``layer`` for one micro-batch.

    Formula: sum over GEMMs of gemm_s(gemm_shape(g, n, tp)); a Mamba scan's scan_times (its
    own backward; recomputed by full recompute only, not by selective recompute); attention
    core attention_core_flops (n * core * attended_keys / tp) at attention_s(layer shape);
    element-wise n * elems * 2 bytes / (HBM * eff), sharded by tp when SP is on, and MLA's
    query / key / value materialisation (layer.qkv_copy_elems, TP-sharded heads) likewise. n =
    layer_tokens. Backward: dgrad + wgrad per GEMM, dgrad only when ``job.frozen_base`` (LoRA:
    the frozen base weights take no weight gradient). Units: seconds. Assumes: the LM head is
    column-parallel over tp, the embedding lookup is HBM-bound.
    """
    n = layer_tokens(layer, plan, job)
    tp = plan.tp
    gemm_total_s = sum(gemm_s(gemm_shape(g, n, tp), job.precision, accel, eff) for g in layer.gemms)
    scan_fwd_s, scan_bwd_s = scan_times(layer, n, tp, accel, eff)
    attn_s = 0.0
    if layer.attn_core_flops_per_token_per_seq:
        flops = attention_core_flops(layer, n, layer_seq_len(layer, job), tp)
        attn_s = attention_s(flops, layer_attention_shape(layer, plan, job), accel, eff, job.attention_kernel)
    shard = tp if (plan.sequence_parallel or layer.kind is LayerKind.LM_HEAD) else 1
    hbm = accel.hbm_bytes_per_s * eff.hbm
    elementwise_s = n * layer.mem_bound_elems * ACTIVATION_BYTES / shard / hbm
    elementwise_s += n * layer.qkv_copy_elems * ACTIVATION_BYTES / tp / hbm  # MLA's Q, K, V
    return LayerTime(
        gemm_total_s, attn_s, elementwise_s, 0.0 if job.frozen_base else 1.0, scan_fwd_s, scan_bwd_s
    )
