"""The architecture of a transformer, as numbers: what every builder and importer produces."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "Activation",
    "Mamba",
    "Vision",
    "PATTERN_SYMBOLS",
    "ModelSpec",
    "Rope",
    "Router",
    "POSITION_EMBEDDINGS",
    "ROPE_SCALINGS",
    "ROUTER_SCORES",
    "ROUTER_BALANCES",
    "check_model",
    "MODEL_LIMITS",
    "scenario_key",
    "show_value",
]

MODEL_LIMITS: dict[str, int] = {
    "num_layers": 1_024,
    "first_dense_layers": 1_024,
    "moe_layer_freq": 1_024,
    "hidden": 262_144,
    "ffn_hidden": 1_048_576,
    "moe_ffn_hidden": 1_048_576,
    "shared_ffn_hidden": 1_048_576,
    "moe_latent_dim": 262_144,
    "num_heads": 4_096,
    "num_kv_heads": 4_096,
    "head_dim": 4_096,
    "qk_nope_head_dim": 4_096,
    "qk_rope_head_dim": 4_096,
    "v_head_dim": 4_096,
    "q_lora_rank": 65_536,
    "kv_lora_rank": 65_536,
    "vocab": 16_777_216,
    "num_experts": 4_096,
    "num_shared_experts": 4_096,
    "attention_chunk": 16_777_216,
    "mtp_layers": 64,
}
"""Largest accepted value of each ModelSpec size (README "Limits"): at least 8x the largest
published model, so no real model is refused while absurd sizes (10^9 layers or experts), which
would take minutes to build and search, are refused at once."""

_SCENARIO_KEYS = {
    "num_layers": "layers",
    "num_heads": "heads",
    "num_kv_heads": "kv_heads",
    "num_experts": "experts",
    "num_shared_experts": "shared_experts",
}


def scenario_key(field: str) -> str:
    """The scenario key (``model.<key>``) of a ModelSpec field: ``num_layers`` -> ``layers``."""
    return _SCENARIO_KEYS.get(field, field)


def show_value(value: object) -> str:
    """``value`` for an error message: ints with thousands separators, huge ints by their
    magnitude (str() of a 4,300-digit int raises), anything else as a repr cut to 60 characters."""
    if isinstance(value, int) and not isinstance(value, bool):
        if abs(value) < 10**18:
            return f"{value:,}"
        return f"~{'-' if value < 0 else ''}10^{int(math.log10(abs(value)))}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


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


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """A decoder-only transformer. ``head_dim`` defaults to hidden // heads.

    Mixture of experts (``num_experts`` > 0): block ``i`` has a routed-expert MLP when
    ``i >= first_dense_layers`` and ``(i - first_dense_layers) % moe_layer_freq == 0``, a dense MLP
    of ``ffn_hidden`` otherwise. A MoE MLP routes each token to ``top_k`` of ``num_experts`` experts
    of width ``moe_ffn_hidden`` and always runs ``num_shared_experts`` shared experts (total width
    ``shared_ffn_hidden``, default ``num_shared_experts * moe_ffn_hidden``). Without dense layers
    ``ffn_hidden`` may be 0 (it then defaults to ``moe_ffn_hidden``).

    LatentMoE (``moe_latent_dim`` > 0, Nemotron 3 Super; megatron-core 0.19.2
    transformer/moe/moe_layer.py ``fc1_latent_proj`` / ``fc2_latent_proj``): the router and the
    shared experts read the hidden state; the routed path projects it h -> latent before the
    dispatch and latent -> h after the combine (both weights replicated over TP), so the tokens
    travel and the experts run at the latent width (experts latent -> moe_ffn_hidden -> latent).

    Multi-head latent attention (``kv_lora_rank`` > 0, DeepSeek-V2/V3, arXiv:2405.04434 Sec. 2.1):
    queries through a ``q_lora_rank`` latent (0 = a plain projection), keys and values through a
    ``kv_lora_rank`` latent; per head q/k have ``qk_nope_head_dim + qk_rope_head_dim`` dims and v
    ``v_head_dim``.
    """

    name: str
    num_layers: int
    hidden: int
    ffn_hidden: int
    num_heads: int
    num_kv_heads: int
    vocab: int
    head_dim: int = 0
    activation: Activation = Activation.SWIGLU
    tied_embeddings: bool = False
    norm: str = "rmsnorm"
    dropout: bool = False  # hidden/attention dropout in training (GPT-3 era); masks are stored
    num_experts: int = 0
    top_k: int = 0
    num_shared_experts: int = 0
    moe_ffn_hidden: int = 0
    shared_ffn_hidden: int = 0
    moe_latent_dim: int = 0  # LatentMoE: routed experts' input/output width (0: hidden)
    first_dense_layers: int = 0
    moe_layer_freq: int = 1
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # architecture details that do not change the layer graph's numbers but do change the model a
    # framework builds (exporters must express them or refuse); the graph does not count linear
    # biases, QK-norm weights, learned position tables or attention sinks (a few parameters)
    position_embedding: str = "rope"  # one of POSITION_EMBEDDINGS
    rope: Rope = Rope()
    norm_eps: float = 1e-5
    zero_centered_norm: bool = False  # LayerNorm weight stored as gamma - 1 (Nemotron "1p")
    linear_bias: bool = False  # biases on every linear layer (GPT-3, BLOOM, GPT-NeoX, gpt-oss)
    qkv_bias: bool = False  # biases on the QKV projection only (Qwen2/2.5)
    qk_norm: bool = False  # RMSNorm on each head's queries and keys (Qwen3)
    parallel_residual: bool = False  # attention and MLP read the same input (GPT-NeoX, GPT-J)
    sliding_window: int = 0  # tokens each query sees in windowed layers; 0 = full attention
    full_attention_every: int = 0  # with a window: every n-th layer is full attention (0: none)
    attention_sinks: bool = False  # a learned softmax sink logit per head (gpt-oss)
    router: Router = Router()
    # layer kinds beyond the decoder block (graph/layers.py builds them; each changes the numbers)
    attention_chunk: int = 0  # chunked local attention: tokens per chunk (Llama 4: 8192); 0 = none
    nope_full_attention: bool = False  # the full-attention layers of a windowed/chunked model
    # skip RoPE (Llama 4 iRoPE: every 4th layer global and NoPE)
    layer_pattern: str = ""  # Megatron hybrid pattern, one PATTERN_SYMBOLS character per block
    moe_pattern: str = ""  # transformer blocks: 'E' (MoE MLP) or '-' (dense) per block, any order
    # (Megatron --moe-layer-freq as a list); overrides first_dense_layers / moe_layer_freq
    mamba: Mamba = Mamba()
    vision: Vision = Vision()
    mtp_layers: int = 0  # multi-token-prediction modules after the last block (DeepSeek-V3: 1)

    def __post_init__(self) -> None:
        _check_limits(self)  # first: the defaults below walk the layers
        if self.head_dim == 0:
            default = (
                self.qk_nope_head_dim + self.qk_rope_head_dim
                if self.is_mla
                else self.hidden // max(1, self.num_heads)
            )
            object.__setattr__(self, "head_dim", default)
        if self.is_moe and self.ffn_hidden == 0 and self.num_dense_layers == 0:
            object.__setattr__(self, "ffn_hidden", self.moe_ffn_hidden)
        if self.is_moe and self.shared_ffn_hidden == 0 and self.num_shared_experts:
            object.__setattr__(self, "shared_ffn_hidden", self.num_shared_experts * self.moe_ffn_hidden)
        check_model(self)

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def q_dim(self) -> int:
        """Query width (and key width under MLA): heads x per-head q/k dims."""
        if self.is_mla:
            return self.num_heads * (self.qk_nope_head_dim + self.qk_rope_head_dim)
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of K (= of V without MLA); under MLA, the mean of the K and V widths, so that
        ``2 * kv_dim`` is what one token's K and V hold (context parallel exchanges them)."""
        if self.is_mla:
            return self.num_heads * (self.qk_nope_head_dim + self.qk_rope_head_dim + self.v_head_dim) // 2
        return self.num_kv_heads * self.head_dim

    @property
    def v_dim(self) -> int:
        """Value (and attention output) width."""
        if self.is_mla:
            return self.num_heads * self.v_head_dim
        return self.num_heads * self.head_dim

    def is_moe_layer(self, block: int) -> bool:
        """Whether block ``block`` has a routed-expert MLP (module docstring); with a
        ``layer_pattern`` or ``moe_pattern``, whether its character is ``E``."""
        pattern = self.layer_pattern or self.moe_pattern
        if pattern:  # (a pattern of the wrong length is refused by check_model)
            return pattern[block : block + 1] == "E"
        if not self.is_moe or block < self.first_dense_layers:
            return False
        return (block - self.first_dense_layers) % max(1, self.moe_layer_freq) == 0

    @property
    def num_moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.num_layers))

    @property
    def num_dense_layers(self) -> int:
        """Blocks with a dense MLP (with a layer pattern: its ``-`` characters)."""
        if self.layer_pattern:
            return self.layer_pattern.count("-")
        return self.num_layers - self.num_moe_layers

    @property
    def is_hybrid(self) -> bool:
        """Blocks are single layers of a Megatron hybrid pattern (Mamba, attention, MLP, MoE)."""
        return bool(self.layer_pattern)

    @property
    def has_ssm(self) -> bool:
        """Some block is a state-space (Mamba) mixer."""
        return "M" in self.layer_pattern

    def block_symbols(self, block: int) -> str:
        """The layers of block ``block`` as PATTERN_SYMBOLS characters: the pattern's character,
        or ``*E`` / ``*-`` (attention and a MoE or dense MLP) for a transformer block."""
        if self.layer_pattern:
            return self.layer_pattern[block]
        return "*E" if self.is_moe_layer(block) else "*-"

    def is_full_attention(self, block: int) -> bool:
        """Whether the attention of block ``block`` sees every earlier token: no window and no
        chunk, or every ``full_attention_every``-th block ((block + 1) % n == 0; gpt-oss, Gemma 3,
        Llama 4 count layers this way)."""
        if not (self.sliding_window or self.attention_chunk):
            return True
        n = self.full_attention_every
        return bool(n) and (block + 1) % n == 0


def check_model(spec: ModelSpec) -> None:
    """Structural rules of a transformer; ValueError names the field."""
    _check_limits(spec)
    for field in ("num_layers", "hidden", "num_heads", "num_kv_heads", "vocab"):
        value = getattr(spec, field)
        if value < 1:
            raise ValueError(f"model.{scenario_key(field)}={value} must be a positive integer")
    _check_kinds(spec)
    _check_moe(spec)
    if spec.ffn_hidden < 1:
        raise ValueError(
            f"model.ffn_hidden={spec.ffn_hidden} must be a positive integer"
            + (" (the width of the model's dense layers)" if spec.is_moe else "")
        )
    if spec.num_heads % spec.num_kv_heads:
        raise ValueError(
            f"model.kv_heads={spec.num_kv_heads} must divide model.heads={spec.num_heads} "
            "(grouped-query attention shares each K/V head among heads/kv_heads query heads)"
        )
    _check_mla(spec)
    _check_architecture(spec)
    if spec.head_dim < 1:
        raise ValueError(
            f"model.head_dim={spec.head_dim} must be positive (hidden={spec.hidden}, "
            f"heads={spec.num_heads}); give model.head_dim explicitly"
        )


def _check_limits(spec: ModelSpec) -> None:
    """Every size in MODEL_LIMITS at most its limit; ValueError names the field and the limit."""
    for field, limit in MODEL_LIMITS.items():
        value = getattr(spec, field)
        if value > limit:
            raise ValueError(
                f"model.{scenario_key(field)}={show_value(value)} exceeds paraplan's limit of "
                f'{limit:,} (at least 8x the largest published model; README "Limits")'
            )


def _check_moe(spec: ModelSpec) -> None:
    for field in (
        "num_experts",
        "top_k",
        "num_shared_experts",
        "moe_ffn_hidden",
        "shared_ffn_hidden",
        "moe_latent_dim",
        "first_dense_layers",
    ):
        if getattr(spec, field) < 0:
            raise ValueError(f"model.{scenario_key(field)}={getattr(spec, field)} must not be negative")
    if not spec.is_moe:
        if spec.top_k or spec.num_shared_experts or spec.moe_ffn_hidden or spec.moe_latent_dim:
            raise ValueError(
                "model.top_k, shared_experts, moe_ffn_hidden and moe_latent_dim need model.experts > 0 "
                "(a mixture-of-experts model)"
            )
        return
    if not 1 <= spec.top_k <= spec.num_experts:
        raise ValueError(f"model.top_k={spec.top_k} must be between 1 and model.experts={spec.num_experts}")
    if spec.moe_ffn_hidden < 1:
        raise ValueError("model.moe_ffn_hidden (the expert FFN width) must be a positive integer")
    if spec.moe_layer_freq < 1:
        raise ValueError(f"model.moe_layer_freq={spec.moe_layer_freq} must be at least 1")
    if spec.num_moe_layers == 0:
        raise ValueError(
            f"model.first_dense_layers={spec.first_dense_layers} leaves no MoE layer among "
            f"the {spec.num_layers} layers"
        )


def _check_mla(spec: ModelSpec) -> None:
    if not spec.is_mla:
        if spec.q_lora_rank:
            raise ValueError("model.q_lora_rank needs model.kv_lora_rank > 0 (MLA attention)")
        return
    for field in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
        if getattr(spec, field) < 1:
            raise ValueError(
                f"model.{field}={getattr(spec, field)} must be positive for multi-head latent "
                "attention (model.kv_lora_rank > 0)"
            )
    if spec.num_kv_heads != spec.num_heads:
        raise ValueError(
            f"model.kv_heads={spec.num_kv_heads} must equal model.heads={spec.num_heads} "
            "under multi-head latent attention (every head has its own K and V)"
        )


def _check_architecture(spec: ModelSpec) -> None:
    """Named choices are known, RoPE fractions in (0, 1], scaling factors positive."""
    choices = (
        ("position_embedding", spec.position_embedding, POSITION_EMBEDDINGS),
        ("rope.scaling", spec.rope.scaling, ROPE_SCALINGS),
        ("router.score", spec.router.score, ROUTER_SCORES),
        ("router.balance", spec.router.balance, ROUTER_BALANCES),
    )
    for field, value, allowed in choices:
        if value not in allowed:
            raise ValueError(f"model.{field}={value!r} is not one of {', '.join(map(repr, allowed))}")
    if not 0 < spec.rope.fraction <= 1:
        raise ValueError(f"model.rope.fraction={spec.rope.fraction} must be in (0, 1]")
    if spec.rope.theta <= 0 or spec.rope.factor <= 0 or spec.norm_eps <= 0:
        raise ValueError("model.rope.theta, model.rope.factor and model.norm_eps must be positive")
    if spec.rope.scaling in ("llama3", "yarn") and spec.rope.original_max_positions < 1:
        raise ValueError(
            f"model.rope.scaling={spec.rope.scaling!r} needs "
            "model.rope.original_max_positions (the pre-extension context)"
        )
    if spec.sliding_window < 0 or spec.full_attention_every < 0:
        raise ValueError("model.sliding_window and model.full_attention_every must not be negative")
    r = spec.router
    if r.groups < 0 or r.group_topk < 0 or r.group_topk > r.groups:
        raise ValueError(
            f"model.router.group_topk={r.group_topk} must be between 0 and model.router.groups={r.groups}"
        )
    if r.groups and spec.num_experts % r.groups:
        raise ValueError(f"model.router.groups={r.groups} must divide model.experts={spec.num_experts}")


def _check_kinds(spec: ModelSpec) -> None:
    """Layer pattern, Mamba, vision and MTP fields are consistent; ValueError names the field."""
    pattern = spec.layer_pattern
    if pattern:
        bad = sorted(set(pattern) - set(PATTERN_SYMBOLS))
        if bad:
            raise ValueError(
                f"model.layer_pattern has {bad[0]!r}; use "
                + ", ".join(f"{k!r} ({v})" for k, v in PATTERN_SYMBOLS.items())
            )
        if len(pattern) != spec.num_layers:
            raise ValueError(
                f"model.layer_pattern has {len(pattern)} characters; it needs one per layer "
                f"(model.layers={spec.num_layers})"
            )
        if "E" in pattern and not spec.is_moe:
            raise ValueError("model.layer_pattern has MoE layers ('E'); set model.experts and model.top_k")
    if spec.moe_pattern:
        if set(spec.moe_pattern) - {"E", "-"} or len(spec.moe_pattern) != spec.num_layers:
            raise ValueError(
                f"model.moe_pattern needs one 'E' (MoE) or '-' (dense) per layer (model.layers="
                f"{spec.num_layers}); got {show_value(spec.moe_pattern)}"
            )
        if pattern:
            raise ValueError(
                "model.moe_pattern and model.layer_pattern exclude each other ('E' in the pattern)"
            )
        if not spec.is_moe:
            raise ValueError("model.moe_pattern needs model.experts and model.top_k")
    if spec.has_ssm and spec.mamba.version not in (1, 2):
        raise ValueError(
            f"model.mamba.version={spec.mamba.version}: a layer pattern with Mamba layers ('M') needs "
            "model.mamba.version 1 or 2"
        )
    m = spec.mamba
    if m.version == 2 and (m.num_heads < 1 or m.num_heads % max(1, m.num_groups)):
        raise ValueError(
            f"model.mamba.num_heads={m.num_heads} must be positive and a multiple of "
            f"model.mamba.num_groups={m.num_groups} (B and C are shared per group)"
        )
    for field in ("head_dim", "num_groups", "state_dim", "conv_kernel", "expand", "chunk_size"):
        if getattr(m, field) < 1:
            raise ValueError(f"model.mamba.{field}={getattr(m, field)} must be positive")
    v = spec.vision
    if v.num_layers:
        for field in ("hidden", "ffn_hidden", "num_heads", "patch_size", "merge", "image_tokens"):
            if getattr(v, field) < 1:
                raise ValueError(f"model.vision.{field}={getattr(v, field)} must be positive")
        if v.hidden % v.num_heads:
            raise ValueError(f"model.vision.heads={v.num_heads} must divide model.vision.hidden={v.hidden}")
    if spec.attention_chunk < 0 or spec.mtp_layers < 0:
        raise ValueError("model.attention_chunk and model.mtp_layers must not be negative")
    if spec.attention_chunk and spec.sliding_window:
        raise ValueError("model.attention_chunk and model.sliding_window exclude each other (one local kind)")
