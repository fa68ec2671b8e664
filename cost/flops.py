"""Model FLOPs per token (the MFU numerator), independent of how the step is run.

Formula: 3 x forward, forward = 2 x (matmul parameters, LM head included) + causal attention
2 x 2 x q_dim x seq / 2 per layer, i.e. 6*N_matmul + 6*L*q_dim*s. This is the PaLM-style 6N +
attention count (Chowdhery et al. 2022, arXiv:2204.02311 App. B) with attention halved for causal
masking, as Megatron-Bridge counts it (docs/published_runs.md Sec. 3.5). For MoE models
N_matmul counts the active weights (top_k routed experts, shared experts, router), for MLA the
core attention is q.k over qk dims plus softmax.v over v dims, as Megatron-Bridge does.
"""

from __future__ import annotations

from functools import lru_cache

from paraplan.graph import ModelSpec, build_graph

__all__ = ["model_flops_per_token", "matmul_params"]


@lru_cache(maxsize=64)
def _per_token(spec: ModelSpec) -> tuple[int, float]:
    """(GEMM FLOPs per token, attention-core FLOPs per token per sequence token) of the model."""
    layers = build_graph(spec).layers()
    return (
        sum(ly.gemm_flops_per_token for ly in layers),
        sum(ly.attn_core_flops_per_token_per_seq for ly in layers),
    )


def matmul_params(spec: ModelSpec) -> int:
    """Parameters that take part in a matmul per token: every GEMM weight (LM head included;
    of the routed experts, the top_k a token uses)."""
    return _per_token(spec)[0] // 2


def model_flops_per_token(spec: ModelSpec, seq_len: int) -> float:
    """Formula: 6 * N_matmul + 3 * sum_layers attn_core * seq_len / 2 (causal), i.e.
    6 * N_matmul + 6 * L * q_dim * seq_len for standard attention. Units: FLOPs per token."""
    return 6.0 * matmul_params(spec) + 1.5 * _per_token(spec)[1] * seq_len
