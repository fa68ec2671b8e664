"""The model as a networkx DiGraph of layers, each with FLOPs, parameters and activation sizes.

Nodes, in order: ``embedding``, then ``attn_i`` and ``mlp_i`` for each block i, ``final_norm``,
``lm_head`` (logits and loss). ``mlp_i`` is a dense MLP (kind ``mlp``) or, in mixture-of-experts
models, a routed-expert layer (kind ``moe``: router, shared experts, and an :class:`Experts` part
whose per-token numbers are per routed token copy). Every node carries a :class:`Layer`. Counts
are per token for one forward pass; activation sizes are in elements per token (bytes come from
``cost/``), split into the parts that tensor/sequence/context parallelism shard differently
(Korthikanti et al. 2022, arXiv:2205.05198, Sec. 4).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cached_property

import networkx as nx
from paraplan.graph.spec import ModelSpec

__all__ = ["LayerKind", "Gemm", "Experts", "Layer", "LayerGraph", "build_graph"]


class LayerKind(StrEnum):
    EMBEDDING = "embedding"
    ATTENTION = "attention"
    MLP = "mlp"
    MOE = "moe"
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
    spec: ModelSpec
    graph: nx.DiGraph

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
        return next((i for i in range(self.spec.num_layers) if not self.spec.is_moe_layer(i)), None)


def _attention(spec: ModelSpec, i: int) -> Layer:
    h, q, kv = spec.hidden, spec.q_dim, spec.kv_dim
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
        mem_bound_elems=2 * h + 3 * h + 2 * (q + kv),  # norm, residual add, rotary
        shardable=("tp", "sp", "cp"),
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
    )


def _moe(spec: ModelSpec, i: int) -> Layer:
    """Router, shared experts and routed experts (Megatron-Core MoELayer; Fedus et al. 2021,
    arXiv:2101.03961; DeepSeekMoE arXiv:2401.06066 for shared experts).

    Per token: router h x E GEMM (replicated over TP) and softmax/top-k; shared experts as a dense
    MLP of width shared_ffn_hidden; each of the top_k routed copies is permuted (h read + written),
    run through one expert, unpermuted (h read + written) and weighted into the output.
    """
    h, f, e = spec.hidden, spec.moe_ffn_hidden, spec.num_experts
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
    experts = Experts(
        num_experts=e,
        top_k=spec.top_k,
        gemms=(
            Gemm(name="expert_fc1", in_dim=h, out_dim=up, tp_split="out"),
            Gemm(name="expert_fc2", in_dim=f, out_dim=h, tp_split="in"),
        ),
        # per routed copy: fc1 input (kept as all-gathered over TP), the activation's input and
        # output (TP-sharded), the expert output kept for the combine (sequence shard)
        act_gathered_elems=h,
        act_tp_elems=up + f,
        act_sp_elems=h,
        act_gathered_gemm_elems=h,
        act_tp_gemm_elems=f,
        mem_bound_elems=4 * h + up + f,  # permute + unpermute (read + write), activation
    )
    norm_params = 2 * h if spec.norm == "layernorm" else h
    # norm input, normed input (router and shared-expert input), router logits/probs (fp32: 2
    # elements of 2 B each), shared-expert activations
    act_sp = 2 * h + 2 * 2 * e + (h / 2 if spec.dropout else 0.0)
    return Layer(
        name=f"mlp_{i}",
        kind=LayerKind.MOE,
        block=i,
        params=sum(g.params for g in gemms) + experts.params + norm_params,
        gemms=gemms,
        act_tp_elems=up_s + fs,
        act_sp_elems=act_sp,
        act_tp_gemm_elems=fs,
        act_sp_gemm_elems=h if fs else 0.0,
        mem_bound_elems=2 * h + 3 * h + up_s + fs + 4 * e,  # norm, residual, shared act., router
        shardable=("tp", "sp", "cp", "ep"),
        experts=experts,
    )


def build_graph(spec: ModelSpec) -> LayerGraph:
    """Layer graph of a GPT-, Llama-, Mixtral- or DeepSeek-style decoder (GQA or MLA, SwiGLU or
    GeLU, dense or mixture-of-experts MLPs, tied or untied)."""
    h, v = spec.hidden, spec.vocab
    g = nx.DiGraph()
    nodes: list[Layer] = [
        Layer(
            name="embedding",
            kind=LayerKind.EMBEDDING,
            block=-1,
            params=v * h,
            act_sp_elems=0.0,
            mem_bound_elems=2 * h,
            shardable=("tp",),
        ),
    ]
    for i in range(spec.num_layers):
        attention = _mla_attention(spec, i) if spec.is_mla else _attention(spec, i)
        nodes += [attention, _moe(spec, i) if spec.is_moe_layer(i) else _mlp(spec, i)]
    nodes.append(
        Layer(
            name="final_norm",
            kind=LayerKind.FINAL_NORM,
            block=-1,
            params=2 * h if spec.norm == "layernorm" else h,
            act_sp_elems=h,
            mem_bound_elems=2 * h,
            shardable=("sp",),
        )
    )
    nodes.append(
        Layer(
            name="lm_head",
            kind=LayerKind.LM_HEAD,
            block=-1,
            params=0 if spec.tied_embeddings else v * h,
            gemms=(Gemm(name="logits", in_dim=h, out_dim=v, tp_split="out"),),
            act_sp_elems=h,
            mem_bound_elems=3 * v,
            shardable=("tp",),
        )
    )
    for a, b in zip(nodes, nodes[1:], strict=False):
        g.add_node(a.name, layer=a)
        g.add_node(b.name, layer=b)
        g.add_edge(a.name, b.name)
    return LayerGraph(spec, g)
