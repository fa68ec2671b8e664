"""The architecture of a transformer, as numbers: what every builder and importer produces.

:class:`ModelSpec` holds the sizes and choices of one decoder (dense, mixture-of-experts, latent
attention, hybrid Mamba, with a vision encoder or multi-token prediction) and derives the
per-block layout from them. Its parts (activation, Mamba, vision encoder, RoPE, router) are in
graph/spec_parts.py, the rules it checks when made and the size limits in graph/spec_check.py;
both are importable from here too.
"""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.graph.spec_check import MODEL_LIMITS, check_limits, check_model, scenario_key, show_value
from paraplan.graph.spec_parts import (
    PATTERN_SYMBOLS,
    POSITION_EMBEDDINGS,
    ROPE_SCALINGS,
    ROUTER_BALANCES,
    ROUTER_SCORES,
    Activation,
    Mamba,
    Rope,
    Router,
    Vision,
)

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
        check_limits(self)  # first: the defaults below walk the layers
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
