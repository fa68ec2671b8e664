"""The parts a model's architecture is made of, each a small frozen dataclass or a fixed set of
names: the MLP :class:`Activation`, Megatron's hybrid ``PATTERN_SYMBOLS``, a state-space
:class:`Mamba` mixer, a :class:`Vision` encoder, :class:`Rope` settings and the MoE
:class:`Router`, with the names a position embedding, a RoPE scaling and a router may take.
graph/spec.py's ModelSpec holds them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "Activation",
    "PATTERN_SYMBOLS",
    "Mamba",
    "Vision",
    "POSITION_EMBEDDINGS",
    "ROPE_SCALINGS",
    "ROUTER_SCORES",
    "ROUTER_BALANCES",
    "Rope",
    "Router",
]


class Activation(StrEnum):
    GELU = "gelu"
    SWIGLU = "swiglu"
    GEGLU = "geglu"  # gated GELU (tanh approximation), Gemma (Shazeer 2020, arXiv:2002.05202)
    RELU = "relu"
    RELU2 = "relu2"

    @property
    def is_gated(self) -> bool:
        """act(gate) * up: two up-projections (SwiGLU, GeGLU)."""
        return self in (Activation.SWIGLU, Activation.GEGLU)


PATTERN_SYMBOLS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
"""Megatron's hybrid layer pattern (``--hybrid-override-pattern``): one character per layer,
Mamba mixer, self-attention, dense MLP or MoE MLP (megatron-core 0.16.1
megatron/core/ssm/mamba_hybrid_layer_allocation.py, class Symbols)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Mamba:
    """Sizes of a state-space (Mamba) mixer; ``version`` 0 = the model has none.

    Mamba-2 (Dao & Gu 2024, arXiv:2405.21060; megatron-core 0.16.1 ssm/mamba_mixer.py): d_inner =
    num_heads * head_dim, B and C shared by ``num_groups`` groups of heads, state ``state_dim``
    per head channel, a depthwise causal conv of ``conv_kernel`` taps over x, B, C, the SSD scan
    in chunks of ``chunk_size`` tokens (Megatron default 128). Mamba-1 (Gu & Dao 2023,
    arXiv:2312.00752; Jamba): d_inner = expand * hidden, a per-channel state of ``state_dim``, the
    input-dependent dt through a ``dt_rank`` bottleneck (0: ceil(hidden / 16))."""

    version: int = 0  # 0 none, 1 Mamba-1 (Jamba), 2 Mamba-2 (Nemotron-H)
    num_heads: int = 0  # Mamba-2 heads
    head_dim: int = 64  # Mamba-2 channels per head
    num_groups: int = 1  # Mamba-2 B/C groups
    state_dim: int = 128  # N
    conv_kernel: int = 4  # d_conv
    expand: int = 2  # Mamba-1: d_inner = expand * hidden
    dt_rank: int = 0  # Mamba-1: 0 = ceil(hidden / 16)
    chunk_size: int = 128  # Mamba-2 SSD chunk length Q


@dataclass(frozen=True, slots=True, kw_only=True)
class Vision:
    """A ViT encoder in front of the decoder (``num_layers`` 0 = none), run over image patch
    tokens: a patch embedding (Conv over ``patch_size``^2 x ``temporal_patch`` x 3 pixels),
    ``num_layers`` pre-norm blocks (attention + MLP), then a merger/projector that concatenates
    ``merge``^2 neighbouring patches and maps them through an MLP of width ``projector_hidden``
    to the decoder's hidden size (Qwen2.5-VL: Bai et al. 2025, arXiv:2502.13923; transformers
    modeling_qwen2_5_vl.py). Blocks attend inside windows of ``window`` patches except every
    ``full_attention_every``-th block (block i full when (i + 1) % n == 0), which attends over
    the whole image. ``image_tokens``: patch tokens per sample a job feeds the encoder unless
    the job sets ``image_tokens`` (a 448 x 448 image = 32 x 32 = 1,024 patches of 14 px)."""

    num_layers: int = 0
    hidden: int = 0
    ffn_hidden: int = 0
    num_heads: int = 1
    activation: Activation = Activation.GELU
    patch_size: int = 14
    temporal_patch: int = 1
    window: int = 0  # patches per attention window; 0 = every block attends to the whole image
    full_attention_every: int = 0
    merge: int = 1  # spatial merge: merge^2 patches -> one decoder token
    projector_hidden: int = 0
    image_tokens: int = 1_024


POSITION_EMBEDDINGS = ("rope", "learned", "alibi", "none")
"""How positions enter the model: rotary (Su et al. 2021, arXiv:2104.09864), a learned absolute
table (GPT-2/3), ALiBi biases (Press et al. 2021, arXiv:2108.12409; BLOOM) or none (NoPE)."""
ROPE_SCALINGS = ("", "llama3", "yarn", "linear")
"""RoPE frequency scaling: none, Llama 3.1's (meta-llama/Llama-3.1-8B config.json rope_scaling),
YaRN (Peng et al. 2023, arXiv:2309.00071) or linear position interpolation (positions / factor;
Gemma 3's global layers, transformers configuration_gemma3.py)."""
ROUTER_SCORES = ("softmax", "sigmoid")
ROUTER_BALANCES = ("aux_loss", "seq_aux_loss", "none")
"""MoE load balancing: the batch-wise auxiliary loss (Fedus et al. 2021, arXiv:2101.03961), the
sequence-wise one of DeepSeek-V2/V3 (arXiv:2412.19437 Sec. 2.1.2) or none."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Rope:
    """Rotary position embedding settings. Parameters and FLOPs do not depend on them; the model
    does (a framework that cannot set one trains a different model)."""

    theta: float = 10_000.0  # base of the rotation frequencies
    fraction: float = 1.0  # share of each head's dims that rotate (Nemotron-4 0.5, GPT-NeoX 0.25)
    scaling: str = ""  # one of ROPE_SCALINGS
    factor: float = 1.0  # context extension factor of the scaling
    original_max_positions: int = 0  # pre-extension context of the scaling
    low_freq_factor: float = 1.0  # llama3 scaling
    high_freq_factor: float = 4.0  # llama3 scaling
    beta_fast: float = 32.0  # YaRN
    beta_slow: float = 1.0  # YaRN
    mscale: float = 1.0  # YaRN attention scale
    mscale_all_dim: float = 0.0  # YaRN (DeepSeek-V3: 1.0)
    round_correction_range: bool = True  # YaRN: round the blended dim range to integers
    # (DeepSeek-V3 does; gpt-oss's config.json "truncate": false does not)


@dataclass(frozen=True, slots=True, kw_only=True)
class Router:
    """How a mixture-of-experts layer picks its ``top_k`` experts (no parameters of its own beyond
    the router GEMM the graph counts; ``expert_bias`` adds one per expert, not trained by SGD)."""

    score: str = "softmax"  # one of ROUTER_SCORES
    normalize_top_k: bool = True  # the top-k weights sum to 1 (HF norm_topk_prob; Qwen2-MoE: no)
    expert_bias: bool = False  # aux-loss-free balancing bias (DeepSeek-V3)
    groups: int = 0  # group-limited routing: experts in `groups` groups, tokens pick `group_topk`
    group_topk: int = 0
    scaling_factor: float = 1.0  # routed output multiplier (DeepSeek-V3 2.5)
    balance: str = "aux_loss"  # one of ROUTER_BALANCES
    aux_loss_coeff: float = 0.0
