"""Model FLOPs per token (the MFU numerator), independent of how the step is run.

Formula: 3 x forward, forward = 2 x (matmul parameters, LM head included) + causal attention
2 x 2 x q_dim x seq / 2 per layer, i.e. 6*N_matmul + 6*L*q_dim*s. This is the PaLM-style 6N +
attention count (Chowdhery et al. 2022, arXiv:2204.02311 App. B) with attention halved for causal
masking, as Megatron-Bridge counts it (docs/published_runs.md Sec. 3.5). For MoE models
N_matmul counts the active weights (top_k routed experts, shared experts, router), for MLA the
core attention is q.k over qk dims plus softmax.v over v dims, as Megatron-Bridge does.

Layer kinds: sliding-window and chunked layers count the keys they attend
(compute.attended_keys); Mamba layers their scan FLOPs; vision layers their work per image patch
token times the model's default image tokens per sample over seq_len (per text token); the MTP
modules count like any layer (they run every step).
"""

from __future__ import annotations

from functools import lru_cache

from paraplan.cost.compute import attended_keys
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


@lru_cache(maxsize=256)
def model_flops_per_token(spec: ModelSpec, seq_len: int) -> float:
    """Formula: 3 * sum over layers of (GEMM + scan + attn_core * attended_keys) FLOPs, each
    times its tokens per text token (1; a vision layer's image tokens / seq_len), i.e.
    6 * N_matmul + 6 * L * q_dim * seq_len / 2 for causal full attention. Units: FLOPs per
    token."""
    total = 0.0
    for ly in build_graph(spec).layers():
        per_token: float = ly.gemm_flops_per_token + ly.scan_flops_per_token
        if ly.attn_core_flops_per_token_per_seq:
            seq = ly.tokens_per_sample / ly.tokens_merged if ly.tokens_per_sample else seq_len
            per_token += ly.attn_core_flops_per_token_per_seq * attended_keys(ly, seq)
        scale = ly.tokens_per_sample / ly.tokens_merged / seq_len if ly.tokens_per_sample else 1.0
        total += 3.0 * per_token * scale
    return total
