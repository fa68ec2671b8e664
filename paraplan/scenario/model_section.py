"""The ``model:`` section of a scenario: exactly one source (``preset``, ``hf_config`` or
explicit architecture fields), validated at the boundary with pydantic (split out of
paraplan/scenario/schema.py, which holds the other sections, ``Scenario`` and ``load_scenario``)."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    Field,
    model_validator,
)

from paraplan.graph.presets import MOE_MLA_FIELDS
from paraplan.scenario.section import (
    Section,
)

__all__ = ["ModelSection"]

_MOE_MLA_FIELDS = tuple(MOE_MLA_FIELDS)
_ARCHITECTURE_FIELDS = (
    "position_embedding",
    "rope",
    "norm_eps",
    "zero_centered_norm",
    "linear_bias",
    "qkv_bias",
    "qk_norm",
    "parallel_residual",
    "sliding_window",
    "full_attention_every",
    "attention_sinks",
    "router",
    "attention_chunk",
    "nope_full_attention",
    "layer_pattern",
    "moe_pattern",
    "mamba",
    "vision",
    "mtp_layers",
)
_EXPLICIT_FIELDS = (
    "layers",
    "hidden",
    "ffn_hidden",
    "heads",
    "kv_heads",
    "head_dim",
    "vocab",
    "activation",
    "tied_embeddings",
    "norm",
    "dropout",
    *_MOE_MLA_FIELDS,
)


class ModelSection(Section):
    preset: str | None = Field(None, description="a model preset name, e.g. llama3-70b")
    hf_config: str | None = Field(None, description="path to a Hugging Face config.json")
    trace: bool | None = Field(
        None,
        description="with hf_config: build the model with transformers on the meta device "
        "and read it off the real code, checked against the formulas (the [trace] extra)",
    )
    allow_bias: bool | None = Field(
        None,
        description="with trace: plan a model with biases (not in the formulas) when its "
        "FLOPs and parameters still agree within 1%",
    )
    name: str | None = Field(None, description="display name for explicit models")
    layers: int | None = Field(
        None,
        ge=1,
        description="layer count; a file may give a pattern or a list of layers instead, compiled "
        "to the count and the pattern fields before validation (model_layers, graph/builder.py)",
    )
    hidden: int | None = Field(None, ge=1)
    ffn_hidden: int | None = Field(None, ge=1)
    heads: int | None = Field(None, ge=1)
    kv_heads: int | None = Field(None, ge=1)
    head_dim: int | None = Field(None, ge=1)
    vocab: int | None = Field(None, ge=1)
    activation: Literal["swiglu", "geglu", "gelu", "relu", "relu2"] | None = None
    tied_embeddings: bool | None = None
    norm: Literal["rmsnorm", "layernorm"] | None = None
    dropout: bool | None = Field(None, description="dropout in training (stores masks)")
    experts: int | None = Field(None, ge=1, description="routed experts per MoE layer")
    top_k: int | None = Field(None, ge=1, description="experts each token is routed to")
    shared_experts: int | None = Field(None, ge=0, description="always-active shared experts")
    moe_ffn_hidden: int | None = Field(None, ge=1, description="FFN width of one expert")
    shared_ffn_hidden: int | None = Field(
        None,
        ge=1,
        description="total FFN width of the shared experts (default: shared_experts x moe_ffn_hidden)",
    )
    moe_latent_dim: int | None = Field(
        None, ge=1, description="LatentMoE: width the routed experts run at (hidden -> latent -> hidden)"
    )
    first_dense_layers: int | None = Field(
        None, ge=0, description="leading layers with a dense MLP of ffn_hidden"
    )
    moe_layer_freq: int | None = Field(
        None, ge=1, description="every k-th layer after the dense ones is MoE (1: all)"
    )
    q_lora_rank: int | None = Field(None, ge=0, description="MLA query latent (0: none)")
    kv_lora_rank: int | None = Field(None, ge=1, description="MLA key/value latent")
    qk_nope_head_dim: int | None = Field(None, ge=1, description="MLA per-head q/k dims without RoPE")
    qk_rope_head_dim: int | None = Field(None, ge=1, description="MLA per-head q/k RoPE dims")
    v_head_dim: int | None = Field(None, ge=1, description="MLA per-head value dims")
    # architecture details of an explicit model (graph/spec.py ModelSpec; exporters express them)
    position_embedding: Literal["rope", "learned", "alibi", "none"] | None = None
    rope: dict[str, float | int | bool | str] | None = Field(
        None,
        description="RoPE: theta, fraction, scaling (llama3|yarn), factor, "
        "original_max_positions, low/high_freq_factor, beta_fast/slow, mscale(_all_dim)",
    )
    norm_eps: float | None = Field(None, gt=0)
    zero_centered_norm: bool | None = None
    linear_bias: bool | None = Field(None, description="biases on every linear layer")
    qkv_bias: bool | None = Field(None, description="biases on the QKV projection only")
    qk_norm: bool | None = Field(None, description="RMSNorm on per-head queries and keys")
    parallel_residual: bool | None = None
    sliding_window: int | None = Field(None, ge=0, description="attention window in tokens")
    full_attention_every: int | None = Field(None, ge=0)
    attention_sinks: bool | None = None
    router: dict[str, float | int | bool | str] | None = Field(
        None,
        description="MoE router: score (softmax|sigmoid), expert_bias, groups, group_topk, "
        "scaling_factor, balance (aux_loss|seq_aux_loss|none), aux_loss_coeff",
    )
    # layer kinds (graph/spec.py ModelSpec, graph/layers.py): each changes the layer graph
    attention_chunk: int | None = Field(None, ge=0, description="chunked local attention: tokens per chunk")
    nope_full_attention: bool | None = Field(None, description="full-attention layers skip RoPE (Llama 4)")
    layer_pattern: str | None = Field(
        None,
        max_length=1024,
        description="Megatron hybrid pattern, one character per layer: M Mamba, * attention, - MLP, E MoE",
    )
    moe_pattern: str | None = Field(
        None, max_length=1024, description="one character per layer: E MoE MLP, - dense MLP"
    )
    mamba: dict[str, int] | None = Field(
        None,
        description="Mamba mixer: version (1|2), num_heads, head_dim, num_groups, state_dim, "
        "conv_kernel, expand, dt_rank, chunk_size",
    )
    vision: dict[str, int | str] | None = Field(
        None,
        description="vision encoder: num_layers, hidden, ffn_hidden, num_heads, activation, patch_size, "
        "temporal_patch, window, full_attention_every, merge, projector_hidden, image_tokens",
    )
    mtp_layers: int | None = Field(None, ge=0, le=64, description="multi-token-prediction modules")

    @model_validator(mode="after")
    def check_architecture_needs_explicit_model(self) -> ModelSection:
        given = [f for f in _ARCHITECTURE_FIELDS if getattr(self, f) is not None]
        if given and (self.preset or self.hf_config):
            raise ValueError(
                f"model.{given[0]} describes an explicit model; a preset or "
                "hf_config carries its own architecture"
            )
        return self

    @model_validator(mode="after")
    def check_one_source(self) -> ModelSection:
        explicit = [f for f in _EXPLICIT_FIELDS if getattr(self, f) is not None]
        sources = [
            s
            for s, on in (
                ("preset", self.preset),
                ("hf_config", self.hf_config),
                ("explicit fields", explicit),
            )
            if on
        ]
        if len(sources) != 1:
            raise ValueError(
                "give exactly one of model.preset, model.hf_config or explicit fields "
                f"(layers, hidden, ffn_hidden, heads, vocab, ...); got {sources or 'none'}"
            )
        if explicit:
            required = ("layers", "hidden", "heads", "vocab") + (
                ("experts", "top_k", "moe_ffn_hidden") if self.experts else ("ffn_hidden",)
            )
            missing = [f for f in required if getattr(self, f) is None]
            if missing:
                raise ValueError(f"explicit model needs {', '.join(missing)}")
        return self

    @model_validator(mode="after")
    def check_trace(self) -> ModelSection:
        if self.trace and not self.hf_config:
            raise ValueError(
                "model.trace: true needs model.hf_config (the config transformers builds on the meta device)"
            )
        if self.allow_bias is not None and not self.trace:
            raise ValueError("model.allow_bias applies to a traced model; add model.trace: true")
        return self
