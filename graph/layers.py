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

This module orders the layers into the graph (:func:`build_graph`: the head, each block's layers
by its PATTERN_SYMBOLS, the tail and the MTP modules) and holds :class:`LayerGraph`. The node type
is graph/layer.py's :class:`Layer`; each kind's numbers come from its constructor in
graph/decoder_layers.py (attention, MLA, MLP, MoE, final norm, LM head), graph/mamba_layers.py
(Mamba, with the SSD kernels' traffic) or graph/vision_layers.py (the ViT encoder).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import networkx as nx
from paraplan.graph.decoder_layers import (
    attention_layer,
    final_norm_layer,
    lm_head_layer,
    mla_attention_layer,
    mlp_layer,
    moe_layer,
)
from paraplan.graph.layer import Gemm, Layer, LayerKind
from paraplan.graph.mamba_layers import mamba_layer
from paraplan.graph.spec import ModelSpec
from paraplan.graph.vision_layers import vision_layers

__all__ = ["LayerGraph", "build_graph"]


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
        return list(self._blocks.get(block, ()))

    @cached_property
    def _blocks(self) -> dict[int, tuple[Layer, ...]]:
        """Each block index's layers in execution order (``block_layers``, asked per cost term)."""
        out: dict[int, list[Layer]] = {}
        for ly in self._ordered:
            out.setdefault(ly.block, []).append(ly)
        return {block: tuple(layers) for block, layers in out.items()}

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

    @cached_property
    def head_names(self) -> tuple[str, ...]:
        """Layers before the first block (embedding; a vision encoder): the first stage's."""
        return tuple(ly.name for ly in self._ordered[: self._first_block_at])

    @cached_property
    def tail_names(self) -> tuple[str, ...]:
        """Layers after the last block (final norm, LM head and loss, MTP): the last stage's."""
        last = max(i for i, ly in enumerate(self._ordered) if ly.block >= 0)
        return tuple(ly.name for ly in self._ordered[last + 1 :])

    @cached_property
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


def build_graph(spec: ModelSpec) -> LayerGraph:
    """Layer graph of a decoder: GPT-, Llama-, Mixtral- or DeepSeek-style blocks (GQA or MLA,
    full, sliding-window or chunked attention, SwiGLU/GeGLU or GeLU, dense or mixture-of-experts
    MLPs, tied or untied), or a hybrid pattern of Mamba, attention and MLP layers; with a vision
    encoder in front (``spec.vision``) and multi-token-prediction modules behind
    (``spec.mtp_layers``)."""
    h, v = spec.hidden, spec.vocab
    g = nx.DiGraph()
    nodes: list[Layer] = vision_layers(spec) if spec.vision.num_layers else []
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
    nodes.append(final_norm_layer(spec, "final_norm"))
    nodes.append(lm_head_layer(spec, "lm_head", shared=spec.tied_embeddings))
    for k in range(spec.mtp_layers):
        nodes += _mtp_layers(spec, k)
    for a, b in zip(nodes, nodes[1:], strict=False):
        g.add_node(a.name, layer=a)
        g.add_node(b.name, layer=b)
        g.add_edge(a.name, b.name)
    return LayerGraph(spec, g)


def _block(spec: ModelSpec, i: int) -> list[Layer]:
    """The layers of block i, one per PATTERN_SYMBOLS character of spec.block_symbols(i)."""
    out = []
    for symbol in spec.block_symbols(i):
        if symbol == "*":
            out.append(mla_attention_layer(spec, i) if spec.is_mla else attention_layer(spec, i))
        elif symbol == "M":
            out.append(mamba_layer(spec, i))
        else:
            out.append(moe_layer(spec, i) if symbol == "E" else mlp_layer(spec, i))
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
        final_norm_layer(spec, f"mtp_{k}_norm"),
        lm_head_layer(spec, f"mtp_{k}_head", shared=True),
    ]
