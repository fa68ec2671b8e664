"""Compute time of one layer for one micro-batch on one device.

A GEMM of W FLOPs takes ``W / (peak * eff) + overhead``: the fixed overhead (launch, wave tail) is
what makes small per-device GEMMs inefficient (fits the cuBLAS m=n=k sweeps of hardware.json,
``gemm_efficiency.cublaslt_square_sweeps``, within ~10% from 2048 up). Fused attention runs at the
BF16 peak times ``attention`` efficiency; element-wise work is HBM-bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.cost.plan import Job, Plan, Precision
from paraplan.graph import Layer, LayerKind
from paraplan.hardware import Accelerator, Efficiency

__all__ = ["LayerTime", "tokens_per_device", "layer_forward", "BACKWARD_GEMM_FACTOR",
           "BACKWARD_ATTENTION_FACTOR", "ACTIVATION_BYTES", "GEMM_INPUT_BYTES", "gemm_input_bytes"]

ACTIVATION_BYTES = 2  # bf16/fp16 activations (FP8 runs keep activations in bf16: Transformer Engine)
BACKWARD_GEMM_FACTOR = 2.0  # dgrad + wgrad, each the forward's FLOPs (Narayanan et al. 2021 Sec 5.1)
BACKWARD_ATTENTION_FACTOR = 2.5  # flash-attention backward / forward FLOPs (Dao 2023, FA2 Sec 3.1)
CAUSAL_FRACTION = 0.5  # causal masking skips half the score blocks (fused kernels)
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
    """Forward time of one layer, one micro-batch, split by resource. Units: seconds."""

    gemm_s: float
    attention_s: float
    elementwise_s: float

    @property
    def total_s(self) -> float:
        return self.gemm_s + self.attention_s + self.elementwise_s

    @property
    def forward_backward_s(self) -> float:
        return self.total_s + self.backward_s()

    def backward_s(self) -> float:
        return (BACKWARD_GEMM_FACTOR * self.gemm_s
                + BACKWARD_ATTENTION_FACTOR * self.attention_s
                + 2.0 * self.elementwise_s)


def tokens_per_device(plan: Plan, job: Job) -> float:
    """Tokens of one micro-batch a device holds: micro_batch * seq_len / cp."""
    return plan.micro_batch * job.seq_len / plan.cp


def layer_forward(layer: Layer, plan: Plan, job: Job, accel: Accelerator,
                  eff: Efficiency) -> LayerTime:
    """Forward time of ``layer`` for one micro-batch.

    Formula: sum over GEMMs of n*flops_per_token/tp / (peak*eff) + overhead;
    attention core n * 4*q_dim * seq * 1/2 (causal) / tp at the BF16 peak;
    element-wise n * elems * 2 bytes / (HBM * eff), sharded by tp when SP is on.
    Units: seconds. Assumes: the LM head is column-parallel over tp, the embedding lookup is HBM-bound.
    """
    n = tokens_per_device(plan, job)
    tp = plan.tp
    gemm_peak = accel.peak_for(job.precision.value)
    gemm_eff = eff.gemm(job.precision.value)
    gemm_s = sum(
        n * g.flops_per_token / tp / (gemm_peak * gemm_eff) + eff.kernel_overhead_s
        for g in layer.gemms
    )
    attention_s = 0.0
    if layer.attn_core_flops_per_token_per_seq:
        bf16_peak = accel.peak_for(Precision.BF16.value)
        flops = n * layer.attn_core_flops_per_token_per_seq * job.seq_len * CAUSAL_FRACTION / tp
        attention_s = flops / (bf16_peak * eff.attention) + eff.kernel_overhead_s
    shard = tp if (plan.sequence_parallel or layer.kind is LayerKind.LM_HEAD) else 1
    elementwise_s = n * layer.mem_bound_elems * ACTIVATION_BYTES / shard / (
        accel.hbm_bytes_per_s * eff.hbm
    )
    return LayerTime(gemm_s, attention_s, elementwise_s)
