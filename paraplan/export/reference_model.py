"""Tiny Llama-style reference model used by the PyTorch-native export target.

The model follows torchtitan's Llama layout so that the same module names work for
tensor, pipeline and data parallelism: ``tok_embeddings``, ``layers.<i>``, ``norm``
and ``lm_head`` (untied). Each block is RMSNorm -> causal SDPA attention with
rotary embeddings and optional grouped-query heads -> RMSNorm -> SwiGLU MLP.

Pipeline stages are built by deleting modules from a full copy (setting
``tok_embeddings``, ``norm`` or ``lm_head`` to ``None`` and popping entries of the
``layers`` ``ModuleDict``), so parameter names stay identical to the full model.

Tensor parallelism: the attention module reads the local head count and sequence
length from its q/k/v projection outputs, never from its input, so it works with
column-sharded projections and with sequence-parallel (sequence-sharded) inputs.

This file is also embedded verbatim into the generated ``torch_plan.py`` script by
``paraplan.export.torch_plan`` (it is read as text, not imported), so it must stay
standalone: it imports only ``torch`` and the standard library. It imports torch at
module level; nothing in paraplan's core may import this module.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "Attention",
    "AttentionCore",
    "FeedForward",
    "ModelArgs",
    "RMSNorm",
    "Transformer",
    "TransformerBlock",
]

ROPE_THETA = 10000.0  # rotary base, Su et al. 2021, arXiv:2104.09864, Sec. 3.4.2
RMS_NORM_EPS = 1e-6  # Llama 2 default (meta-llama/llama, model.py)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelArgs:
    """Shape of the reference model; defaults are the tiny test configuration."""

    vocab_size: int = 64
    dim: int = 32
    num_heads: int = 4
    num_kv_heads: int = 2
    ffn_dim: int = 64
    num_layers: int = 2

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.dim // self.num_heads


class RMSNorm(nn.Module):
    """Root-mean-square layer norm (Zhang and Sennrich 2019, arXiv:1910.07467)."""

    def __init__(self, dim: int, eps: float = RMS_NORM_EPS) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise the last dimension and scale by ``weight``."""
        rms = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return x * rms * self.weight


def _apply_rope(x: torch.Tensor) -> torch.Tensor:
    """Rotate-half rotary embedding of ``x`` shaped (batch, heads, seq, head_dim)."""
    seq_len, head_dim = x.shape[-2], x.shape[-1]
    half = head_dim // 2
    inv_freq = ROPE_THETA ** (-torch.arange(half, dtype=x.dtype, device=x.device) / half)
    positions = torch.arange(seq_len, dtype=x.dtype, device=x.device)
    angles = torch.outer(positions, inv_freq)
    cos = torch.cat([angles.cos(), angles.cos()], dim=-1)
    sin = torch.cat([angles.sin(), angles.sin()], dim=-1)
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class AttentionCore(nn.Module):
    """Parameter-free attention core: RoPE, GQA head repeat and causal SDPA.

    Kept as its own module so selective recompute can checkpoint exactly this part.
    """

    def forward(self, xq: torch.Tensor, xk: torch.Tensor, xv: torch.Tensor) -> torch.Tensor:
        """Attend (batch, heads, seq, head_dim) queries to keys/values causally."""
        xq, xk = _apply_rope(xq), _apply_rope(xk)
        repeats = xq.shape[1] // xk.shape[1]
        if repeats > 1:
            xk = xk.repeat_interleave(repeats, dim=1)
            xv = xv.repeat_interleave(repeats, dim=1)
        return F.scaled_dot_product_attention(xq, xk, xv, is_causal=True)


class Attention(nn.Module):
    """Multi-head attention with grouped-query key/value heads."""

    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.head_dim = args.head_dim
        self.wq = nn.Linear(args.dim, args.num_heads * args.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, args.num_kv_heads * args.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, args.num_kv_heads * args.head_dim, bias=False)
        self.wo = nn.Linear(args.num_heads * args.head_dim, args.dim, bias=False)
        self.core = AttentionCore()

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, seq, heads*head_dim) -> (batch, heads, seq, head_dim)."""
        batch, seq_len, width = x.shape
        return x.view(batch, seq_len, width // self.head_dim, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Self-attention; head count and seq length come from the projections."""
        xq = self._split_heads(self.wq(x))
        xk = self._split_heads(self.wk(x))
        xv = self._split_heads(self.wv(x))
        out = self.core(xq, xk, xv)
        batch, heads, seq_len, head_dim = out.shape
        out = out.transpose(1, 2).reshape(batch, seq_len, heads * head_dim)
        return self.wo(out)


class FeedForward(nn.Module):
    """SwiGLU MLP (Shazeer 2020, arXiv:2002.05202): w2(silu(w1 x) * w3 x)."""

    def __init__(self, dim: int, ffn_dim: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, ffn_dim, bias=False)
        self.w2 = nn.Linear(ffn_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, ffn_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Gated MLP."""
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    """Pre-norm residual block: attention then SwiGLU MLP."""

    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(args.dim)
        self.attention = Attention(args)
        self.ffn_norm = RMSNorm(args.dim)
        self.feed_forward = FeedForward(args.dim, args.ffn_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Two residual sub-layers."""
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    """Decoder-only LM; any of its top-level parts may be removed for a PP stage."""

    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.args = args
        self.tok_embeddings: nn.Embedding | None = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleDict({str(i): TransformerBlock(args) for i in range(args.num_layers)})
        self.norm: RMSNorm | None = RMSNorm(args.dim)
        self.lm_head: nn.Linear | None = nn.Linear(args.dim, args.vocab_size, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token ids (or hidden states on a later PP stage) -> logits or hidden."""
        h = self.tok_embeddings(tokens) if self.tok_embeddings is not None else tokens
        for layer in self.layers.values():
            h = layer(h)
        if self.norm is not None:
            h = self.norm(h)
        return self.lm_head(h) if self.lm_head is not None else h
