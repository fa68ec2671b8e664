"""Serving memory per GPU: weight bytes, KV-cache bytes per token, the KV budget an engine leaves.

Weights (per GPU of a worker of ``tp`` x ``pp`` GPUs): each layer's TP-sharded weights / attention
TP, its replicated weights whole, its routed experts / tp (expert x expert-TP shards over the
worker's tp GPUs: ep experts groups each split moe_tp = tp / ep ways; vLLM/SGLang/TRT-LLM shard the
experts over all tp ranks of the worker, AIConfigurator's moe_tp x moe_ep = tp x attention-dp), all
over pp stages. Under attention data parallelism (``dp_attention``) the attention (and the dense
MLP) weights are whole on every rank (SGLang --enable-dp-attention, TRT-LLM enable_attention_dp).

KV cache per token and layer (Kwon et al. 2023, arXiv:2309.06180 Sec. 4, paged attention):
- GQA/MHA: 2 x kv_heads x head_dim elements, the kv heads split over attention TP and replicated
  once tp exceeds them (ceil(kv_heads / tp) heads per rank; vLLM/TRT-LLM replicate KV heads);
- MLA: kv_lora_rank + qk_rope_head_dim elements (the compressed latent and the shared rotary key,
  DeepSeek-V2 arXiv:2405.04434 Sec. 2.1.2), replicated on every TP rank (the latent has no heads to
  split: the reason DP-attention exists, SGLang blog "DP attention" 2024-12);
- sliding-window / chunked layers hold at most window / chunk tokens (vLLM hybrid KV allocator,
  TRT-LLM kv_cache_config.max_attention_window);
- Mamba layers: a constant state per sequence (no per-token KV).
Element bytes: bf16 2, fp8 1 (the engines' FP8 KV cache stores one byte per element, scales per
tensor).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import ceil

from paraplan.cost.memo import IdentityMemo
from paraplan.graph import LayerGraph, LayerKind
from paraplan.graph.layer import Layer

__all__ = [
    "WorkerShape",
    "WEIGHT_BYTES",
    "weight_bytes_per_param",
    "kv_bytes_per_element",
    "weights_bytes_per_gpu",
    "kv_bytes_per_sequence",
    "kv_layer_bytes_per_token",
]

# Bytes per stored weight, block scales included (NVIDIA ModelOpt / Transformer Engine formats:
# FP8 per-tensor or 1x128-block scales ~1 B; NVFP4 4 bits + one E4M3 scale per 16; MXFP4 4 bits +
# one E8M0 scale per 32 (OCP MX spec v1.0); INT4 AWQ/GPTQ 4 bits + an fp16 scale per 128).
WEIGHT_BYTES = {
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "fp8_blockwise": 1.0 + 4 / 128,
    "int8": 1.0,
    "nvfp4": 0.5 + 1 / 16,
    "fp4": 0.5 + 1 / 16,
    "mxfp4": 0.5 + 1 / 32,
    "int4": 0.5 + 2 / 128,
}
KV_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "nvfp4": 0.5 + 1 / 16, "fp4": 0.5 + 1 / 16}


@dataclass(frozen=True, slots=True)
class WorkerShape:
    """One serving worker (a replica, or a prefill/decode worker): tp x pp GPUs; ep expert groups
    among the tp GPUs of a stage; attention data-parallel over them when ``dp_attention``."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp_attention: bool = False

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @property
    def attn_tp(self) -> int:
        """Ranks one sequence's attention is split over: tp, or 1 under attention DP."""
        return 1 if self.dp_attention else self.tp

    @property
    def attn_dp(self) -> int:
        """Attention data-parallel ranks per stage (each holds its own sequences' KV)."""
        return self.tp if self.dp_attention else 1

    @property
    def moe_tp(self) -> int:
        """Ways each expert's weights are split: tp / ep."""
        return max(1, self.tp // self.ep)


def weight_bytes_per_param(precision: str) -> float:
    """Stored bytes per weight of ``precision`` (WEIGHT_BYTES); ValueError naming the field."""
    if precision not in WEIGHT_BYTES:
        raise ValueError(
            f"workload.weights_precision={precision!r} is not known; choose one of {', '.join(WEIGHT_BYTES)}"
        )
    return WEIGHT_BYTES[precision]


def kv_bytes_per_element(precision: str) -> float:
    """Bytes per KV-cache element of ``precision`` (KV_BYTES); ValueError naming the field."""
    if precision not in KV_BYTES:
        raise ValueError(
            f"workload.kv_precision={precision!r} is not known; choose one of {', '.join(KV_BYTES)}"
        )
    return KV_BYTES[precision]


def _is_mtp(layer: Layer) -> bool:
    """A multi-token-prediction module's layer (graph/layers.py names them ``mtp_*``)."""
    return layer.name.startswith("mtp")


def _is_dense_part(layer: Layer) -> bool:
    """Attention and dense-MLP layers: replicated on every rank under attention DP."""
    return layer.kind in (LayerKind.ATTENTION, LayerKind.MLP)


_GROUPS: IdentityMemo[tuple[tuple[Layer, int], ...]] = IdentityMemo(256)
_SIZES: IdentityMemo[float] = IdentityMemo(4096)
"""Memos by the graph's identity (cost/memo.py): a serving search asks for the same graph's
weight and KV sizes per worker shape, and hashing a whole LayerGraph costs more than the sums."""


def _layer_counts(graph: LayerGraph) -> tuple[tuple[Layer, int], ...]:
    """The graph's layers, equal ones (but for the name and block) counted once: the sums below
    are over these, each term times its count. An MTP module's layers keep a name that says so."""

    def group() -> tuple[tuple[Layer, int], ...]:
        counts: dict[Layer, int] = {}
        for ly in graph.layers():
            key = replace(ly, name="mtp" if _is_mtp(ly) else ly.kind.value, block=0)
            counts[key] = counts.get(key, 0) + 1
        return tuple(counts.items())

    return _GROUPS.get(graph, None, group)


def weights_bytes_per_gpu(graph: LayerGraph, shape: WorkerShape, bytes_per_param: float) -> float:
    """Weight bytes one GPU holds (module docstring). Norms and the embedding table stay in
    bf16 (quantised checkpoints keep them: ModelOpt FP8/NVFP4 exclude embeddings, norms, the LM
    head and the router). Units: bytes."""
    return _SIZES.get(
        graph, ("w", shape, bytes_per_param), lambda: _weights_bytes(graph, shape, bytes_per_param)
    )


def _weights_bytes(graph: LayerGraph, shape: WorkerShape, bytes_per_param: float) -> float:
    total = 0.0
    for ly, count in _layer_counts(graph):
        if ly.kind in (LayerKind.VISION, LayerKind.PROJECTOR) or _is_mtp(ly):
            continue  # text-only serving; MTP draft modules load only with speculative decoding
        gemm_params = sum(g.params for g in ly.gemms)
        other = ly.params - gemm_params - ly.expert_params  # norms, embedding tables
        quant = ly.kind not in (LayerKind.EMBEDDING, LayerKind.LM_HEAD)
        b = bytes_per_param if quant else 2.0
        router = sum(g.params for g in ly.gemms if g.name == "router")
        split_tp = 1 if (_is_dense_part(ly) and shape.dp_attention) else shape.tp
        sharded = sum(g.params for g in ly.gemms if not g.is_replicated)
        replicated = ly.replicated_params - router
        total += count * (
            (sharded / split_tp + replicated) * b
            + router * 2.0
            + other * 2.0 / max(1, split_tp)
            + ly.expert_params * bytes_per_param / shape.tp
        )
    return total / shape.pp


def kv_layer_bytes_per_token(graph: LayerGraph, layer: Layer, shape: WorkerShape, kv_bytes: float) -> float:
    """KV bytes of one token in one attention layer on one GPU (module docstring). Units: bytes."""
    spec = graph.spec
    if spec.is_mla:
        return (spec.kv_lora_rank + spec.qk_rope_head_dim) * kv_bytes
    heads = ceil(spec.num_kv_heads / shape.attn_tp)
    return 2.0 * heads * spec.head_dim * kv_bytes


def kv_bytes_per_sequence(graph: LayerGraph, shape: WorkerShape, kv_bytes: float, tokens: float) -> float:
    """KV-cache bytes one sequence of ``tokens`` tokens holds on one GPU of the stage that holds
    it (every attention layer of the model / pp; windowed layers hold min(tokens, window); Mamba
    layers their state). Units: bytes."""
    return _SIZES.get(
        graph, ("kv", shape, kv_bytes, tokens), lambda: _kv_bytes(graph, shape, kv_bytes, tokens)
    )


def _kv_bytes(graph: LayerGraph, shape: WorkerShape, kv_bytes: float, tokens: float) -> float:
    total = 0.0
    for ly, count in _layer_counts(graph):
        if _is_mtp(ly):
            continue
        if ly.kind is LayerKind.ATTENTION:
            extent = ly.window or ly.chunk
            held = min(tokens, extent) if extent else tokens
            total += count * held * kv_layer_bytes_per_token(graph, ly, shape, kv_bytes)
        elif ly.kind is LayerKind.MAMBA:
            total += count * ly.state_elems_per_seq * 2.0 / shape.attn_tp
    return total / shape.pp
