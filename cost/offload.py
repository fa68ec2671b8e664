"""Megatron's fine-grained activation offloading (``--fine-grained-activation-offloading
--offload-modules M ...``, ``job.offload_modules``): which saved activations leave the GPU, what
stays, and what the copies cost.

Source: megatron-core 0.19.2 ``transformer_config.py`` (``fine_grained_activation_offloading``,
``offload_modules``: "offload the input of the specified modules to the CPU"; attn_norm,
qkv_linear, core_attn, attn_proj, mlp_norm, expert_fc1, moe_act, fused_group_mlp; attn_proj only
with core_attn; none of expert_fc1 / moe_act with ``moe`` in ``--recompute-modules``) and
``pipeline_parallel/fine_grained_activation_offload.py`` (``PipelineOffloadManager``,
``ChunkOffloadHandler``): each module's saved inputs of a layer form one group; at the end of the
group's forward the group is copied device-to-host on a stream of its own (``d2h_stream``) and its
device memory is released once the copy ends; in backward the next group is copied back on an
``h2d_stream`` one group ahead of the compute that needs it (``bulk_reload``); after the warm-up
iteration the last group of each name of the first backward chunk is kept on the device
(``_offload_margin``, "so that the reloading won't block the main stream").

What stays on the device, per stage: the offloaded inputs of one layer (the group in flight: the
one being copied out at the peak, the one reloaded ahead in backward, the margin group), added
once as the block's transient (``BlockCost.working_bytes``); every other in-flight layer and
micro-batch keeps its stored activations less the offloaded ones (``offloaded_bytes``). Per layer,
per micro-batch, per device (n tokens of the layer, sp = tp with sequence parallelism, stored
bytes as cost/recompute.py counts them; a module's input that the recompute mode does not store
moves nothing):

- attn_norm: the attention norm's input, the block input (n h/sp x 2 B);
- qkv_linear: the QKV (MLA: q / kv down) projections' input, the normed input (n h/sp at the GEMM
  input bytes); nothing under ``layernorm`` recompute, which frees it;
- core_attn: Q, K and V (GQA: n (q + 2 kv)/tp; MLA: the stored attention activations less the
  output projection's input) x 2 B; nothing under ``mla_up_proj`` recompute on MLA layers;
- attn_proj: the output projection's input (n q/tp at the GEMM input bytes);
- mlp_norm: the MLP / MoE norm's input (n h/sp x 2 B);
- expert_fc1: the routed copies' fc1 input (copies x d at the GEMM input bytes,
  cost/recompute_modules.py's copies);
- moe_act: the routed copies' fc1 output, the activation's input (copies x up/etp x 2 B).

Time: the bytes a block offloads cross the device-to-host link once in forward and once back in
backward (``host_link_bytes_per_s``, hardware/data/storage.yaml, one way per GPU), on streams of
their own beside the compute: exposed = max(0, bytes / link - the block's forward) + max(0,
bytes / link - the block's backward). Assumes: the copy engines run at the link's one-way figure
and do not slow the compute or the dispatcher's traffic; Megatron's ``min_offloaded_tensor_size``
(1 MiB) leaves out no tensor of these sizes; ``activation_offload_fraction`` 1 and
``delta_offload_bytes_across_pp_ranks`` 0 (the defaults). Megatron's fused_group_mlp (Transformer
Engine's op fuser) is not offered.
"""

from __future__ import annotations

from collections.abc import Iterable

from paraplan.cost.compute import ACTIVATION_BYTES, gemm_input_bytes, layer_tokens, tokens_per_device
from paraplan.cost.plan import Job, Layout, OffloadModule, Recompute, RecomputeModule
from paraplan.graph import Layer, LayerKind
from paraplan.hardware import Accelerator
from paraplan.hardware.capacity import host_link_bytes_per_s

__all__ = [
    "OffloadModule",
    "offloaded_bytes",
    "block_offload_bytes",
    "check_offload_modules",
    "offload_exposed_s",
    "offload_link_bytes_per_s",
]

_MLA_UP = ("q_up", "kv_up")


def _sp(plan: Layout) -> int:
    return plan.tp if plan.sequence_parallel else 1


def _recomputes(job: Job, recompute: Recompute, module: RecomputeModule) -> bool:
    return recompute is Recompute.SELECTIVE and module in job.recompute_modules


def _attention_bytes(layer: Layer, plan: Layout, job: Job, recompute: Recompute) -> float:
    """Offloaded inputs of an attention layer's modules (module docstring)."""
    mods, n, tp = job.offload_modules, layer_tokens(layer, plan, job), plan.tp
    h = layer.gemms[0].in_dim
    out = 0.0
    if OffloadModule.ATTN_NORM in mods:
        out += n * h / _sp(plan) * ACTIVATION_BYTES
    if OffloadModule.QKV_LINEAR in mods and not _recomputes(job, recompute, RecomputeModule.LAYERNORM):
        out += n * h / _sp(plan) * gemm_input_bytes(job.precision)
    proj = next((g for g in layer.gemms if g.name == "proj"), None)
    proj_in = proj.in_dim if proj is not None else 0
    mla = any(g.name in _MLA_UP for g in layer.gemms)
    if OffloadModule.CORE_ATTN in mods and not (
        mla and _recomputes(job, recompute, RecomputeModule.MLA_UP_PROJ)
    ):
        out += n * (layer.act_tp_elems - proj_in) / tp * ACTIVATION_BYTES
    if OffloadModule.ATTN_PROJ in mods:
        out += n * proj_in / tp * gemm_input_bytes(job.precision)
    return out


def _mlp_bytes(layer: Layer, plan: Layout, job: Job) -> float:
    """Offloaded inputs of an MLP / MoE layer's modules (module docstring)."""
    mods = job.offload_modules
    out = 0.0
    if OffloadModule.MLP_NORM in mods and layer.gemms:
        out += layer_tokens(layer, plan, job) * layer.gemms[0].in_dim / _sp(plan) * ACTIVATION_BYTES
    if layer.experts is None:
        return out
    copies = tokens_per_device(plan, job) * layer.experts.top_k * plan.expert_tp / plan.tp
    fc1 = layer.experts.gemms[0]
    if OffloadModule.EXPERT_FC1 in mods:
        out += copies * layer.experts.act_gathered_elems * gemm_input_bytes(job.precision)
    if OffloadModule.MOE_ACT in mods:
        out += copies * fc1.out_dim / plan.expert_tp * ACTIVATION_BYTES
    return out


def offloaded_bytes(layer: Layer, plan: Layout, job: Job, recompute: Recompute) -> float:
    """Bytes of ``layer``'s stored activations that ``job.offload_modules`` move to host memory,
    per micro-batch, per device (module docstring); 0 under FULL recompute (the layer keeps only
    its input, outside every module) and for layers of other kinds. Units: bytes."""
    if not job.offload_modules or recompute is Recompute.FULL:
        return 0.0
    if layer.kind is LayerKind.ATTENTION:
        return _attention_bytes(layer, plan, job, recompute)
    if layer.kind in (LayerKind.MLP, LayerKind.MOE):
        return _mlp_bytes(layer, plan, job)
    return 0.0


def block_offload_bytes(
    layers: list[Layer], plan: Layout, job: Job, stored: dict[Recompute, float]
) -> dict[Recompute, float]:
    """Per recompute mode, the bytes a block's ``layers`` offload (offloaded_bytes), at most what
    the mode stores (``stored``); {} without job.offload_modules. Units: bytes."""
    if not job.offload_modules:
        return {}
    return {r: min(stored[r], sum(offloaded_bytes(ly, plan, job, r) for ly in layers)) for r in Recompute}


def check_offload_modules(offload: Iterable[OffloadModule], recompute: Iterable[RecomputeModule]) -> None:
    """Megatron's own rules for --offload-modules (megatron-core 0.19.2 transformer_config.py
    __post_init__), which are this model's too: attn_proj only with core_attn (its input is the
    core attention's output, which core_attn's backward needs), and no expert_fc1 / moe_act while
    recompute module ``moe`` recomputes the whole MoE layer (nothing inside it is stored to move);
    ValueError naming the fields."""
    offload, recompute = set(offload), set(recompute)
    if OffloadModule.ATTN_PROJ in offload and OffloadModule.CORE_ATTN not in offload:
        raise ValueError(
            "job.offload_modules=[attn_proj] needs core_attn too: attn_proj's input is the core "
            "attention's output, which core_attn's backward needs (Megatron-Core refuses it alone); "
            "add core_attn or remove attn_proj"
        )
    inside = sorted({OffloadModule.EXPERT_FC1, OffloadModule.MOE_ACT} & offload)
    if inside and RecomputeModule.MOE in recompute:
        raise ValueError(
            f"job.offload_modules=[{', '.join(inside)}] with job.recompute_modules containing moe: the "
            "whole MoE layer is recomputed, so nothing inside it is stored to offload (Megatron-Core "
            "refuses the pair); remove moe from job.recompute_modules or these from job.offload_modules"
        )


def offload_link_bytes_per_s(accel: Accelerator) -> float:
    """One GPU's one-way device-to-host bandwidth (hardware/data/storage.yaml host_link_GBps);
    ValueError naming job.offload_modules where the data has no figure (TPUs)."""
    try:
        return host_link_bytes_per_s(accel.key)
    except ValueError:
        raise ValueError(
            f"job.offload_modules: no device-to-host link figure for {accel.key!r} "
            "(hardware/data/storage.yaml host_link_GBps); leave job.offload_modules empty"
        ) from None


def offload_exposed_s(bytes_: float, forward_s: float, backward_s: float, accel: Accelerator) -> float:
    """Exposed time of one block's offload, one micro-batch: max(0, bytes / link - forward) +
    max(0, bytes / link - backward), link = offload_link_bytes_per_s (module docstring).
    Units: seconds."""
    if bytes_ <= 0.0:
        return 0.0
    copy_s = bytes_ / offload_link_bytes_per_s(accel)
    return max(0.0, copy_s - forward_s) + max(0.0, copy_s - backward_s)
