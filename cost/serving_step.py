"""Time of one engine step of a serving worker: decode tokens and prefill tokens in one batch.

A step runs, on every GPU of a worker stage (cost/kv.py ``WorkerShape``), the model's layers on
``T = decode_seqs + prefill_tokens`` tokens (continuous batching with chunked prefill mixes both:
Agrawal et al., Sarathi-Serve, OSDI'24, Sec. 4; Yu et al., Orca, OSDI'22):

- GEMMs (cost/serving_gemm.py): the roofline of cost/compute.py ``gemm_s`` per device shape,
  max(2mnk / (peak_p * eff_p), (k n w_B + m k a_B + m n a_B) / (HBM * eff_hbm)) + a kernel
  overhead; m = the step's tokens on the rank (decode: memory-bound weight reads; prefill:
  compute-bound), w_B the stored weight bytes (fp8 / nvfp4 checkpoints read fewer bytes and run
  the low-precision tensor-core rate where the part has it, weight-only otherwise), eff_p the
  part's measured serving-kernel rate of that precision (else the generation's MAMF prior) times
  ``gemm_fraction`` (``serving_efficiency``),
  eff_hbm its fitted HBM fraction (hardware/data/efficiency.yaml). Captured CUDA graphs replace
  the launch part of the overhead with ``graph_kernel_overhead`` (hardware/data/serving.yaml).
- Routed experts (cost/serving_gemm.py ``experts_s``): the step's T top_k copies spread over ep
  groups (the busiest one carries ``moe_decode_imbalance`` times the mean c copies: the extra
  tokens go to the experts it already streams), c copies over its E_g experts touch
  E_g (1 - (1 - 1/E_g)^c) of them (expected distinct experts hit, uniform routing) and read only
  their weights; one grouped-GEMM kernel per projection, its compute at ``moe_gemm_efficiency``
  of the dense rate times m / (m + m_half) at m tokens per expert (tile padding and pipeline
  fill, ``grouped_gemm_row_fraction``, DeepGEMM's grouped-GEMM rates; the weight stream at small
  m stays at the HBM roofline). An engine whose MoE kernels pick a row tile near the tokens per
  expert pads m to whole tiles instead (``moe_tile_rows``, read in vLLM 0.15.1 and SGLang 0.5.9;
  on for vLLM by default, docs/serving_model.md Sec. 6.0e-6.0f).
- Attention core: decode reads each sequence's KV (cost/kv.py bytes per token) at HBM speed, or
  its FLOPs at the fused-attention rate, whichever is longer (FlashDecoding / FlashInfer decode
  kernels are memory-bound at these shapes); MLA decode runs weight-absorbed (DeepSeek-V2 Sec.
  2.1.2: per key 2 (kv_lora + rope) + 2 kv_lora FLOPs per head). Prefill is cost/compute.py
  ``attention_s`` over ``attended_keys`` (causal: isl / 2 keys per query), shape-aware in the keys.
- TP all-reduce of the step's activations after attention and MLP: the engines' one-shot
  all-reduce inside an NVLink domain (vLLM csrc/custom_all_reduce.cuh, TensorRT-LLM
  AllReduceStrategy.ONESHOT: every rank reads its p - 1 peers' buffers; latency-bound for decode
  messages, 2 alpha + (p - 1) n / B), the two-shot kernel for larger ones (reduce-scatter then
  all-gather through peer memory, 4 alpha + 2 (p - 1) / p n / B), or the ring of cost/comm.py
  ``allreduce_s`` under NCCL's Simple or LL protocol (LL: low per-step latency, half the
  bandwidth; what NCCL picks for small messages), whichever is fastest; the rings alone once
  the group leaves the domain.
- Attention DP + EP (DeepSeek-style): each rank's tokens go to their experts' ranks and back,
  two all-to-alls per MoE layer (``ep_alltoall_s``: DeepEP-style kernels that reach every peer
  at once, the per-tier bandwidth of cost/comm.py ``alltoall_s``); an EP group that is part of a TP
  group without attention DP all-reduces instead (TensorRT-LLM TP+EP MoE).
- Pipeline stages: a stage runs 1/pp of the layers and sends the activations to the next stage
  (cost/comm.py ``p2p_s``).
- Host time per step: ``step_overhead`` (the per-step sync and sampling launch) plus what the
  scheduler's ``per_sequence`` work on the running sequences of one scheduler (an attention-DP
  rank runs its own) takes beyond the GPU step: the engines prepare step i + 1 while step i runs
  (SGLang's overlap scheduler, TensorRT-LLM's overlap scheduler of the PyTorch backend, vLLM's
  async scheduling), so the host shows only when it is the longer (hardware/data/serving.yaml;
  BLIS's per-step and per-request terms). A C++ scheduler (TensorRT-LLM's TensorRT-engine runtime
  before 1.0) has its own per-sequence time (``cpp_runtime``); a Python scheduler on a
  Grace-hosted GPU (GB200, GB300, GH200) takes ``grace_host_factor`` times the x86 host's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from paraplan.cost.comm import p2p_s
from paraplan.cost.compute import AttentionShape, attended_keys, attention_s
from paraplan.cost.kv import WorkerShape, kv_layer_bytes_per_token
from paraplan.cost.memo import IdentityMemo
from paraplan.cost.serving_comm import ep_alltoall_s, oneshot_allreduce_s
from paraplan.cost.serving_gemm import (
    ACT_BYTES,
    compute_precision,
    dense_gemms_s,
    experts_s,
    serving_efficiency,
)
from paraplan.graph import LayerGraph, LayerKind
from paraplan.graph.layer import Layer
from paraplan.hardware import Accelerator, Cluster, Efficiency
from paraplan.hardware.serving import ServingFit, is_grace_hosted

__all__ = [
    "StepInput",
    "StepTime",
    "step_time",
    "layer_groups",
]


@dataclass(frozen=True, slots=True)
class StepInput:
    """What one step of one worker (one pipeline micro-batch) runs: ``decode_seqs`` sequences
    generating one token each at a mean context of ``decode_ctx`` tokens, and ``prefill_tokens``
    prompt tokens of requests whose prompts are ``prefill_len`` tokens long (``prefill_done``
    of them finish their prompt in this step and sample a first token)."""

    decode_seqs: float
    decode_ctx: float
    prefill_tokens: float = 0.0
    prefill_len: float = 0.0
    prefill_done: float = 0.0


@dataclass(frozen=True, slots=True)
class StepTime:
    """One step of one worker, split by resource. Units: seconds."""

    gemm_s: float
    attention_s: float
    comm_s: float
    other_s: float
    host_s: float

    @property
    def total_s(self) -> float:
        return self.gemm_s + self.attention_s + self.comm_s + self.other_s + self.host_s

    def parts(self) -> dict[str, float]:
        """The parts by name (the prediction's ``breakdown``). Units: seconds."""
        return {
            "gemm_s": self.gemm_s,
            "attention_s": self.attention_s,
            "comm_s": self.comm_s,
            "other_s": self.other_s,
            "host_s": self.host_s,
        }


def _attention_core_s(
    graph: LayerGraph,
    ly: Layer,
    x: StepInput,
    shape: WorkerShape,
    kv_bytes: float,
    accel: Accelerator,
    eff: Efficiency,
    overhead_s: float,
) -> float:
    spec = graph.spec
    total = 0.0
    extent = ly.window or ly.chunk
    if x.decode_seqs > 0:
        seqs = x.decode_seqs / shape.attn_dp
        ctx = min(x.decode_ctx, extent) if extent else x.decode_ctx
        moved = seqs * ctx * kv_layer_bytes_per_token(graph, ly, shape, kv_bytes)
        if spec.is_mla:
            per_key = (
                spec.num_heads
                / shape.attn_tp
                * (2.0 * (spec.kv_lora_rank + spec.qk_rope_head_dim) + 2.0 * spec.kv_lora_rank)
            )
        else:
            per_key = ly.attn_core_flops_per_token_per_seq / shape.attn_tp
        flops = seqs * ctx * per_key
        compute = flops / (accel.peak_for("bf16") * eff.attention)
        total += max(compute, moved / (accel.hbm_bytes_per_s * eff.hbm)) + overhead_s
    if x.prefill_tokens > 0:
        tokens = x.prefill_tokens / shape.attn_dp
        keys = attended_keys(ly, x.prefill_len)
        flops = tokens * ly.attn_core_flops_per_token_per_seq * keys / shape.attn_tp
        kv_tokens = min(x.prefill_len, extent) if extent else x.prefill_len
        total += attention_s(flops, AttentionShape(1, max(1.0, kv_tokens)), accel, eff)
    return total


def step_time(
    graph: LayerGraph,
    cluster: Cluster,
    shape: WorkerShape,
    x: StepInput,
    *,
    w_bytes: float,
    weights_precision: str,
    kv_bytes: float,
    fit: ServingFit,
    cpp_runtime: bool = False,
    serial_pp_host: bool = False,
    tiled_moe: bool = False,
    deepep_moe: bool = False,
) -> StepTime:
    """Time of one step of one pipeline stage of a worker on ``x`` (module docstring), the
    stage's share 1/pp of the layers plus the activation send to the next stage. Units: s."""
    accel = cluster.accelerator
    eff = serving_efficiency(cluster, fit)
    prec = compute_precision(weights_precision, accel)
    oh = fit.graph_kernel_overhead_s
    spec = graph.spec
    tokens = x.decode_seqs + x.prefill_tokens
    rank_tokens = tokens / shape.attn_dp
    act = rank_tokens * spec.hidden * ACT_BYTES
    gemm = attn = comm = other = 0.0
    # the engine's MoE kernels tile the rows near the tokens per expert, except DeepGEMM's under
    # DeepEP (cost/serving_gemm.py is_tiled_moe, is_deepep_moe)
    tiled = tiled_moe and not (deepep_moe and shape.dp_attention and shape.ep > 1)
    for ly, count in layer_groups(graph):
        g0, a0, c0, o0 = gemm, attn, comm, other
        dense_tp = 1 if shape.dp_attention else shape.tp
        other += _elementwise_s(ly, spec.hidden, rank_tokens, x, shape, accel, eff)
        if ly.kind is LayerKind.ATTENTION:
            gemm += dense_gemms_s(ly.gemms, rank_tokens, shape.attn_tp, w_bytes, prec, accel, eff, oh)
            attn += _attention_core_s(graph, ly, x, shape, kv_bytes, accel, eff, oh)
            comm += oneshot_allreduce_s(cluster, shape.attn_tp, act)
        elif ly.kind is LayerKind.MLP:
            gemm += dense_gemms_s(ly.gemms, rank_tokens, dense_tp, w_bytes, prec, accel, eff, oh)
            comm += oneshot_allreduce_s(cluster, dense_tp, act)
        elif ly.kind is LayerKind.MOE and ly.experts is not None:
            gemm += dense_gemms_s(ly.gemms, rank_tokens, dense_tp, w_bytes, prec, accel, eff, oh)
            gemm += experts_s(ly, tokens, shape, w_bytes, prec, accel, eff, oh, fit, tiled)
            if shape.dp_attention:
                comm += 2.0 * ep_alltoall_s(cluster, shape.tp, act * ly.experts.top_k)
            else:
                comm += oneshot_allreduce_s(cluster, shape.tp, act)
        elif ly.kind is LayerKind.LM_HEAD:
            sampled = (x.decode_seqs + x.prefill_done) / shape.attn_dp
            gemm += dense_gemms_s(
                ly.gemms,
                sampled,
                shape.attn_tp if shape.dp_attention else shape.tp,
                2.0,
                "bf16",
                accel,
                eff,
                oh,
            )
        if count > 1:  # the group's other layers cost the same
            gemm += (count - 1) * (gemm - g0)
            attn += (count - 1) * (attn - a0)
            comm += (count - 1) * (comm - c0)
            other += (count - 1) * (other - o0)
    send = p2p_s(cluster.tier_of_span(shape.gpus), act) if shape.pp > 1 else 0.0
    # each attention-DP rank schedules its own sequences (one scheduler per DP rank)
    per_sequence = fit.per_sequence_cpp_s if cpp_runtime else fit.per_sequence_s
    if not cpp_runtime and is_grace_hosted(accel.key):  # a Python scheduler on a Grace core
        per_sequence *= fit.grace_host_factor
    gpu = (gemm + attn + comm + other) / shape.pp + send
    # the scheduler prepares step i + 1 while the GPU runs step i (overlap schedulers): only the
    # part of its per-sequence work longer than the GPU step shows, plus the fixed per-step sync;
    # an executor that has no overlap loop under pipeline parallelism (``serial_pp_host``:
    # hardware/serving.py is_serial_pp_host) adds all of it
    scheduler = per_sequence * (x.decode_seqs + x.prefill_done) / shape.attn_dp
    hidden = not (serial_pp_host and shape.pp > 1)
    host = fit.step_overhead_s + (max(0.0, scheduler - gpu) if hidden else scheduler)
    return StepTime(gemm / shape.pp, attn / shape.pp, comm / shape.pp + send, other / shape.pp, host)


def _elementwise_s(
    ly: Layer,
    hidden: int,
    rank_tokens: float,
    x: StepInput,
    shape: WorkerShape,
    accel: Accelerator,
    eff: Efficiency,
) -> float:
    """HBM-bound element-wise work of one layer on one rank: the residual stream's norm and add
    (5 h elements a token: read and write, replicated over TP ranks without sequence parallelism)
    on every token, the rest of the layer's ``mem_bound_elems`` (activation function, rotary,
    router) split over its TP ranks; the LM head's logits work on the sampled tokens only; the
    routed experts' permute / activation on the token copies of the rank's experts. Units: s."""
    bw = accel.hbm_bytes_per_s * eff.hbm
    if ly.kind is LayerKind.LM_HEAD:
        sampled = (x.decode_seqs + x.prefill_done) / shape.attn_dp
        return sampled * ly.mem_bound_elems * ACT_BYTES / (1 if shape.dp_attention else shape.tp) / bw
    residual = min(ly.mem_bound_elems, 5.0 * hidden)
    tp = shape.attn_tp if ly.kind is LayerKind.ATTENTION else (1 if shape.dp_attention else shape.tp)
    elems = residual + (ly.mem_bound_elems - residual) / tp
    total = rank_tokens * elems * ACT_BYTES / bw
    if ly.experts is not None:
        copies = rank_tokens * shape.attn_dp * ly.experts.top_k / shape.tp
        total += copies * ly.experts.mem_bound_elems * ACT_BYTES / bw
    return total


_GROUPS: IdentityMemo[tuple[tuple[Layer, int], ...]] = IdentityMemo(256)
"""layer_groups' memo by the graph's identity (cost/memo.py): every step of a search walks the
same graph, and hashing a whole LayerGraph for functools.cache costs more than the step's
arithmetic."""


def layer_groups(graph: LayerGraph) -> tuple[tuple[Layer, int], ...]:
    """The served layers (no vision encoder, no MTP module, no Mamba mixer) grouped by what they
    cost: layers equal but for their name and block, with their count (a 61-layer DeepSeek-V3 is
    a handful of groups)."""
    return _GROUPS.get(graph, None, lambda: _layer_groups(graph))


def _layer_groups(graph: LayerGraph) -> tuple[tuple[Layer, int], ...]:
    counts: dict[Layer, int] = {}
    for ly in graph.layers():
        if ly.name.startswith("mtp") or ly.kind in (LayerKind.VISION, LayerKind.PROJECTOR, LayerKind.MAMBA):
            continue
        key = replace(ly, name=ly.kind.value, block=0)
        counts[key] = counts.get(key, 0) + 1
    return tuple(counts.items())
