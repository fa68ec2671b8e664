"""The rules a ModelSpec must hold (:func:`check_model`, which ModelSpec runs when it is made),
the largest size paraplan accepts for each field (``MODEL_LIMITS``), and how a model error names
a field (:func:`scenario_key`: the scenario's ``model.<key>``) and shows a value
(:func:`show_value`). Every rule raises a ValueError naming the field and the rule.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from paraplan.graph.spec_parts import (
    PATTERN_SYMBOLS,
    POSITION_EMBEDDINGS,
    ROPE_SCALINGS,
    ROUTER_BALANCES,
    ROUTER_SCORES,
)

if TYPE_CHECKING:
    from paraplan.graph.spec import ModelSpec

__all__ = ["MODEL_LIMITS", "scenario_key", "show_value", "check_model", "check_limits"]

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


def check_model(spec: ModelSpec) -> None:
    """Structural rules of a transformer; ValueError names the field."""
    check_limits(spec)
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


def check_limits(spec: ModelSpec) -> None:
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
