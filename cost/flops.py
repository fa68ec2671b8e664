"""Model FLOPs per token (the MFU numerator), independent of how the step is run.

Formula: 3 x forward, forward = 2 x (matmul parameters, LM head included) + causal attention
2 x 2 x q_dim x seq / 2 per layer, i.e. 6*N_matmul + 6*L*q_dim*s. This is the PaLM-style 6N +
attention count (Chowdhery et al. 2022, arXiv:2204.02311 App. B) with attention halved for causal
masking, as Megatron-Bridge counts it (shared/docs/published_runs.md Sec. 3.5).
"""

from __future__ import annotations

from paraplan.graph import ModelSpec, build_graph

__all__ = ["model_flops_per_token", "matmul_params"]


def matmul_params(spec: ModelSpec) -> int:
    """Parameters that take part in a matmul per token: every GEMM weight (LM head included)."""
    return sum(g.in_dim * g.out_dim for ly in build_graph(spec).layers() for g in ly.gemms)


def model_flops_per_token(spec: ModelSpec, seq_len: int) -> float:
    """Formula: 6 * N_matmul + 6 * L * q_dim * seq_len (causal). Units: FLOPs per token."""
    return 6.0 * matmul_params(spec) + 6.0 * spec.num_layers * spec.q_dim * seq_len
