"""Megatron's module-level selective recompute (``--recompute-granularity selective
--recompute-modules M ...``): what each module drops from the stored activations and what it
re-runs in backward.

Source: megatron-core 0.19.2 ``transformer_config.py`` (``recompute_modules``: core_attn, moe_act,
layernorm, mla_up_proj, mlp, moe, shared_experts; default ["core_attn"]) and the modules that read
it: ``transformer_layer.py`` (layernorm: input_layernorm and pre_mlp_layernorm wrapped in
``CheckpointWithoutOutput``, their outputs freed after the next GEMM and rebuilt in backward;
mlp / moe: the whole MLP or MoE layer under ``tensor_parallel.checkpoint``, only its input kept),
``moe/experts.py`` (moe_act: the experts' activation output freed after fc2 and recomputed from
fc1's output), ``multi_latent_attention.py`` (mla_up_proj: the q/kv up-projections and RoPE under
``CheckpointWithoutOutput``, Q, K, V freed after the core attention), ``moe/shared_experts.py``
(shared_experts). The Megatron-Core MoE README ("Memory optimization": selective recompute of
moe_act, layernorm, mla_up_proj is "lightweight"; moe recomputes the whole MoE layer, its
all-to-all included).

``job.recompute_modules`` empty: ``recompute: selective`` is the framework's default policy
(cost/recompute.py: Megatron's core_attn, torchtitan's op SAC, MaxText's minimal). Set, it is
exactly these modules, per layer, per micro-batch (n tokens of the layer, sp = tp with sequence
parallelism; stored bytes as cost/recompute.py counts them: GEMM inputs at
``gemm_input_bytes`` under FP8, where Transformer Engine keeps its own quantised copy):

- core_attn: the s x s scores without flash attention; re-runs the attention core.
- layernorm: the normed input of attention and of the MLP / MoE (h/sp per token at its stored
  bytes); re-runs the norm (2 h element-wise).
- mla_up_proj (MLA layers): Q, K and V (2 heads (d_nope + d_rope) + v_dim, /tp); re-runs what
  ``qkv_up_proj_and_rope_apply`` runs under ``CheckpointWithoutOutput``: the q and kv latent
  RMSNorms fused into the up-projections (TELayerNormColumnParallelLinear with qk_layernorm;
  2 (q_lora + kv_lora) element-wise), the q_up and kv_up GEMMs, the RoPE and the query / key /
  value materialisation (2 (heads d_rope + d_rope) + Layer.qkv_copy_elems, /tp): the core
  attention's inputs are rebuilt whole, not only the GEMMs' outputs.
- moe_act: the routed experts' activation output (f per routed copy /etp, the fc2 input);
  re-runs the activation (up + f elements per copy).
- shared_experts: the shared experts' fc1 output and activation output; re-runs their GEMMs.
- mlp (dense MLP layers): everything the layer stores but its input (the norm input and the
  normed input, 2 h/sp); re-runs the layer.
- moe (MoE layers): everything but the norm input and the normed input, the routed experts'
  activations too; re-runs the layer, its dispatch and combine (cost/block.py charges the
  forward all-to-all again, as for full recompute) and host launches.

Assumes: a module that does not exist in a layer (mla_up_proj on GQA attention, moe on a dense
MLP) does nothing there, as in Megatron (the flag only wraps existing submodules).
"""

from __future__ import annotations

from paraplan.cost.compute import (
    ACTIVATION_BYTES,
    GEMM_INPUT_BYTES,
    LayerTime,
    gemm_input_bytes,
    gemm_s,
    gemm_shape,
    layer_tokens,
    tokens_per_device,
)
from paraplan.cost.ep import expert_stored_bytes
from paraplan.cost.plan import Job, Layout, RecomputeModule
from paraplan.graph import Layer, LayerKind
from paraplan.hardware import Accelerator, Efficiency

__all__ = [
    "RecomputeModule",
    "MEGATRON_DEFAULT_MODULES",
    "modules_saved_bytes",
    "modules_recompute_s",
    "recomputes_moe_layer",
]


MEGATRON_DEFAULT_MODULES = (RecomputeModule.CORE_ATTN,)
"""Megatron's default ``--recompute-modules`` (transformer_config.py: ["core_attn"])."""

_MLA_UP = ("q_up", "kv_up")


def _sp(plan: Layout) -> int:
    return plan.tp if plan.sequence_parallel else 1


def _fp8(job: Job) -> bool:
    return job.precision in GEMM_INPUT_BYTES


def _normed_bytes(layer: Layer, job: Job) -> float:
    """Stored bytes of one element of a layer's normed input: a GEMM input (FP8 copy) where the
    layer counts its h among its GEMM inputs, else bf16."""
    return gemm_input_bytes(job.precision) if _fp8(job) and layer.act_sp_gemm_elems else ACTIVATION_BYTES


def _expert_copies(layer: Layer, plan: Layout, job: Job) -> float:
    """Routed copies a device stores at the mean load (cost/ep.py expert_stored_bytes)."""
    assert layer.experts is not None
    return tokens_per_device(plan, job) * layer.experts.top_k * plan.expert_tp / plan.tp


def _mla_rope_elems(layer: Layer) -> float:
    """The rotary's elements per token of an MLA layer, 2 (heads d_rope + d_rope), as
    graph/decoder_layers.py counts them: the q projection's output less the query / key / value
    dims the copy counts. Read from the GEMMs: q_up's out_dim is heads (nope + rope), kv_up's
    heads (nope + v), proj's in_dim heads v."""
    q = next(g for g in layer.gemms if g.name in ("q_up", "q")).out_dim
    kv = next(g for g in layer.gemms if g.name == "kv_up").out_dim
    v = next(g for g in layer.gemms if g.name == "proj").in_dim
    heads_rope = q - (kv - v)  # heads (nope + rope) - heads nope
    rope = next(g for g in layer.gemms if g.name == "kv_down").out_dim - _kv_lora(layer)
    return 2.0 * (heads_rope + rope)


def _kv_lora(layer: Layer) -> int:
    return next(g for g in layer.gemms if g.name == "kv_up").in_dim


def _has_mla_up(layer: Layer) -> bool:
    return any(g.name in _MLA_UP for g in layer.gemms)


def modules_saved_bytes(layer: Layer, plan: Layout, job: Job, modules: frozenset[RecomputeModule]) -> float:
    """Bytes ``modules`` drop from what ``layer`` stores with no recompute, per micro-batch, per
    device (module docstring). Units: bytes."""
    n = layer_tokens(layer, plan, job)
    sp, tp = _sp(plan), plan.tp
    h = layer.gemms[0].in_dim if layer.gemms else 0
    saved = 0.0
    kind = layer.kind
    whole = (kind is LayerKind.MLP and RecomputeModule.MLP in modules) or (
        kind is LayerKind.MOE and RecomputeModule.MOE in modules
    )
    if whole:  # everything but the norm input and the normed input
        stored = n * (layer.act_tp_elems / tp + layer.act_sp_elems / sp) * ACTIVATION_BYTES
        if _fp8(job):
            gemm = layer.act_tp_gemm_elems / tp + layer.act_sp_gemm_elems / sp
            stored -= n * gemm * (ACTIVATION_BYTES - gemm_input_bytes(job.precision))
        kept = n * (h / sp) * (ACTIVATION_BYTES + _normed_bytes(layer, job))
        saved += max(0.0, stored - kept)
        if layer.experts is not None:
            saved += expert_stored_bytes(layer.experts, plan, job)
        return saved
    if RecomputeModule.LAYERNORM in modules and kind in (LayerKind.ATTENTION, LayerKind.MLP, LayerKind.MOE):
        saved += n * h / sp * _normed_bytes(layer, job)
    if RecomputeModule.MLA_UP_PROJ in modules and _has_mla_up(layer):
        # Q from q_up with a q LoRA, else from the q projection (Megatron's MLA runs either
        # inside qkv_up_proj_and_rope_apply)
        qk = next(g for g in layer.gemms if g.name in ("q_up", "q")).out_dim
        v_dim = next(g for g in layer.gemms if g.name == "proj").in_dim
        saved += n * (2 * qk + v_dim) / tp * ACTIVATION_BYTES
    if RecomputeModule.SHARED_EXPERTS in modules and kind is LayerKind.MOE and layer.act_tp_elems:
        saved += n * layer.act_tp_elems / tp * ACTIVATION_BYTES
    if RecomputeModule.MOE_ACT in modules and layer.experts is not None:
        fc2 = layer.experts.gemms[-1]
        f = fc2.in_dim / plan.expert_tp
        saved += _expert_copies(layer, plan, job) * f * gemm_input_bytes(job.precision)
    return saved


def modules_recompute_s(
    layer: Layer,
    t: LayerTime,
    plan: Layout,
    job: Job,
    accel: Accelerator,
    eff: Efficiency,
    modules: frozenset[RecomputeModule],
) -> float:
    """Forward work ``modules`` re-run in ``layer``'s backward, one micro-batch (module docstring;
    ``t`` is the layer's forward, routed experts included). Units: seconds."""
    kind = layer.kind
    if (kind is LayerKind.MLP and RecomputeModule.MLP in modules) or (
        kind is LayerKind.MOE and RecomputeModule.MOE in modules
    ):
        return t.total_s
    n = layer_tokens(layer, plan, job)
    hbm = accel.hbm_bytes_per_s * eff.hbm
    h = layer.gemms[0].in_dim if layer.gemms else 0
    out = 0.0
    if RecomputeModule.CORE_ATTN in modules:
        out += t.attention_s
    if RecomputeModule.LAYERNORM in modules and kind in (LayerKind.ATTENTION, LayerKind.MLP, LayerKind.MOE):
        out += n * 2 * h * ACTIVATION_BYTES / _sp(plan) / hbm
    if RecomputeModule.MLA_UP_PROJ in modules and _has_mla_up(layer):
        # q_up and kv_up, or without a q LoRA the q projection Megatron runs in their place
        ups = [g for g in layer.gemms if g.name in (*_MLA_UP, "q")]
        out += sum(gemm_s(gemm_shape(g, n, plan.tp), job.precision, accel, eff) for g in ups)
        latents = sum(g.in_dim for g in ups if g.name in _MLA_UP)  # their latent norms (not tp-split)
        heads_rope = _mla_rope_elems(layer)
        out += n * (2 * latents + (heads_rope + layer.qkv_copy_elems) / plan.tp) * ACTIVATION_BYTES / hbm
    if RecomputeModule.SHARED_EXPERTS in modules and kind is LayerKind.MOE:
        out += sum(
            gemm_s(gemm_shape(g, n, plan.tp), job.precision, accel, eff)
            for g in layer.gemms
            if g.name.startswith("shared")
        )
    if RecomputeModule.MOE_ACT in modules and layer.experts is not None:
        fc1, fc2 = layer.experts.gemms[0], layer.experts.gemms[-1]
        elems = (fc1.out_dim + fc2.in_dim) / plan.expert_tp
        out += _expert_copies(layer, plan, job) * elems * ACTIVATION_BYTES / hbm
    return out


def recomputes_moe_layer(modules: frozenset[RecomputeModule]) -> bool:
    """Whether ``modules`` re-run whole MoE layers, their all-to-all included."""
    return RecomputeModule.MOE in modules
