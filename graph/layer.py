"""One node of the layer graph: a :class:`Layer` of some :class:`LayerKind`, with its GEMMs
(:class:`Gemm`) and, for a mixture-of-experts layer, its routed :class:`Experts`.

Counts are per token for one forward pass; activation sizes are in elements per token (bytes come
from ``cost/``), split into the parts that tensor/sequence/context parallelism shard differently
(Korthikanti et al. 2022, arXiv:2205.05198, Sec. 4). graph/layers.py orders the layers into the
graph; the per-kind constructors (graph/decoder_layers.py, mamba_layers.py, vision_layers.py)
fill in the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

__all__ = ["LayerKind", "Gemm", "Experts", "Layer"]


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
    # Megatron-Core's fp32 per-expert fc2 bias pass per routed copy (graph/decoder_layers.py
    # EXPERT_BIAS_ELEMS): a training framework's pass, apart so that serving engines, which fuse
    # the bias into the GEMM, do not pay it
    bias_pass_elems: float = 0.0

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
    # Megatron-Core MLA's query / key / value materialisation beyond the rotary part of
    # mem_bound_elems (multi_latent_attention.py qkv_up_proj_and_rope_apply: the up-projections'
    # outputs read and query, key, value written whole, per token, TP-sharded; graph/
    # decoder_layers.py MLA); a training framework's pass, so apart: serving engines run their own
    # MLA kernels (cost/serving_step.py reads mem_bound_elems only)
    qkv_copy_elems: float = 0.0

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
