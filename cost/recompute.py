"""Activation recomputation: what each mode stores and what it recomputes.

Source: Korthikanti et al. 2022 (arXiv:2205.05198) Sec. 4-5. Per layer, per micro-batch:
none stores everything (s*b*h*(34 + 5*a*s/h) bytes for a GPT block, /t with TP+SP);
selective recomputes the attention core (drops the 5*a*s^2*b term: nothing left to drop when a
fused flash kernel never materialises the scores); full keeps only the block input (2*s*b*h bytes,
/t with SP) and re-runs the whole forward in backward.

On a TPU (``Accelerator.is_tpu``) SELECTIVE is MaxText's ``remat_policy=minimal`` (the policy
paraplan's MaxText export writes for it): ``jax.checkpoint_policies.save_only_these_names`` over
the weight-matmul outputs (query/key/value/qkv_proj, out_proj, mlpwi, mlpwo; MaxText 0.2.5
``layers/nnx_decoders.py`` ``minimal_policy``; at the Dec-2023 commit of the calibration rows,
``checkpoint_dots_with_no_batch_dims``, the same set). JAX keeps a saveable value only where the
backward needs it, so a sub-layer (attention, MLP) keeps its residual-stream input (the scan
carry, or the sum rebuilt from the carry and the saved out_proj) and the outputs of its GEMMs
other than the row-parallel output projection that feeds the residual add; norms, activation
functions and the attention core (flash) are recomputed. Per token and sub-layer:
h/t + sum(out_dim / (t if column-parallel else 1)), activation sharding over MaxText's tensor axis
(logical rule ``activation_embed: tensor``) playing the part of SP. Checked against XLA: a
MaxText-shaped decoder compiled by jax keeps exactly these bytes per layer under ``minimal`` and
exactly the block input under ``full`` (tests/cost/test_xla_memory_oracle.py).

torchtitan's op-level selective checkpointing (``job.selective_policy: torchtitan_op``; torchtitan
``activation_checkpoint.mode = "selective"``, ``selective_ac_option = "op"``,
torchtitan/distributed/activation_checkpoint.py ``_op_sac_save_list``) is another policy under the
same word: each transformer block is checkpointed with a policy that saves the outputs of
attention (SDPA: output and its fp32 logsumexp) and of every other ``aten.mm`` in the block's
forward order (the 1st, 3rd, ...: of Llama's wq, wk, wv, wo, w1, w3, w2 the wq, wv, w1 and w2
outputs) and recomputes the rest; the checkpoint also keeps the block's input. Per token:
h/sp + q/t + kv/t + q/t (SDPA out) + 2 heads/t (logsumexp, fp32) + f/t + h (w2's output before
the TP reduction; tp = 1 in the published runs) elements of 2 B. It is priced for dense GQA blocks
(a q/k/v attention and a gated MLP); other layers (MoE, MLA, Mamba) keep Megatron's selective.
"""

from __future__ import annotations

from paraplan.cost.compute import (
    ACTIVATION_BYTES,
    GEMM_INPUT_BYTES,
    LayerTime,
    gemm_input_bytes,
    layer_seq_len,
    layer_tokens,
    tokens_per_device,
)
from paraplan.cost.ep import expert_stored_bytes
from paraplan.cost.plan import Job, Layout, Recompute, SelectivePolicy
from paraplan.cost.recompute_modules import modules_saved_bytes
from paraplan.graph import Layer, LayerKind

__all__ = [
    "stored_activation_bytes",
    "tpu_minimal_stored_bytes",
    "torchtitan_op_sac_stored_bytes",
    "block_input_bytes",
    "recompute_forward_s",
]

QUADRATIC_ELEMS_PER_HEAD = 2.5  # softmax out (2 B), dropout mask (1 B), dropout out (2 B) = 5 B


def stored_activation_bytes(
    layer: Layer, plan: Layout, job: Job, recompute: Recompute, *, is_tpu: bool = False
) -> float:
    """Bytes one layer keeps for backward, per micro-batch, per device (not counting FULL's input).

    Formula: n * (act_tp/tp + act_sp/(tp if SP else 1)) * 2 B, plus n*2.5*a*s/tp elements of
    attention scores without flash attention and without selective recompute; GEMM inputs take
    1 B instead of 2 under FP8; routed experts add ep.expert_stored_bytes. FULL stores none.
    n = compute.layer_tokens (image tokens for vision layers). Sliding-window and chunked layers
    store as much per token as full attention (with flash attention nothing grows with the
    keys; without it the unfused kernel keeps the masked s x s scores: no saving counted).
    On a TPU, SELECTIVE is MaxText's ``minimal`` policy (tpu_minimal_stored_bytes). With
    ``job.recompute_modules`` set, SELECTIVE is Megatron's module-level recompute: NONE's bytes
    less what the modules drop (cost/recompute_modules.py).
    """
    if recompute is Recompute.FULL:
        return 0.0
    if recompute is Recompute.SELECTIVE and job.recompute_modules:
        none = stored_activation_bytes(layer, plan, job, Recompute.NONE)
        return max(0.0, none - modules_saved_bytes(layer, plan, job, job.recompute_modules))
    if is_tpu and recompute is Recompute.SELECTIVE:
        return tpu_minimal_stored_bytes(layer, plan, job)
    if recompute is Recompute.SELECTIVE and job.selective_policy is SelectivePolicy.TORCHTITAN_OP:
        op = torchtitan_op_sac_stored_bytes(layer, plan, job)
        if op is not None:
            return op
    n = layer_tokens(layer, plan, job)
    sp_shard = plan.tp if plan.sequence_parallel else 1
    elems = layer.act_tp_elems / plan.tp + layer.act_sp_elems / sp_shard
    if layer.act_quadratic_heads and not job.flash_attention and recompute is Recompute.NONE:
        keys = layer_seq_len(layer, job) / (1 if layer.tokens_per_sample else plan.cp)
        elems += QUADRATIC_ELEMS_PER_HEAD * layer.act_quadratic_heads * keys / plan.tp
    stored = n * elems * ACTIVATION_BYTES
    if job.precision in GEMM_INPUT_BYTES:
        gemm_inputs = layer.act_tp_gemm_elems / plan.tp + layer.act_sp_gemm_elems / sp_shard
        stored -= n * gemm_inputs * (ACTIVATION_BYTES - gemm_input_bytes(job.precision))
    if layer.experts is not None:
        stored += expert_stored_bytes(layer.experts, plan, job)
    return stored


def tpu_minimal_stored_bytes(layer: Layer, plan: Layout, job: Job) -> float:
    """Bytes one layer keeps under MaxText's ``remat_policy=minimal`` (module docstring).

    Formula: n * (h/sp + sum over GEMMs not row-parallel of out_dim/(tp if column-parallel else 1))
    * 2 B for a layer with GEMMs (none for norm-only layers); routed experts add
    ep.expert_stored_bytes. sp = tp with sequence parallelism, else 1.
    Source: MaxText 0.2.5 layers/nnx_decoders.py (minimal_policy), JAX jax.checkpoint policies.
    Assumes: the saved GEMM outputs stay in bf16 (MaxText's activation dtype) under FP8 too.
    """
    if not layer.gemms:
        return 0.0
    sp_shard = plan.tp if plan.sequence_parallel else 1
    elems = layer.gemms[0].in_dim / sp_shard  # the sub-layer's residual-stream input
    for g in layer.gemms:
        if g.tp_split != "in":
            elems += g.out_dim / (plan.tp if g.tp_split == "out" else 1)
    stored = layer_tokens(layer, plan, job) * elems * ACTIVATION_BYTES
    if layer.experts is not None:
        stored += expert_stored_bytes(layer.experts, plan, job)
    return stored


def torchtitan_op_sac_stored_bytes(layer: Layer, plan: Layout, job: Job) -> float | None:
    """Bytes a dense GQA attention or gated-MLP layer keeps under torchtitan's op-level SAC
    (module docstring), or None for a layer the policy is not priced for (routed experts, MLA,
    other kinds: they keep Megatron's selective).

    Formula: attention n * (h/sp + 2 q/t + kv/t + 2 heads/t) * 2 B (the block input counted here),
    q = the output projection's input, kv = (qkv out - q) / 2, heads = q / head_dim;
    gated MLP n * (f/t + h) * 2 B, f = the down projection's input. FP8 keeps these at 2 B (the
    saved matmul outputs are bf16).
    Source: torchtitan/distributed/activation_checkpoint.py (_op_sac_save_list, mm_count % 2).
    """
    if layer.experts is not None or len(layer.gemms) != 2:
        return None
    first, last = layer.gemms
    n = layer_tokens(layer, plan, job)
    sp_shard = plan.tp if plan.sequence_parallel else 1
    if layer.kind is LayerKind.ATTENTION and first.name == "qkv" and layer.act_quadratic_heads:
        q = last.in_dim
        kv = (first.out_dim - q) / 2
        heads = layer.act_quadratic_heads
        elems = first.in_dim / sp_shard + (2 * q + kv + 2 * heads) / plan.tp
        return n * elems * ACTIVATION_BYTES
    if layer.kind is LayerKind.MLP and first.out_dim == 2 * last.in_dim:
        return n * (last.in_dim / plan.tp + last.out_dim) * ACTIVATION_BYTES
    return None


def block_input_bytes(hidden: int, plan: Layout, job: Job) -> float:
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
