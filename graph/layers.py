"""The model as a networkx DiGraph of layers, each with FLOPs, parameters and activation sizes.

Nodes, in order: ``embedding``, then ``attn_i`` and ``mlp_i`` for each block i, ``final_norm``,
``lm_head`` (logits and loss). Every node carries a :class:`Layer`. Counts are per token for one
forward pass; activation sizes are in elements per token (bytes come from ``cost/``), split into the
parts that tensor/sequence/context parallelism shard differently (Korthikanti et al. 2022,
arXiv:2205.05198, Sec. 4).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property

import networkx as nx
from paraplan.graph.spec import ModelSpec

__all__ = ["LayerKind", "Gemm", "Layer", "LayerGraph", "build_graph"]


class LayerKind(StrEnum):
    EMBEDDING = "embedding"
    ATTENTION = "attention"
    MLP = "mlp"
    FINAL_NORM = "final_norm"
    LM_HEAD = "lm_head"


@dataclass(frozen=True, slots=True, kw_only=True)
class Gemm:
    """One matrix multiply per token: ``in_dim`` x ``out_dim``; ``tp_split`` which dim TP shards."""

    name: str
    in_dim: int
    out_dim: int
    tp_split: str  # "out" (column parallel) or "in" (row parallel)

    @property
    def flops_per_token(self) -> int:
        return 2 * self.in_dim * self.out_dim


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

    @property
    def gemm_flops_per_token(self) -> int:
        return sum(g.flops_per_token for g in self.gemms)


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

    @property
    def num_params(self) -> int:
        return sum(ly.params for ly in self.layers())


def _attention(spec: ModelSpec, i: int) -> Layer:
    h, q, kv = spec.hidden, spec.q_dim, spec.kv_dim
    gemms = (Gemm(name="qkv", in_dim=h, out_dim=q + 2 * kv, tp_split="out"),
             Gemm(name="proj", in_dim=q, out_dim=h, tp_split="in"))
    norm_params = 2 * h if spec.norm == "layernorm" else h
    # Korthikanti 2022 Sec 4.1, generalised to GQA: Q,K (QK^T input), V, attention output (proj
    # input) are TP-sharded; norm input, QKV input and the dropout mask are not (without SP).
    act_tp = q + kv + kv + q
    act_sp = h + h + (h / 2 if spec.dropout else 0.0)  # norm in, qkv in, dropout mask (1 B of 2)
    return Layer(
        name=f"attn_{i}", kind=LayerKind.ATTENTION, block=i,
        params=sum(g.in_dim * g.out_dim for g in gemms) + norm_params,
        gemms=gemms,
        attn_core_flops_per_token_per_seq=4 * q,
        act_tp_elems=act_tp, act_sp_elems=act_sp, act_tp_gemm_elems=q, act_sp_gemm_elems=h,
        act_quadratic_heads=spec.num_heads,
        mem_bound_elems=2 * h + 3 * h + 2 * (q + kv),  # norm, residual add, rotary
        shardable=("tp", "sp", "cp"),
    )


def _mlp(spec: ModelSpec, i: int) -> Layer:
    h, f = spec.hidden, spec.ffn_hidden
    gated = spec.activation.is_gated
    up = 2 * f if gated else f
    gemms = (Gemm(name="fc1", in_dim=h, out_dim=up, tp_split="out"),
             Gemm(name="fc2", in_dim=f, out_dim=h, tp_split="in"))
    norm_params = 2 * h if spec.norm == "layernorm" else h
    # Korthikanti: fc1 input (sp), activation input (up elems), activation output (f), dropout mask.
    act_tp = up + f
    act_sp = h + h + (h / 2 if spec.dropout else 0.0)
    return Layer(
        name=f"mlp_{i}", kind=LayerKind.MLP, block=i,
        params=sum(g.in_dim * g.out_dim for g in gemms) + norm_params,
        gemms=gemms,
        act_tp_elems=act_tp, act_sp_elems=act_sp, act_tp_gemm_elems=f, act_sp_gemm_elems=h,
        mem_bound_elems=2 * h + 3 * h + up + f,  # norm, residual add, activation
        shardable=("tp", "sp", "cp"),
    )


def build_graph(spec: ModelSpec) -> LayerGraph:
    """Layer graph of a GPT- or Llama-style decoder (GQA, SwiGLU or GeLU, tied or untied)."""
    h, v = spec.hidden, spec.vocab
    g = nx.DiGraph()
    nodes: list[Layer] = [
        Layer(name="embedding", kind=LayerKind.EMBEDDING, block=-1, params=v * h,
              act_sp_elems=0.0, mem_bound_elems=2 * h, shardable=("tp",)),
    ]
    for i in range(spec.num_layers):
        nodes += [_attention(spec, i), _mlp(spec, i)]
    nodes.append(Layer(name="final_norm", kind=LayerKind.FINAL_NORM, block=-1,
                       params=2 * h if spec.norm == "layernorm" else h,
                       act_sp_elems=h, mem_bound_elems=2 * h, shardable=("sp",)))
    nodes.append(Layer(
        name="lm_head", kind=LayerKind.LM_HEAD, block=-1,
        params=0 if spec.tied_embeddings else v * h,
        gemms=(Gemm(name="logits", in_dim=h, out_dim=v, tp_split="out"),),
        act_sp_elems=h, mem_bound_elems=3 * v, shardable=("tp",),
    ))
    for a, b in zip(nodes, nodes[1:], strict=False):
        g.add_node(a.name, layer=a)
        g.add_node(b.name, layer=b)
        g.add_edge(a.name, b.name)
    return LayerGraph(spec, g)
