"""Hugging Face ``config.json`` fields of the layer kinds beyond the decoder block: chunked
attention and interleaved MoE (Llama 4), sliding windows (gpt-oss, Gemma 3, Mistral), hybrid
Mamba patterns (Nemotron-H, Jamba), vision encoders (Qwen2.5-VL) and multi-token prediction
(DeepSeek-V3). Each reader returns ModelSpec keyword arguments that override the decoder's; a
field that changes the maths and is not modelled raises a ValueError naming it.

Key names from transformers 5.24 (configuration_llama4.py, configuration_gemma3.py,
configuration_nemotron_h.py, configuration_qwen2_5_vl.py, configuration_jamba.py) and the
published config.json files cited in graph/data/presets.yaml.
"""

from __future__ import annotations

import math
from typing import Any

from paraplan.graph.hf_read import read_bool, read_float, read_int, read_str
from paraplan.graph.spec import Activation, Mamba, Router, Vision, show_value

__all__ = ["MULTIMODAL_TYPES", "flatten", "kind_fields", "vision_fields", "window_fields"]

MULTIMODAL_TYPES = ("llama4", "gemma3", "qwen2_5_vl")
"""model_type values whose config.json nests the decoder under ``text_config``."""
_VISION_NOT_MODELLED = {"llama4": "Llama 4's vision encoder", "gemma3": "Gemma 3's SigLIP encoder"}
_LLAMA4_TYPES = frozenset({"chunked_attention", "full_attention"})
_PATTERN_NAMES = {
    "mamba": "M",
    "linear_attention": "M",
    "attention": "*",
    "full_attention": "*",
    "mlp": "-",
    "moe": "E",
}
"""Nemotron-H ``layers_block_type`` names (transformers 5.24 NemotronHConfig._pattern_to_list and
the older "mamba"/"attention" names) -> Megatron hybrid pattern characters."""


def flatten(cfg: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The decoder's settings (``text_config`` over the top level, for the multimodal model
    types) and the ``vision_config`` (None when absent). A vision encoder paraplan does not
    model is refused, naming the field."""
    model_type = cfg.get("model_type")
    vision = cfg.get("vision_config")
    if vision is not None and model_type in _VISION_NOT_MODELLED:
        raise ValueError(
            f"model.hf_config: vision_config ({_VISION_NOT_MODELLED[model_type]}) is not modelled; "
            "import the text_config alone to plan the text tower"
        )
    if vision is not None and not isinstance(vision, dict):
        raise ValueError(f"model.hf_config: vision_config={show_value(vision)} must be an object")
    text = cfg.get("text_config")
    if model_type not in MULTIMODAL_TYPES or text is None:
        return cfg, vision
    if not isinstance(text, dict):
        raise ValueError(f"model.hf_config: text_config={show_value(text)} must be an object")
    merged = {k: v for k, v in cfg.items() if k not in ("text_config", "vision_config")}
    merged.update({k: v for k, v in text.items() if k != "model_type"})
    return merged, vision


def _every(indices: list[int], total: int, what: str, key: str) -> int:
    """n when ``indices`` are exactly the i with (i + 1) % n == 0 below ``total``; else refused."""
    if not indices:
        return 0
    n = indices[0] + 1
    if indices != list(range(n - 1, total, n)):
        raise ValueError(
            f"model.hf_config: {key} places {what} at {indices[:6]}...; paraplan models them only "
            "every n-th layer ((i + 1) % n == 0)"
        )
    return n


def window_fields(cfg: dict[str, Any], model_type: str, num_layers: int) -> dict[str, int]:
    """sliding_window and full_attention_every of a config.json: windowed layers from
    ``layer_types`` ("sliding_attention"), Gemma's ``sliding_window_pattern``, or every layer
    for Mistral/Mixtral; Qwen's ``use_sliding_window`` with ``max_window_layers`` below the
    layer count, and windows without a stated layout, are refused."""
    window = cfg.get("sliding_window")
    if window is None or cfg.get("use_sliding_window") is False or model_type == "nemotron_h":
        return {}
    if type(window) is not int or window < 1:
        raise ValueError(f"model.hf_config: sliding_window={show_value(window)} must be a positive integer")
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        if not set(types) <= {"sliding_attention", "full_attention"}:
            raise ValueError(
                f"model.hf_config: layer_types={show_value(types)} has kinds paraplan does not model "
                "(it models sliding_attention and full_attention)"
            )
        full = [i for i, t in enumerate(types) if t == "full_attention"]
        if len(full) == len(types):
            return {}
        return {
            "sliding_window": window,
            "full_attention_every": _every(full, len(types), "full attention", "layer_types"),
        }
    if model_type.startswith("gemma3"):
        n = read_int(cfg, "sliding_window_pattern", spec="num_layers", default=6)
        return {"sliding_window": window, "full_attention_every": n}
    if model_type in ("mistral", "mixtral"):
        return {"sliding_window": window}
    if model_type.startswith("qwen") and cfg.get("use_sliding_window") is True:
        raise ValueError(
            f"model.hf_config: sliding_window={show_value(window)} is not modelled with "
            f"use_sliding_window and max_window_layers={show_value(cfg.get('max_window_layers'))} "
            "(Qwen: windows on the layers from max_window_layers on); set use_sliding_window: false"
        )
    if model_type.startswith("qwen"):
        return {}
    raise ValueError(
        f"model.hf_config: sliding_window={show_value(window)} without layer_types does not say which "
        f"layers of model_type={model_type!r} are windowed; give layer_types or set sliding_window: null"
    )


def kind_fields(cfg: dict[str, Any], model_type: str, base: dict[str, Any]) -> dict[str, Any]:
    """ModelSpec overrides for the model type's layer kinds (``base``: the decoder's fields)."""
    if model_type in ("llama4", "llama4_text"):
        return _llama4(cfg, base)
    if model_type in ("gemma3", "gemma3_text"):
        return _gemma3(cfg)
    if model_type == "nemotron_h":
        return _nemotron_h(cfg, base)
    if model_type == "jamba":
        return _jamba(cfg, base)
    if model_type in ("deepseek_v3",):
        return {
            "mtp_layers": read_int(cfg, "num_nextn_predict_layers", spec="mtp_layers", default=0, minimum=0)
        }
    return {}


def _llama4(cfg: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """Llama 4 text: every MoE layer has one shared expert as wide as a routed one
    (transformers Llama4TextMoe); MoE layers every ``interleave_moe_layer_step``-th (or the
    ``moe_layers`` list); chunked attention except every ``no_rope_layer_interval``-th layer,
    which is global and NoPE (``no_rope_layers``: 1 = RoPE)."""
    layers = base["num_layers"]
    step = read_int(cfg, "interleave_moe_layer_step", spec="moe_layer_freq", default=1)
    moe = cfg.get("moe_layers")
    if moe is not None:
        if not isinstance(moe, list) or any(type(i) is not int for i in moe):
            raise ValueError(f"model.hf_config: moe_layers={show_value(moe)} must be a list of layer indices")
        step = _every(moe, layers, "MoE layers", "moe_layers") or step
    out: dict[str, Any] = {
        "num_shared_experts": 1,
        "shared_ffn_hidden": base["moe_ffn_hidden"],
        "first_dense_layers": step - 1,
        "moe_layer_freq": step,
        "ffn_hidden": read_int(cfg, "intermediate_size_mlp", spec="ffn_hidden") if step > 1 else 0,
        "qk_norm": read_bool(cfg, "use_qk_norm", default=True),
        # transformers Llama4Router: top-k of the logits, sigmoid of the selected ones
        "router": Router(score="sigmoid", aux_loss_coeff=read_float(cfg, "router_aux_loss_coef", 0.001)),
    }
    chunk = cfg.get("attention_chunk_size")
    interval = read_int(cfg, "no_rope_layer_interval", spec="num_layers", default=4)
    nope = cfg.get("no_rope_layers")
    if nope is not None:
        if not isinstance(nope, list) or len(nope) != layers:
            raise ValueError(f"model.hf_config: no_rope_layers must list 0/1 for each of the {layers} layers")
        interval = _every([i for i, r in enumerate(nope) if not r], layers, "NoPE layers", "no_rope_layers")
    types = cfg.get("layer_types")
    if types is not None:  # transformers 5 writes the layout out: chunked_attention / full_attention
        if not isinstance(types, list) or len(types) != layers or not set(types) <= _LLAMA4_TYPES:
            raise ValueError(
                f"model.hf_config: layer_types={show_value(types)} must give one of "
                f"{', '.join(sorted(_LLAMA4_TYPES))} for each of the {layers} layers"
            )
        full = [i for i, t in enumerate(types) if t == "full_attention"]
        interval = _every(full, layers, "full attention", "layer_types") if len(full) < layers else 0
        chunk = chunk if len(full) < layers else None
    if chunk is not None:
        out["attention_chunk"] = read_int(cfg, "attention_chunk_size", spec="attention_chunk")
        out["full_attention_every"] = interval
        out["nope_full_attention"] = bool(interval)
    return out


def _gemma3(cfg: dict[str, Any]) -> dict[str, Any]:
    """Gemma 3 text: gated GELU (tanh) MLP, zero-centred RMSNorm, QK-norm, tied embeddings;
    logit soft-capping and bidirectional attention are not modelled."""
    for key in ("final_logit_softcapping", "attn_logit_softcapping"):
        if cfg.get(key) is not None:
            raise ValueError(
                f"model.hf_config: {key}={show_value(cfg[key])} (logit soft-capping) is not modelled"
            )
    if cfg.get("use_bidirectional_attention"):
        raise ValueError(
            "model.hf_config: use_bidirectional_attention=true is not modelled (causal decoders only)"
        )
    act = read_str(cfg, "hidden_activation", "hidden_act", default="gelu_pytorch_tanh")
    if act not in ("gelu_pytorch_tanh", "gelu"):
        raise ValueError(
            f"model.hf_config: hidden_activation={show_value(act)}; paraplan models Gemma 3's gated MLP "
            "with a GELU gate (gelu_pytorch_tanh)"
        )
    return {
        "activation": Activation.GEGLU,
        "zero_centered_norm": True,
        "qk_norm": True,
        "tied_embeddings": read_bool(cfg, "tie_word_embeddings", default=True),
    }


def _pattern(cfg: dict[str, Any]) -> str:
    """Nemotron-H's hybrid pattern: ``hybrid_override_pattern`` or the ``layers_block_type``
    (``layer_types``) list."""
    text = cfg.get("hybrid_override_pattern")
    if text is not None:
        if not isinstance(text, str):
            raise ValueError(f"model.hf_config: hybrid_override_pattern={show_value(text)} must be a string")
        return text
    for key in ("layers_block_type", "layer_types"):
        kinds = cfg.get(key)
        if kinds is not None:
            if not isinstance(kinds, list) or any(k not in _PATTERN_NAMES for k in kinds):
                raise ValueError(
                    f"model.hf_config: {key}={show_value(kinds)} must list layer kinds among "
                    f"{', '.join(_PATTERN_NAMES)}"
                )
            return "".join(_PATTERN_NAMES[k] for k in kinds)
    raise ValueError(
        "model.hf_config: needs hybrid_override_pattern or layers_block_type (the layer pattern)"
    )


def _nemotron_h(cfg: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """Nemotron-H / Nemotron 3: Megatron hybrid pattern of Mamba-2, attention, MLP (and MoE)
    layers, no position embedding, LatentMoE (``moe_latent_size``); the MTP layers of newer
    configs (their own hybrid pattern) are not modelled."""
    if read_int(cfg, "num_nextn_predict_layers", spec="mtp_layers", default=0, minimum=0):
        raise ValueError(
            "model.hf_config: num_nextn_predict_layers > 0 (Nemotron-H multi-token prediction with its "
            "own hybrid pattern) is not modelled"
        )
    pattern = _pattern(cfg)
    act = read_str(cfg, "mlp_hidden_act", default="relu2")
    if act != "relu2":
        raise ValueError(
            f"model.hf_config: mlp_hidden_act={show_value(act)}; paraplan models Nemotron-H's relu2 MLP"
        )
    out: dict[str, Any] = {
        "num_layers": len(pattern),
        "layer_pattern": pattern,
        "activation": Activation.RELU2,
        "position_embedding": "none",
        "mamba": Mamba(
            version=2,
            num_heads=read_int(cfg, "mamba_num_heads", spec="num_heads"),
            head_dim=read_int(cfg, "mamba_head_dim", spec="head_dim"),
            num_groups=read_int(cfg, "n_groups", spec="num_heads", default=8),
            state_dim=read_int(cfg, "ssm_state_size", spec="head_dim", default=128),
            conv_kernel=read_int(cfg, "conv_kernel", spec="head_dim", default=4),
            chunk_size=read_int(cfg, "chunk_size", spec="head_dim", default=128),
        ),
    }
    if "E" in pattern:
        experts = read_int(cfg, "n_routed_experts", spec="num_experts")
        width = read_int(cfg, "moe_intermediate_size", spec="moe_ffn_hidden")
        shared = read_int(cfg, "n_shared_experts", spec="num_shared_experts", default=0, minimum=0)
        out.update(
            num_experts=experts,
            top_k=read_int(cfg, "num_experts_per_tok", spec="num_experts"),
            moe_ffn_hidden=width,
            num_shared_experts=shared,
            shared_ffn_hidden=shared
            * read_int(cfg, "moe_shared_expert_intermediate_size", spec="shared_ffn_hidden", default=width),
            router=_nemotron_router(cfg),
        )
        if cfg.get("moe_latent_size") is not None:  # LatentMoE (Nemotron 3 Super)
            out["moe_latent_dim"] = read_int(cfg, "moe_latent_size", spec="moe_latent_dim")
    if "-" not in pattern and base.get("ffn_hidden", 0) < 1:
        out["ffn_hidden"] = out.get("moe_ffn_hidden", 1)
    return out


NEMOTRON_H_BALANCE_COEFF = 1e-4
"""Sequence-wise balance loss of Nemotron-H MoE training (Megatron-Bridge 0.3.1
models/nemotronh/nemotron_h_provider.py NemotronHModelProvider: moe_aux_loss_coeff 0.0001,
load balancing "seq_aux_loss"); a config.json does not carry it."""


def _nemotron_router(cfg: dict[str, Any]) -> Router:
    """Nemotron-H / Nemotron 3 router (transformers 5.24 NemotronHTopkRouter): sigmoid scores, an
    expert-bias correction for the top-k choice, ``routed_scaling_factor`` on the weights, groups
    when ``n_group`` > 1."""
    groups = read_int(cfg, "n_group", spec="num_experts", default=1)
    return Router(
        score="sigmoid",
        expert_bias=True,
        normalize_top_k=cfg.get("norm_topk_prob", True) is not False,
        groups=groups if groups > 1 else 0,
        group_topk=read_int(cfg, "topk_group", spec="num_experts", default=1) if groups > 1 else 0,
        scaling_factor=read_float(cfg, "routed_scaling_factor", 1.0),
        balance="seq_aux_loss",
        aux_loss_coeff=NEMOTRON_H_BALANCE_COEFF,
    )


def _jamba(cfg: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """Jamba: each of its layers is a (mixer, FFN) pair, i.e. two blocks of Megatron's hybrid
    convention: attention when i % attn_layer_period == attn_layer_offset, else Mamba-1; a MoE
    FFN when i % expert_layer_period == expert_layer_offset, else dense (transformers
    configuration_jamba.py layers_block_type / layers_num_experts). No position embedding."""
    layers = base["num_layers"]
    ap = read_int(cfg, "attn_layer_period", spec="num_layers", default=8)
    ao = read_int(cfg, "attn_layer_offset", spec="num_layers", default=4, minimum=0)
    ep = read_int(cfg, "expert_layer_period", spec="num_layers", default=2)
    eo = read_int(cfg, "expert_layer_offset", spec="num_layers", default=1, minimum=0)
    experts = base.get("num_experts", 0)
    pattern = "".join(
        ("*" if i % ap == ao else "M") + ("E" if experts > 1 and i % ep == eo else "-") for i in range(layers)
    )
    hidden = base["hidden"]
    dt_rank = cfg.get("mamba_dt_rank", "auto")
    if dt_rank == "auto":
        dt_rank = math.ceil(hidden / 16)
    elif type(dt_rank) is not int or dt_rank < 1:
        raise ValueError(
            f"model.hf_config: mamba_dt_rank={show_value(dt_rank)} must be a positive integer or 'auto'"
        )
    out: dict[str, Any] = {
        "num_layers": 2 * layers,
        "layer_pattern": pattern,
        "position_embedding": "none",
        "mamba": Mamba(
            version=1,
            state_dim=read_int(cfg, "mamba_d_state", spec="head_dim", default=16),
            conv_kernel=read_int(cfg, "mamba_d_conv", spec="head_dim", default=4),
            expand=read_int(cfg, "mamba_expand", spec="head_dim", default=2),
            dt_rank=dt_rank,
        ),
        "first_dense_layers": 0,
        "moe_layer_freq": 1,
    }
    if experts <= 1:  # transformers: num_experts 1 means a dense MLP everywhere
        out.update(num_experts=0, top_k=0, moe_ffn_hidden=0, num_shared_experts=0, shared_ffn_hidden=0)
    out["ffn_hidden"] = read_int(cfg, "intermediate_size", spec="ffn_hidden")
    return out


def vision_fields(vision: dict[str, Any], hidden: int) -> Vision:
    """Qwen2.5-VL's ViT (transformers Qwen2_5_VLVisionConfig): ``window_size`` pixels ->
    (window_size / patch_size)^2 patches per window; ``fullatt_block_indexes`` every n-th; the
    merger MLP as wide as its input (hidden x spatial_merge_size^2)."""
    depth = read_int(vision, "depth", spec="num_layers")
    patch = read_int(vision, "patch_size", spec="head_dim", default=14)
    if read_int(vision, "in_channels", spec="head_dim", default=3) != 3:
        raise ValueError("model.hf_config: vision_config.in_channels must be 3 (RGB patches)")
    out_hidden = read_int(vision, "out_hidden_size", spec="hidden", default=hidden)
    if out_hidden != hidden:
        raise ValueError(
            f"model.hf_config: vision_config.out_hidden_size={out_hidden} must equal the "
            f"decoder's hidden_size={hidden}"
        )
    act = read_str(vision, "hidden_act", default="silu")
    if act != "silu":
        raise ValueError(
            f"model.hf_config: vision_config.hidden_act={show_value(act)}; paraplan models its gated SiLU MLP"
        )
    full = vision.get("fullatt_block_indexes", [7, 15, 23, 31])
    if not isinstance(full, list) or any(type(i) is not int for i in full):
        raise ValueError(
            f"model.hf_config: vision_config.fullatt_block_indexes={show_value(full)} must list blocks"
        )
    window_px = read_int(vision, "window_size", spec="head_dim", default=112)
    merge = read_int(vision, "spatial_merge_size", spec="head_dim", default=2)
    v_hidden = read_int(vision, "hidden_size", spec="hidden")
    return Vision(
        num_layers=depth,
        hidden=v_hidden,
        ffn_hidden=read_int(vision, "intermediate_size", spec="ffn_hidden"),
        num_heads=read_int(vision, "num_heads", spec="num_heads"),
        activation=Activation.SWIGLU,
        patch_size=patch,
        temporal_patch=read_int(vision, "temporal_patch_size", spec="head_dim", default=2),
        window=(window_px // patch) ** 2,
        full_attention_every=_every(
            full, depth, "full-attention blocks", "vision_config.fullatt_block_indexes"
        ),
        merge=merge,
        projector_hidden=v_hidden * merge**2,
    )
