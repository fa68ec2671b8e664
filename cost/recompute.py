"""Activation recomputation: what each mode stores and what it recomputes.

Source: Korthikanti et al. 2022 (arXiv:2205.05198) Sec. 4-5. Per layer, per micro-batch:
none stores everything (s*b*h*(34 + 5*a*s/h) bytes for a GPT block, /t with TP+SP);
selective recomputes the attention core (drops the 5*a*s^2*b term: nothing left to drop when a
fused flash kernel never materialises the scores); full keeps only the block input (2*s*b*h bytes,
/t with SP) and re-runs the whole forward in backward.
"""

from __future__ import annotations

from paraplan.cost.compute import (
    ACTIVATION_BYTES,
    GEMM_INPUT_BYTES,
    LayerTime,
    gemm_input_bytes,
    tokens_per_device,
)
from paraplan.cost.ep import expert_stored_bytes
from paraplan.cost.plan import Job, Plan, Recompute
from paraplan.graph import Layer

__all__ = ["stored_activation_bytes", "block_input_bytes", "recompute_forward_s"]

QUADRATIC_ELEMS_PER_HEAD = 2.5  # softmax out (2 B), dropout mask (1 B), dropout out (2 B) = 5 B


def stored_activation_bytes(layer: Layer, plan: Plan, job: Job, recompute: Recompute) -> float:
    """Bytes one layer keeps for backward, per micro-batch, per device (not counting FULL's input).

    Formula: n * (act_tp/tp + act_sp/(tp if SP else 1)) * 2 B, plus n*2.5*a*s/tp elements of
    attention scores without flash attention and without selective recompute; GEMM inputs take
    1 B instead of 2 under FP8; routed experts add ep.expert_stored_bytes. FULL stores none.
    """
    if recompute is Recompute.FULL:
        return 0.0
    n = tokens_per_device(plan, job)
    sp_shard = plan.tp if plan.sequence_parallel else 1
    elems = layer.act_tp_elems / plan.tp + layer.act_sp_elems / sp_shard
    if layer.act_quadratic_heads and not job.flash_attention and recompute is Recompute.NONE:
        elems += QUADRATIC_ELEMS_PER_HEAD * layer.act_quadratic_heads * job.seq_len / plan.cp / plan.tp
    stored = n * elems * ACTIVATION_BYTES
    if job.precision in GEMM_INPUT_BYTES:
        gemm_inputs = layer.act_tp_gemm_elems / plan.tp + layer.act_sp_gemm_elems / sp_shard
        stored -= n * gemm_inputs * (ACTIVATION_BYTES - gemm_input_bytes(job.precision))
    if layer.experts is not None:
        stored += expert_stored_bytes(layer.experts, plan, job)
    return stored


def block_input_bytes(hidden: int, plan: Plan, job: Job) -> float:
    """Checkpointed block input under FULL recompute: n * h * 2 B (/tp with SP)."""
    sp_shard = plan.tp if plan.sequence_parallel else 1
    return tokens_per_device(plan, job) * hidden * ACTIVATION_BYTES / sp_shard


def recompute_forward_s(t: LayerTime, recompute: Recompute) -> float:
    """Extra forward work in backward: 0, the attention core, or the whole forward."""
    if recompute is Recompute.FULL:
        return t.total_s
    if recompute is Recompute.SELECTIVE:
        return t.attention_s
    return 0.0
