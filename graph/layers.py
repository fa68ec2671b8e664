"""The model as a networkx DiGraph of layers, each with FLOPs, parameters and activation sizes.

Nodes, in order: ``embedding`` (after a vision encoder's ``vision_*`` layers, if any), then the
blocks, ``final_norm``, ``lm_head`` (logits and loss) and the multi-token-prediction layers
``mtp_k_*``. A transformer block i is ``attn_i`` and ``mlp_i``; ``mlp_i`` is a dense MLP (kind
``mlp``) or a routed-expert layer (kind ``moe``: router, shared experts, and an :class:`Experts`
part whose per-token numbers are per routed token copy). A hybrid model (``layer_pattern``,
Megatron's hybrid convention) has one layer per block: ``mamba_i``, ``attn_i`` or ``mlp_i``.
Layers with ``block == -1`` before the first block are the first stage's head, after the last
block the last stage's tail. Every node carries a :class:`Layer`. Counts are per token for one
forward pass (vision layers: per image patch token); activation sizes are in elements per token
(bytes come from ``cost/``), split into the parts that tensor/sequence/context parallelism shard
differently (Korthikanti et al. 2022, arXiv:2205.05198, Sec. 4).

Kinds and what shards them (``Layer.shardable``; what a kind cannot use is left out):

- ``attention``: full causal, sliding-window (``window``) or chunked local (``chunk``); tp
  (heads), sp, cp (K/V exchange; windows exchange as much as full attention, cost/cp.py).
- ``mlp`` / ``moe``: tp, sp, cp; MoE also ep (routed experts).
- ``mamba``: tp (heads and groups), sp; no cp (cost.plan.check_layer_kinds refuses it).
- ``vision`` / ``projector`` (head): tp, sp over the image tokens; not split by cp (each cp
  rank encodes the whole images) and not by ep.
- ``mtp`` (tail): tp, sp; its block's attention / MoE layers shard as in the blocks.
- ``embedding``, ``final_norm``, ``lm_head``: as before (vocab over tp; norm over sp).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cached_property
from typing import Any

import networkx as nx
from paraplan.graph.spec import ModelSpec

__all__ = ["LayerKind", "Gemm", "Experts", "Layer", "LayerGraph", "build_graph", "SsdTraffic", "ssd_traffic"]


class LayerKind(StrEnum):
    EMBEDDING = "embedding"
    ATTENTION = "attention"
    MLP = "mlp"
    MOE = "moe"
    MAMBA = "mamba"  # state-space mixer (Mamba-1 or Mamba-2)
    VISION = "vision"  # ViT patch embedding or block, over image patch tokens
    PROJECTOR = "projector"  # vision merger: patches -> decoder tokens
    MTP = "mtp"  # multi-token-prediction projection (its block and head are attention/moe/lm_head)
    FINAL_NORM = "final_norm"
    LM_HEAD = "lm_head"


@dataclass(frozen=True, slots=True, kw_only=True)
class Gemm:
    """One matrix multiply per token: ``in_dim`` x ``out_dim``; ``tp_split`` which dim TP shards."""

    name: str
    in_dim: int
    out_dim: int
    tp_split: str  # "out" (column parallel), "in" (row parallel) or "none" (replicated over TP)

    @property
    def flops_per_token(self) -> int:
        return 2 * self.in_dim * self.out_dim

    @property
    def params(self) -> int:
        return self.in_dim * self.out_dim

    @property
    def is_replicated(self) -> bool:
        """Not sharded by TP: every TP rank holds the weight and runs it on all its tokens
        (MLA's down-projections, the MoE router)."""
        return self.tp_split == "none"


@dataclass(frozen=True, slots=True, kw_only=True)
class Experts:
    """The routed experts of a MoE layer. GEMMs, activations and element-wise work are those of
    ONE routed token copy through ONE expert (each token makes ``top_k`` copies); the weights are
    ``num_experts`` times the expert's GEMMs."""

    num_experts: int
    top_k: int
    gemms: tuple[Gemm, ...]
    act_gathered_elems: float  # stored after the TP all-gather of the copies: not TP-sharded
    act_tp_elems: float
    act_sp_elems: float
    act_gathered_gemm_elems: float
    act_tp_gemm_elems: float
    mem_bound_elems: float

    @property
    def params_per_expert(self) -> int:
        return sum(g.params for g in self.gemms)

    @property
    def params(self) -> int:
        return self.num_experts * self.params_per_expert

    @property
    def flops_per_token(self) -> int:
        """Active GEMM FLOPs of one token: top_k experts."""
        return self.top_k * sum(g.flops_per_token for g in self.gemms)


@dataclass(frozen=True, slots=True, kw_only=True)
class Layer:
    """One node of the layer graph.

    ``act_tp_elems``: stored activations per token that TP shards (and SP too);
    ``act_sp_elems``: those only sequence parallelism shards (norm inputs, dropout masks, block
    inputs: replicated across TP ranks without SP); ``act_*_gemm_elems``: the part of each that is
    a GEMM input, which FP8 training stores in one byte (Transformer Engine keeps the FP8 cast for
    the weight gradient); ``act_quadratic_heads``: heads whose softmax/dropout state per token per
    key (x seq_len) is stored without flash attention. ``mem_bound_elems``: elements read+written
    by element-wise ops per token.
    """

    name: str
    kind: LayerKind
    block: int  # transformer block index; -1 for embedding/head
    params: int
    gemms: tuple[Gemm, ...] = ()
    attn_core_flops_per_token_per_seq: int = 0  # x seq_len, non-causal
    act_tp_elems: float = 0.0
    act_sp_elems: float = 0.0
    act_tp_gemm_elems: float = 0.0
    act_sp_gemm_elems: float = 0.0
    act_quadratic_heads: int = 0
    mem_bound_elems: float = 0.0
    shardable: tuple[str, ...] = field(default=())
    experts: Experts | None = None
    # attention extent (cost.compute.attended_keys): a query sees at most ``window`` earlier
    # tokens (sliding window), or only the tokens of its own ``chunk`` (chunked local attention);
    # ``causal`` False: every key of the sequence / image (ViT)
    window: int = 0
    chunk: int = 0
    causal: bool = True
    tokens_per_sample: int = 0  # 0: runs on the sequence's tokens; else image patches per sample
    tokens_merged: int = 1  # patches merged into one of its tokens (the vision merger: merge^2)
    scan_flops_per_token: int = 0  # state-space scan + depthwise conv (not GEMMs), Mamba
    scan_chunk: int = 0  # tokens per SSD chunk (the scan kernels' block length)
    # the scan kernels' backward FLOPs and forward / backward HBM bytes per token (Mamba-2 SSD:
    # ssd_traffic); a layer with scan_flops_per_token and none of these has a fused scan whose
    # backward does twice its forward FLOPs and keeps its state on chip (Mamba-1)
    scan_backward_flops_per_token: int = 0
    scan_bytes_per_token: float = 0.0
    scan_backward_bytes_per_token: float = 0.0
    state_elems_per_seq: int = 0  # recurrent state per sequence (conv + SSM state), Mamba

    @property
    def gemm_flops_per_token(self) -> int:
        """Active GEMM FLOPs per token, routed experts (top_k of them) included."""
        routed = self.experts.flops_per_token if self.experts else 0
        return sum(g.flops_per_token for g in self.gemms) + routed

    @property
    def expert_params(self) -> int:
        """Weights of the routed experts (sharded by ep, not by tp's dense rules)."""
        return self.experts.params if self.experts else 0

    @property
    def replicated_params(self) -> int:
        """Weights every TP rank holds whole (GEMMs with ``tp_split == "none"``)."""
        return sum(g.params for g in self.gemms if g.is_replicated)

    @property
    def tp_params(self) -> int:
        """Weights TP shards: all but the routed experts and the replicated GEMMs."""
        return self.params - self.expert_params - self.replicated_params

    @property
    def active_params(self) -> int:
        """Weights one token's forward touches: routed experts count top_k times one expert."""
        routed = self.experts.top_k * self.experts.params_per_expert if self.experts else 0
        return self.params - self.expert_params + routed


@dataclass(frozen=True)
class LayerGraph:
    """The model's layers in execution order (module docstring), built from its ``spec`` by
    :func:`build_graph`. Ways in: a preset or Hugging Face config (``paraplan.graph.preset``,
    ``from_hf_config``), a traced ``torch.nn.Module`` (``from_module``), or the layers listed in
    Python: ``LayerGraph.from_layers([repeat(3, Block()), repeat(58, Block(mlp="moe")), Mtp()],
    hidden=..., ...)`` (paraplan.graph.builder; a scenario file's ``model.layers`` pattern or
    list compiles the same way). ``paraplan.solve({"model": graph, ...})`` plans it."""

    spec: ModelSpec
    graph: nx.DiGraph

    @classmethod
    def from_layers(cls, layers: Any, **fields: Any) -> LayerGraph:
        """The graph of the model whose layers are ``layers`` (Attention, Mlp, Moe, Mamba, Block,
        Mtp descriptors; ``repeat`` for runs), with ``fields`` its sizes (hidden, num_heads,
        vocab, ...): paraplan.graph.builder.from_layers."""
        from paraplan.graph.builder import from_layers

        return from_layers(layers, **fields)

    @cached_property
    def _ordered(self) -> tuple[Layer, ...]:
        return tuple(self.graph.nodes[n]["layer"] for n in nx.topological_sort(self.graph))

    def layers(self) -> list[Layer]:
        """Layers in execution order (a topological order of the graph)."""
        return list(self._ordered)

    def block_layers(self, block: int) -> list[Layer]:
        return [ly for ly in self._ordered if ly.block == block]

    def layer(self, name: str) -> Layer:
        return self.graph.nodes[name]["layer"]

    @property
    def num_blocks(self) -> int:
        return self.spec.num_layers

    @cached_property
    def block_kinds(self) -> tuple[int, ...]:
        """Per block (in order), the index of its kind: blocks whose layers are equal but for
        their names and block index share a kind; kinds are numbered by first appearance. A
        homogeneous model has one kind; DeepSeek-V3 two (dense, MoE)."""
        seen: dict[tuple[Layer, ...], int] = {}
        out = []
        for i in range(self.num_blocks):
            key = tuple(replace(ly, name="", block=0) for ly in self.block_layers(i))
            out.append(seen.setdefault(key, len(seen)))
        return tuple(out)

    @cached_property
    def kind_blocks(self) -> tuple[int, ...]:
        """The first block of each kind (the one whose layers cost the kind)."""
        kinds = self.block_kinds
        return tuple(kinds.index(k) for k in range(max(kinds) + 1))

    @property
    def head_names(self) -> tuple[str, ...]:
        """Layers before the first block (embedding; a vision encoder): the first stage's."""
        return tuple(ly.name for ly in self._ordered[: self._first_block_at])

    @property
    def tail_names(self) -> tuple[str, ...]:
        """Layers after the last block (final norm, LM head and loss, MTP): the last stage's."""
        last = max(i for i, ly in enumerate(self._ordered) if ly.block >= 0)
        return tuple(ly.name for ly in self._ordered[last + 1 :])

    @property
    def _first_block_at(self) -> int:
        return next(i for i, ly in enumerate(self._ordered) if ly.block >= 0)

    @property
    def num_params(self) -> int:
        return sum(ly.params for ly in self.layers())

    @property
    def num_active_params(self) -> int:
        """Parameters one token's forward pass uses (MoE: top_k routed experts + shared)."""
        return sum(ly.active_params for ly in self.layers())

    @property
    def moe_block(self) -> int | None:
        """Index of the first block with a routed-expert MLP (None for dense models)."""
        return next((i for i in range(self.spec.num_layers) if self.spec.is_moe_layer(i)), None)

    @property
    def dense_block(self) -> int | None:
        """Index of the first block with a dense MLP (None when every block is MoE)."""
        return next((i for i in range(self.spec.num_layers) if "-" in self.spec.block_symbols(i)), None)


def _local(spec: ModelSpec, i: int) -> tuple[int, int]:
    """(window, chunk) of block i's attention; (0, 0) when it is full attention."""
    if spec.is_full_attention(i):
        return 0, 0
    return spec.sliding_window, spec.attention_chunk


def _attention(spec: ModelSpec, i: int) -> Layer:
    """Self-attention (MHA/GQA/MQA): causal full, sliding-window or chunked local (``_local``);
    a NoPE layer (Llama 4's full-attention layers) skips the rotary element-wise work."""
    h, q, kv = spec.hidden, spec.q_dim, spec.kv_dim
    window, chunk = _local(spec, i)
    nope = spec.nope_full_attention and not (window or chunk)
    rotary = 0 if spec.position_embedding != "rope" or nope else 2 * (q + kv)
    gemms = (
        Gemm(name="qkv", in_dim=h, out_dim=q + 2 * kv, tp_split="out"),
        Gemm(name="proj", in_dim=q, out_dim=h, tp_split="in"),
    )
    norm_params = 2 * h if spec.norm == "layernorm" else h
    # Korthikanti 2022 Sec 4.1, generalised to GQA: Q,K (QK^T input), V, attention output (proj
    # input) are TP-sharded; norm input, QKV input and the dropout mask are not (without SP).
    act_tp = q + kv + kv + q
    act_sp = h + h + (h / 2 if spec.dropout else 0.0)  # norm in, qkv in, dropout mask (1 B of 2)
    return Layer(
        name=f"attn_{i}",
        kind=LayerKind.ATTENTION,
        block=i,
        params=sum(g.in_dim * g.out_dim for g in gemms) + norm_params,
        gemms=gemms,
        attn_core_flops_per_token_per_seq=4 * q,
        act_tp_elems=act_tp,
        act_sp_elems=act_sp,
        act_tp_gemm_elems=q,
        act_sp_gemm_elems=h,
        act_quadratic_heads=spec.num_heads,
        mem_bound_elems=2 * h + 3 * h + rotary,  # norm, residual add, rotary
        shardable=("tp", "sp", "cp"),
        window=window,
        chunk=chunk,
    )


def _mlp(spec: ModelSpec, i: int) -> Layer:
    h, f = spec.hidden, spec.ffn_hidden
    gated = spec.activation.is_gated
    up = 2 * f if gated else f
    gemms = (
        Gemm(name="fc1", in_dim=h, out_dim=up, tp_split="out"),
        Gemm(name="fc2", in_dim=f, out_dim=h, tp_split="in"),
    )
    norm_params = 2 * h if spec.norm == "layernorm" else h
    # Korthikanti: fc1 input (sp), activation input (up elems), activation output (f), dropout mask.
    act_tp = up + f
    act_sp = h + h + (h / 2 if spec.dropout else 0.0)
    return Layer(
        name=f"mlp_{i}",
        kind=LayerKind.MLP,
        block=i,
        params=sum(g.in_dim * g.out_dim for g in gemms) + norm_params,
        gemms=gemms,
        act_tp_elems=act_tp,
        act_sp_elems=act_sp,
        act_tp_gemm_elems=f,
        act_sp_gemm_elems=h,
        mem_bound_elems=2 * h + 3 * h + up + f,  # norm, residual add, activation
        shardable=("tp", "sp", "cp"),
    )


def _mla_attention(spec: ModelSpec, i: int) -> Layer:
    """Multi-head latent attention (DeepSeek-V2 arXiv:2405.04434 Sec. 2.1; V3 arXiv:2412.19437).

    Down-projections to the q and kv latents are replicated over TP (Megatron-Core MLA), the
    up-projections column-parallel, the output projection row-parallel. Core attention: q.k over
    qk_nope + qk_rope dims, softmax.v over v_head_dim, per head.
    """
    h, heads = spec.hidden, spec.num_heads
    qk = spec.qk_nope_head_dim + spec.qk_rope_head_dim
    rq, rkv, rope = spec.q_lora_rank, spec.kv_lora_rank, spec.qk_rope_head_dim
    q_gemms: tuple[Gemm, ...]
    if rq:
        q_gemms = (
            Gemm(name="q_down", in_dim=h, out_dim=rq, tp_split="none"),
            Gemm(name="q_up", in_dim=rq, out_dim=heads * qk, tp_split="out"),
        )
    else:
        q_gemms = (Gemm(name="q", in_dim=h, out_dim=heads * qk, tp_split="out"),)
    gemms = (
        *q_gemms,
        Gemm(name="kv_down", in_dim=h, out_dim=rkv + rope, tp_split="none"),
        Gemm(
            name="kv_up",
            in_dim=rkv,
            out_dim=heads * (spec.qk_nope_head_dim + spec.v_head_dim),
            tp_split="out",
        ),
        Gemm(name="proj", in_dim=spec.v_dim, out_dim=h, tp_split="in"),
    )
    norm_params = h + rq + rkv  # input RMSNorm + the q and kv latent RMSNorms
    # Q, K (q.k input), V, attention output (proj input) are TP-sharded; the block input, the
    # normed input and the latents (with their norm inputs) are stored per sequence shard.
    act_tp = 2 * heads * qk + 2 * spec.v_dim
    act_sp = 2 * h + 2 * rq + (rkv + rope) + rkv + (h / 2 if spec.dropout else 0.0)
    return Layer(
        name=f"attn_{i}",
        kind=LayerKind.ATTENTION,
        block=i,
        params=sum(g.params for g in gemms) + norm_params,
        gemms=gemms,
        attn_core_flops_per_token_per_seq=2 * heads * qk + 2 * spec.v_dim,
        act_tp_elems=act_tp,
        act_sp_elems=act_sp,
        act_tp_gemm_elems=spec.v_dim,
        act_sp_gemm_elems=h + rq + rkv,
        act_quadratic_heads=heads,
        mem_bound_elems=2 * h + 2 * rq + 2 * rkv + 3 * h + 2 * (heads * rope + rope),
        shardable=("tp", "sp", "cp"),
        window=_local(spec, i)[0],
        chunk=_local(spec, i)[1],
    )


def _moe(spec: ModelSpec, i: int) -> Layer:
    """Router, shared experts and routed experts (Megatron-Core MoELayer; Fedus et al. 2021,
    arXiv:2101.03961; DeepSeekMoE arXiv:2401.06066 for shared experts).

    Per token: router h x E GEMM (replicated over TP) and softmax/top-k; shared experts as a dense
    MLP of width shared_ffn_hidden; each of the top_k routed copies is permuted (d read + written),
    run through one expert, unpermuted (d read + written) and weighted into the output, d = h.
    LatentMoE (spec.moe_latent_dim = d < h; megatron-core 0.19.2 moe_layer.py): h -> d before the
    dispatch and d -> h after the combine, both replicated over TP ("duplicated"), each stored
    input kept; the experts run d -> f -> d (Megatron-Bridge 0.6.2 training/utils/flop_utils.py:
    routed 4 b s d f top_k + projections 4 b s h d forward FLOPs).
    """
    h, f, e = spec.hidden, spec.moe_ffn_hidden, spec.num_experts
    d = spec.moe_latent_dim or h  # the width tokens are dispatched and the experts run at
    gated = spec.activation.is_gated
    up = 2 * f if gated else f
    gemms: tuple[Gemm, ...] = (Gemm(name="router", in_dim=h, out_dim=e, tp_split="none"),)
    fs = spec.shared_ffn_hidden
    up_s = (2 * fs if gated else fs) if fs else 0
    if fs:
        gemms += (
            Gemm(name="shared_fc1", in_dim=h, out_dim=up_s, tp_split="out"),
            Gemm(name="shared_fc2", in_dim=fs, out_dim=h, tp_split="in"),
        )
    latent = d != h
    if latent:
        gemms += (
            Gemm(name="latent_down", in_dim=h, out_dim=d, tp_split="none"),
            Gemm(name="latent_up", in_dim=d, out_dim=h, tp_split="none"),
        )
    experts = Experts(
        num_experts=e,
        top_k=spec.top_k,
        gemms=(
            Gemm(name="expert_fc1", in_dim=d, out_dim=up, tp_split="out"),
            Gemm(name="expert_fc2", in_dim=f, out_dim=d, tp_split="in"),
        ),
        # per routed copy: fc1 input (kept as all-gathered over TP), the activation's input and
        # output (TP-sharded), the expert output kept for the combine (sequence shard)
        act_gathered_elems=d,
        act_tp_elems=up + f,
        act_sp_elems=d,
        act_gathered_gemm_elems=d,
        act_tp_gemm_elems=f,
        mem_bound_elems=4 * d + up + f,  # permute + unpermute (read + write), activation
    )
    norm_params = 2 * h if spec.norm == "layernorm" else h
    # norm input, normed input (router and shared-expert input), router logits/probs (fp32: 2
    # elements of 2 B each), shared-expert activations; LatentMoE: latent_up's input (d)
    act_sp = 2 * h + 2 * 2 * e + (h / 2 if spec.dropout else 0.0) + (d if latent else 0.0)
    return Layer(
        name=f"mlp_{i}",
        kind=LayerKind.MOE,
        block=i,
        params=sum(g.params for g in gemms) + experts.params + norm_params,
        gemms=gemms,
        act_tp_elems=up_s + fs,
        act_sp_elems=act_sp,
        act_tp_gemm_elems=fs,
        act_sp_gemm_elems=(h if fs or latent else 0.0) + (d if latent else 0.0),
        mem_bound_elems=2 * h + 3 * h + up_s + fs + 4 * e,  # norm, residual, shared act., router
        shardable=("tp", "sp", "cp", "ep"),
        experts=experts,
    )


def _block(spec: ModelSpec, i: int) -> list[Layer]:
    """The layers of block i, one per PATTERN_SYMBOLS character of spec.block_symbols(i)."""
    out = []
    for symbol in spec.block_symbols(i):
        if symbol == "*":
            out.append(_mla_attention(spec, i) if spec.is_mla else _attention(spec, i))
        elif symbol == "M":
            out.append(_mamba(spec, i))
        else:
            out.append(_moe(spec, i) if symbol == "E" else _mlp(spec, i))
    return out


def _norm_params(spec: ModelSpec) -> int:
    return 2 * spec.hidden if spec.norm == "layernorm" else spec.hidden


def _lm_head(spec: ModelSpec, name: str, shared: bool) -> Layer:
    """Logits and loss; ``shared``: the weight is the LM head's (or the tied embedding)."""
    h, v = spec.hidden, spec.vocab
    return Layer(
        name=name,
        kind=LayerKind.LM_HEAD,
        block=-1,
        params=0 if shared else v * h,
        gemms=(Gemm(name="logits", in_dim=h, out_dim=v, tp_split="out"),),
        act_sp_elems=h,
        mem_bound_elems=3 * v,
        shardable=("tp",),
    )


def _final_norm(spec: ModelSpec, name: str) -> Layer:
    h = spec.hidden
    return Layer(
        name=name,
        kind=LayerKind.FINAL_NORM,
        block=-1,
        params=_norm_params(spec),
        act_sp_elems=h,
        mem_bound_elems=2 * h,
        shardable=("sp",),
    )


def build_graph(spec: ModelSpec) -> LayerGraph:
    """Layer graph of a decoder: GPT-, Llama-, Mixtral- or DeepSeek-style blocks (GQA or MLA,
    full, sliding-window or chunked attention, SwiGLU/GeGLU or GeLU, dense or mixture-of-experts
    MLPs, tied or untied), or a hybrid pattern of Mamba, attention and MLP layers; with a vision
    encoder in front (``spec.vision``) and multi-token-prediction modules behind
    (``spec.mtp_layers``)."""
    h, v = spec.hidden, spec.vocab
    g = nx.DiGraph()
    nodes: list[Layer] = _vision_layers(spec) if spec.vision.num_layers else []
    nodes.append(
        Layer(
            name="embedding",
            kind=LayerKind.EMBEDDING,
            block=-1,
            params=v * h,
            act_sp_elems=0.0,
            mem_bound_elems=2 * h,
            shardable=("tp",),
        )
    )
    for i in range(spec.num_layers):
        nodes += _block(spec, i)
    nodes.append(_final_norm(spec, "final_norm"))
    nodes.append(_lm_head(spec, "lm_head", shared=spec.tied_embeddings))
    for k in range(spec.mtp_layers):
        nodes += _mtp_layers(spec, k)
    for a, b in zip(nodes, nodes[1:], strict=False):
        g.add_node(a.name, layer=a)
        g.add_node(b.name, layer=b)
        g.add_edge(a.name, b.name)
    return LayerGraph(spec, g)


@dataclass(frozen=True, slots=True)
class SsdTraffic:
    """Work of the Mamba-2 SSD kernels per token (all heads of the layer). Units: FLOPs, bytes."""

    backward_flops: int
    forward_bytes: float
    backward_bytes: float


def ssd_traffic(heads: int, head_dim: int, state: int, groups: int, chunk: int) -> SsdTraffic:
    """Backward FLOPs and HBM traffic of the chunked SSD scan, tallied kernel by kernel from
    mamba_ssm 2.3 ops/triton/ssd_combined.py (_mamba_chunk_scan_combined_fwd / _bwd, with the
    gate z inside the scan as megatron-core's mamba_split_conv1d_scan_combined passes it).

    Per token, with H heads of width P (d = H P), state N, G groups and chunk Q: chunk states
    S = H P N / Q elements, kept in fp32 (4 B); the C.B^T blocks G Q elements in fp32; x, z,
    out, B, C and their gradients in bf16 (2 B).
    Forward (chunk_state, state_passing, bmm_chunk, chunk_scan): 12 S + 8 G Q + 8 G N + 10 d
    bytes. Backward (recomputed chunk_state, state_passing and bmm_chunk, then dz, dstates,
    state_passing_bwd, dx, dB, the states' bf16 copy, dC, dCB, two bmm_chunk_bwd, ddA):
    44 S + 24 G Q + 30 G N + 34 d bytes, and H (6 Q P + 10 N P) + 6 Q N G FLOPs (the forward:
    H (2 Q P + 4 N P) + 2 Q N G, see ``_mamba``).
    """
    d = heads * head_dim
    s = d * state / chunk
    gq, gn = groups * chunk, groups * state
    return SsdTraffic(
        backward_flops=heads * (6 * chunk * head_dim + 10 * state * head_dim) + 6 * chunk * state * groups,
        forward_bytes=12 * s + 8 * gq + 8 * gn + 10 * d,
        backward_bytes=44 * s + 24 * gq + 30 * gn + 34 * d,
    )


def _mamba(spec: ModelSpec, i: int) -> Layer:
    """A state-space mixer with its pre-norm (one hybrid-pattern ``M`` layer).

    Mamba-2 (megatron-core 0.16.1 ssm/mamba_mixer.py; Dao & Gu 2024, arXiv:2405.21060): in_proj
    h -> z, x (d_inner each), B, C (groups x state each), dt (heads), column-parallel; depthwise
    causal conv (conv_kernel taps, bias) over x, B, C; the SSD scan; gated RMSNorm over d_inner;
    out_proj d_inner -> h, row-parallel; dt_bias, A_log and D per head. TP shards heads and groups
    (Megatron: num_groups % tp == 0), so the mixer has one TP all-reduce pair, like attention.

    SSD scan FLOPs per token (arXiv:2405.21060 Sec. 6, chunk length Q): C.B^T within the chunk
    2*Q*N per group, its product with x 2*Q*d_inner, chunk states B^T.x 2*N*d_inner, the states'
    read-out C.h 2*N*d_inner (the kernels compute whole Q x Q blocks: no causal halving); the conv
    2*conv_kernel*conv_dim.

    Mamba-1 (Gu & Dao 2023, arXiv:2312.00752 Alg. 2; transformers modeling_jamba.py
    JambaMambaMixer): in_proj h -> 2*d_inner, conv over d_inner, x_proj d_inner -> dt_rank + 2N,
    dt_proj dt_rank -> d_inner (bias), A (d_inner x N), D, Jamba's dt/B/C RMSNorms, out_proj. The
    selective scan does ~9 FLOPs per channel per state element (discretise exp(dt*A), dt*B*x,
    h = dA*h + dBx, y = C.h). Costed with Mamba-2's TP scheme (heads = channels): x_proj's small
    all-reduce (dt_rank + 2N per token) is not counted.

    The SSD kernels' backward FLOPs and HBM traffic: ``ssd_traffic``. Mamba-1's selective scan
    is one fused kernel holding its state on chip (no state traffic; backward 2x its FLOPs).

    Stored for backward per token: in_proj output, conv output, scan output and the gated-norm
    output (out_proj input) TP-sharded; the block input and normed input per sequence shard.
    ``state_elems_per_seq``: conv state (conv_kernel x conv_dim) + SSM state (d_inner x N).
    """
    h, m = spec.hidden, spec.mamba
    n, k = m.state_dim, m.conv_kernel
    gemms: tuple[Gemm, ...]
    if m.version == 2:
        d = m.num_heads * m.head_dim
        bc = 2 * m.num_groups * n
        conv_dim = d + bc
        gemms = (
            Gemm(name="in_proj", in_dim=h, out_dim=2 * d + bc + m.num_heads, tp_split="out"),
            Gemm(name="out_proj", in_dim=d, out_dim=h, tp_split="in"),
        )
        extra_params = conv_dim * k + conv_dim + 3 * m.num_heads + d  # conv + bias, dt/A/D, norm
        q = m.chunk_size
        scan = 2 * q * m.num_groups * n + 2 * q * d + 4 * n * d + 2 * k * conv_dim
        ssd = ssd_traffic(m.num_heads, m.head_dim, n, m.num_groups, q)
        # the conv's backward: recomputed forward + input and weight gradients
        scan_backward = ssd.backward_flops + 3 * 2 * k * conv_dim
        scan_bytes, scan_backward_bytes = ssd.forward_bytes, ssd.backward_bytes
        act_tp = (2 * d + bc + m.num_heads) + conv_dim + d + d
        # megatron-core _ssm_training copies the in_proj output to batch-major and the scan
        # output back (rearrange(...).contiguous()): read + write of each
        copies = 2 * (2 * d + bc + m.num_heads) + 2 * d
        chunk = q
    else:
        d = m.expand * h
        r = m.dt_rank or -(-h // 16)
        conv_dim = d
        gemms = (
            Gemm(name="in_proj", in_dim=h, out_dim=2 * d, tp_split="out"),
            Gemm(name="x_proj", in_dim=d, out_dim=r + 2 * n, tp_split="in"),
            Gemm(name="dt_proj", in_dim=r, out_dim=d, tp_split="out"),
            Gemm(name="out_proj", in_dim=d, out_dim=h, tp_split="in"),
        )
        # conv + bias, dt_proj bias, A, D, dt/B/C norms
        extra_params = d * k + d + d + d * n + d + (r + 2 * n)
        scan = 9 * d * n + 2 * k * d
        act_tp = 2 * d + d + (r + 2 * n) + d + d + d
        scan_backward, scan_bytes, scan_backward_bytes, copies = 0, 0.0, 0.0, 0
        chunk = 0
    return Layer(
        name=f"mamba_{i}",
        kind=LayerKind.MAMBA,
        block=i,
        params=sum(g.params for g in gemms) + extra_params + _norm_params(spec),
        gemms=gemms,
        act_tp_elems=act_tp,
        act_sp_elems=2 * h,
        act_tp_gemm_elems=d,
        act_sp_gemm_elems=h,
        # norm, residual, conv, gate + norm, layout copies
        mem_bound_elems=2 * h + 3 * h + 2 * conv_dim + 4 * d + copies,
        shardable=("tp", "sp"),
        scan_flops_per_token=scan,
        scan_chunk=chunk,
        scan_backward_flops_per_token=scan_backward,
        scan_bytes_per_token=scan_bytes,
        scan_backward_bytes_per_token=scan_backward_bytes,
        state_elems_per_seq=k * conv_dim + d * n,
    )


def _vision_layers(spec: ModelSpec) -> list[Layer]:
    """A ViT encoder over image patch tokens (spec.vision): patch embedding, pre-norm blocks of
    bidirectional attention (windowed but every ``full_attention_every``-th) and a (gated) MLP,
    then the merger (norm, merge^2 patches concatenated, MLP to the decoder's hidden size).
    Per-token numbers are per patch token (the merger's per merged token); TP shards heads and
    MLP width as in a decoder block."""
    v = spec.vision
    h, f, tokens = v.hidden, v.ffn_hidden, v.image_tokens
    gated = v.activation.is_gated
    up = 2 * f if gated else f
    pixels = 3 * v.temporal_patch * v.patch_size**2
    out = [
        Layer(
            name="vision_patch_embed",
            kind=LayerKind.VISION,
            block=-1,
            params=pixels * h,
            gemms=(Gemm(name="patch", in_dim=pixels, out_dim=h, tp_split="none"),),
            act_sp_gemm_elems=pixels,
            act_sp_elems=pixels,
            mem_bound_elems=pixels + h,
            shardable=("tp",),
            causal=False,
            tokens_per_sample=tokens,
        )
    ]
    gemms: tuple[Gemm, ...]
    for j in range(v.num_layers):
        full = not v.window or (v.full_attention_every and (j + 1) % v.full_attention_every == 0)
        gemms = (
            Gemm(name="qkv", in_dim=h, out_dim=3 * h, tp_split="out"),
            Gemm(name="proj", in_dim=h, out_dim=h, tp_split="in"),
            Gemm(name="fc1", in_dim=h, out_dim=up, tp_split="out"),
            Gemm(name="fc2", in_dim=f, out_dim=h, tp_split="in"),
        )
        out.append(
            Layer(
                name=f"vision_block_{j}",
                kind=LayerKind.VISION,
                block=-1,
                params=sum(g.params for g in gemms) + 2 * h,  # + two RMSNorms
                gemms=gemms,
                attn_core_flops_per_token_per_seq=4 * h,
                act_tp_elems=4 * h + up + f,  # Q, K, V, attention out; MLP act in / out
                act_sp_elems=4 * h,  # two norm inputs, qkv and fc1 inputs
                act_tp_gemm_elems=h + f,
                act_sp_gemm_elems=2 * h,
                act_quadratic_heads=v.num_heads,
                mem_bound_elems=2 * (2 * h + 3 * h) + 4 * h + up + f,  # norms, residuals, rotary, act
                shardable=("tp", "sp"),
                window=0 if full else v.window,
                causal=False,
                tokens_per_sample=tokens,
            )
        )
    merged = h * v.merge**2
    width = v.projector_hidden or merged
    gemms = (
        Gemm(name="merger_fc1", in_dim=merged, out_dim=width, tp_split="out"),
        Gemm(name="merger_fc2", in_dim=width, out_dim=spec.hidden, tp_split="in"),
    )
    out.append(
        Layer(
            name="vision_merger",
            kind=LayerKind.PROJECTOR,
            block=-1,
            params=sum(g.params for g in gemms) + h,  # + the RMSNorm before merging
            gemms=gemms,
            act_tp_elems=2 * width,
            act_sp_elems=2 * merged,
            act_tp_gemm_elems=width,
            act_sp_gemm_elems=merged,
            mem_bound_elems=2 * merged + 2 * width,
            shardable=("tp", "sp"),
            causal=False,
            tokens_per_sample=tokens,
            tokens_merged=v.merge**2,
        )
    )
    return out


def _mtp_layers(spec: ModelSpec, k: int) -> list[Layer]:
    """Multi-token-prediction module k (DeepSeek-V3, arXiv:2412.19437 Sec. 2.2; Megatron-Core
    MultiTokenPredictionLayer): RMSNorm of the hidden state and of the next token's embedding
    (the shared embedding), their concatenation projected 2h -> h (eh_proj), one block shaped
    like the model's last one, a final norm and the shared LM head with its loss. Runs on the
    last stage after the LM head."""
    h = spec.hidden
    proj = Layer(
        name=f"mtp_{k}_proj",
        kind=LayerKind.MTP,
        block=-1,
        params=2 * h + 2 * h * h,
        gemms=(Gemm(name="eh_proj", in_dim=2 * h, out_dim=h, tp_split="out"),),
        act_sp_elems=4 * h,  # the two norm inputs, the concatenated projection input
        act_sp_gemm_elems=2 * h,
        mem_bound_elems=2 * h + 4 * h + 2 * h,  # embedding lookup, two norms
        shardable=("tp", "sp"),
    )
    block = [
        replace(ly, name=f"mtp_{k}_{ly.name.split('_')[0]}", block=-1)
        for ly in _block(spec, spec.num_layers - 1)
    ]
    return [
        proj,
        *block,
        _final_norm(spec, f"mtp_{k}_norm"),
        _lm_head(spec, f"mtp_{k}_head", shared=True),
    ]
