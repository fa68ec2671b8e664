"""Hugging Face ``config.json`` import: :func:`from_hf_config` reads a config of one of the
architectures paraplan models (``HF_MODEL_TYPES``) into a ModelSpec, and refuses what the cost
model does not model (another architecture, a gated MLP with a non-SiLU gate, unknown RoPE
scaling). Values are read type- and range-checked (graph/hf_read.py); the layer-kind families'
fields (windows, hybrid patterns, MTP, the vision encoder) come from graph/hf_kinds.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from paraplan.graph.hf_kinds import flatten, kind_fields, vision_fields, window_fields
from paraplan.graph.hf_read import read_bool as _bool
from paraplan.graph.hf_read import read_float as _float
from paraplan.graph.hf_read import read_int as _int
from paraplan.graph.hf_read import read_str as _str
from paraplan.graph.hf_read import read_value as _value
from paraplan.graph.spec import MODEL_LIMITS, Activation, ModelSpec, Rope, Router, show_value

__all__ = ["from_hf_config", "read_json", "HF_MODEL_TYPES", "MAX_HF_CONFIG_BYTES"]

_HF_ACTIVATIONS = {
    "silu": Activation.SWIGLU,
    "swiglu": Activation.SWIGLU,
    "gelu": Activation.GELU,
    "gelu_new": Activation.GELU,
    "gelu_fast": Activation.GELU,
    "gelu_pytorch_tanh": Activation.GELU,
    "relu": Activation.RELU,
    "relu2": Activation.RELU2,
}


# Hugging Face model_type values whose architecture paraplan models (decoder-only transformers
# with the MLP and attention kinds of graph/layers.py), and those among them whose MLP is gated
# (act(gate) * up, as transformers' LlamaMLP / MixtralBlockSparseTop2MLP / DeepseekV3MLP):
# there hidden_act names the gate's activation, and paraplan models only the SiLU gate (SwiGLU).
HF_MODEL_TYPES = (
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "gpt2",
    "gpt_neox",
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "deepseek_v2",
    "deepseek_v3",
    "gpt_oss",
    "llama4",
    "llama4_text",
    "gemma3",
    "gemma3_text",
    "nemotron_h",
    "qwen2_5_vl",
    "jamba",
)
_GATED_MODEL_TYPES = frozenset(HF_MODEL_TYPES) - {"gpt2", "gpt_neox", "nemotron_h", "gemma3", "gemma3_text"}
# rope_scaling types that only rescale the rotary frequencies (transformers
# modeling_rope_utils.ROPE_INIT_FUNCTIONS): no FLOPs or memory change, so the cost model holds.
# "mrope" (Qwen2-VL / 2.5-VL multimodal RoPE) splits the rotary dims over time/height/width
# position ids, which coincide for text tokens: the same cost as RoPE.
_ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3", "longrope", "mrope")


def _check_modelled(cfg: dict[str, Any], model_type: str) -> None:
    """ValueError naming model.hf_config and the key when the config describes something the
    cost model does not: another architecture (model_type), a gated MLP with a gate other than
    SiLU (``hidden_activation``: Gemma's GeGLU, modelled for gemma3 only) or rope scaling of an
    unknown type. Windows: hf_kinds.window_fields."""
    if model_type and model_type not in HF_MODEL_TYPES:
        raise ValueError(
            f"model.hf_config: model_type={model_type!r} is not an architecture "
            f"paraplan models; it imports {', '.join(HF_MODEL_TYPES)} (or give the "
            "model's sizes as explicit model fields)"
        )
    if "hidden_activation" in cfg and not model_type.startswith("gemma3"):
        raise ValueError(
            f"model.hf_config: hidden_activation={show_value(cfg['hidden_activation'])}"
            f" (a Gemma-style gated GELU MLP) is not modelled for model_type={model_type!r}; "
            "paraplan models it for gemma3 (GeGLU), and SwiGLU, GELU, ReLU and ReLU^2 MLPs"
        )
    act = cfg.get("hidden_act")
    if model_type in _GATED_MODEL_TYPES and act not in (None, "silu", "swiglu"):
        raise ValueError(
            f"model.hf_config: hidden_act={show_value(act)} with model_type="
            f"{model_type!r} is a gated MLP (act(gate) * up) with a {act} gate; "
            "paraplan models the gated MLP only with SiLU (SwiGLU)"
        )
    rope = cfg.get("rope_scaling")
    if isinstance(rope, dict):
        kind = rope.get("rope_type", rope.get("type"))
        if kind not in _ROPE_TYPES or (kind == "mrope" and model_type != "qwen2_5_vl"):
            raise ValueError(
                f"model.hf_config: rope_scaling type {show_value(kind)} is not one "
                f"paraplan knows for model_type={model_type!r} ({', '.join(_ROPE_TYPES)}: each only "
                "rescales the rotary frequencies; mrope only for qwen2_5_vl)"
            )
    elif rope is not None:
        raise ValueError(f"model.hf_config: rope_scaling={show_value(rope)} must be an object or null")


MAX_HF_CONFIG_BYTES = 4 << 20  # a config.json is a few KB; refuse anything that is not one


def _dense_prefix(cfg: dict[str, Any]) -> int:
    """Length of Qwen-MoE's ``mlp_only_layers`` (dense layers), which must be 0, 1, ..., n-1."""
    value = cfg.get("mlp_only_layers") or []
    if not isinstance(value, list) or any(type(i) is not int for i in value):
        raise ValueError(
            f"model.hf_config: mlp_only_layers={show_value(value)} must be a list of layer indices"
        )
    if value != list(range(len(value))):
        raise ValueError(
            f"model.hf_config: mlp_only_layers={show_value(value)} is not a prefix of the layers; "
            "paraplan models dense layers only as the first ones (first_dense_layers)"
        )
    if len(value) > MODEL_LIMITS["first_dense_layers"]:
        raise ValueError(
            f"model.hf_config: mlp_only_layers lists {len(value):,} layers, over "
            f"paraplan's limit of {MODEL_LIMITS['first_dense_layers']:,}"
        )
    return len(value)


def _hf_moe_mla(cfg: dict[str, Any]) -> dict[str, int]:
    """MoE and MLA fields of a Mixtral, Qwen2/3-MoE, DeepSeek-V2/V3 or gpt-oss config."""
    experts = _int(
        cfg, "num_local_experts", "n_routed_experts", "num_experts", spec="num_experts", default=0, minimum=0
    )
    out: dict[str, int] = {}
    if experts:
        moe = f" for a mixture-of-experts model ({experts} experts)"
        out["num_experts"] = experts
        out["top_k"] = _int(
            cfg, "num_experts_per_tok", "experts_per_token", "moe_topk", spec="num_experts", needed_for=moe
        )
        # Mixtral and gpt-oss give the expert width as intermediate_size
        out["moe_ffn_hidden"] = _int(
            cfg, "moe_intermediate_size", "intermediate_size", spec="moe_ffn_hidden", needed_for=moe
        )
        shared = _int(cfg, "n_shared_experts", spec="num_shared_experts", default=0, minimum=0)
        shared_width = _int(
            cfg, "shared_expert_intermediate_size", spec="shared_ffn_hidden", default=0, minimum=0
        )
        if shared_width and not shared:
            shared = 1  # Qwen2-MoE: one shared expert of its own width
        out["num_shared_experts"] = shared
        out["shared_ffn_hidden"] = shared_width or shared * out["moe_ffn_hidden"]
        out["first_dense_layers"] = _int(
            cfg, "first_k_dense_replace", spec="first_dense_layers", default=0, minimum=0
        )
        out["moe_layer_freq"] = _int(cfg, "moe_layer_freq", spec="moe_layer_freq", default=1)
        step = _int(cfg, "decoder_sparse_step", spec="moe_layer_freq", default=1, minimum=0)
        if step > 1:  # Qwen MoE: layer i is sparse when (i + 1) % step == 0
            out["first_dense_layers"], out["moe_layer_freq"] = step - 1, step
        out["first_dense_layers"] = max(out["first_dense_layers"], _dense_prefix(cfg))
    kv_lora_rank = _int(cfg, "kv_lora_rank", spec="kv_lora_rank", default=0, minimum=0)
    if kv_lora_rank:
        mla = f" for multi-head latent attention (kv_lora_rank={kv_lora_rank})"
        out["kv_lora_rank"] = kv_lora_rank
        out["q_lora_rank"] = _int(cfg, "q_lora_rank", spec="q_lora_rank", default=0, minimum=0)
        for key in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            out[key] = _int(cfg, key, spec=key, needed_for=mla)
    return out


_LEARNED_POSITIONS = ("gpt2", "gpt_neo", "opt")  # learned absolute position tables
_BIASED = ("gpt2", "gpt_neox", "bloom", "gpt_oss")  # biases on every linear layer
_QKV_BIAS = ("qwen2", "qwen2_moe", "qwen2_5_vl")  # Qwen2 attention: bias on q, k, v only
_QK_NORM = ("qwen3", "qwen3_moe")  # Qwen3: RMSNorm on per-head queries and keys
DEEPSEEK_V3_BALANCE_FACTOR = 1e-4  # sequence-wise balance loss alpha, arXiv:2412.19437 Sec. 4.2


def _hf_rope(cfg: dict[str, Any], model_type: str) -> Rope:
    """RoPE theta, rotated fraction and the llama3 / YaRN scaling of a config.json; other
    scalings (linear, dynamic, longrope) are not modelled and refused."""
    fraction = _float(cfg, "partial_rotary_factor", _float(cfg, "rotary_pct", 1.0))
    theta = _float(cfg, "rope_theta", 10_000.0)
    scaling = cfg.get("rope_scaling")
    if not scaling:
        return Rope(theta=theta, fraction=fraction)
    if not isinstance(scaling, dict):
        raise ValueError(f"model.hf_config: rope_scaling={show_value(scaling)} must be an object")
    kind = scaling.get("rope_type") or scaling.get("type")
    if kind in ("mrope", "default"):  # multimodal RoPE: plain RoPE for text (_ROPE_TYPES)
        return Rope(theta=theta, fraction=fraction)
    if kind == "linear" and model_type.startswith("gemma3"):  # Gemma 3's global layers
        return Rope(theta=theta, fraction=fraction, scaling="linear", factor=_float(scaling, "factor", 1.0))
    if kind not in ("llama3", "yarn"):
        raise ValueError(
            f"model.hf_config: rope_scaling type {kind!r} is not modelled; paraplan models llama3 and yarn"
        )
    common = {
        "theta": theta,
        "fraction": fraction,
        "scaling": kind,
        "factor": _float(scaling, "factor", 1.0),
        "original_max_positions": int(_float(scaling, "original_max_position_embeddings", 0.0)),
    }
    if kind == "llama3":
        return Rope(
            **common,
            low_freq_factor=_float(scaling, "low_freq_factor", 1.0),
            high_freq_factor=_float(scaling, "high_freq_factor", 4.0),
        )
    return Rope(
        **common,
        beta_fast=_float(scaling, "beta_fast", 32.0),
        beta_slow=_float(scaling, "beta_slow", 1.0),
        mscale=_float(scaling, "mscale", 1.0),
        mscale_all_dim=float(scaling.get("mscale_all_dim") or 0.0),
        round_correction_range=scaling.get("truncate", True) is not False,
    )


def _hf_router(cfg: dict[str, Any], model_type: str) -> Router:
    """Score function, expert bias, group-limited routing, scaling and balance loss."""
    if model_type.startswith("deepseek"):
        return Router(
            score=_str(cfg, "scoring_func", default="softmax"),
            expert_bias=cfg.get("topk_method") == "noaux_tc",
            groups=_int(cfg, "n_group", spec="num_experts", default=0, minimum=0),
            group_topk=_int(cfg, "topk_group", spec="num_experts", default=0, minimum=0),
            scaling_factor=_float(cfg, "routed_scaling_factor", 1.0),
            balance="seq_aux_loss",
            normalize_top_k=cfg.get("norm_topk_prob", True) is not False,
            aux_loss_coeff=_float(cfg, "aux_loss_alpha", DEEPSEEK_V3_BALANCE_FACTOR),
        )
    coeff = cfg.get("router_aux_loss_coef")
    return Router(
        aux_loss_coeff=_float(cfg, "router_aux_loss_coef", 1.0) if coeff else 0.0,
        normalize_top_k=cfg.get("norm_topk_prob", True) is not False,
    )


def _hf_architecture(cfg: dict[str, Any], model_type: str) -> dict[str, Any]:
    """ModelSpec's architecture fields (positions, biases, norms, windows, router) of a
    config.json."""
    out: dict[str, Any] = {
        "position_embedding": (
            "learned" if model_type in _LEARNED_POSITIONS else "alibi" if model_type == "bloom" else "rope"
        ),
        "rope": _hf_rope(cfg, model_type),
        "norm_eps": _float(
            cfg, "rms_norm_eps", _float(cfg, "layer_norm_epsilon", _float(cfg, "layer_norm_eps", 1e-5))
        ),
        "linear_bias": model_type in _BIASED,
        "qkv_bias": model_type in _QKV_BIAS,
        "qk_norm": model_type in _QK_NORM,
        "parallel_residual": model_type == "gpt_neox" and cfg.get("use_parallel_residual", True),
        "attention_sinks": model_type == "gpt_oss",
    }
    if _value(cfg, ("num_local_experts", "n_routed_experts", "num_experts"))[0]:
        out["router"] = _hf_router(cfg, model_type)
    return out


def read_json(path: Path) -> Any:
    """The parsed JSON of an hf_config file; ValueError naming model.hf_config and the cause."""
    where = f"model.hf_config={str(path)!r}"
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_HF_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ValueError(f"{where}: no such file") from None
    except IsADirectoryError:
        raise ValueError(f"{where} is a directory; give the path of its config.json") from None
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the path
        raise ValueError(f"{where}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
    if len(raw) > MAX_HF_CONFIG_BYTES:
        raise ValueError(
            f"{where} is larger than {MAX_HF_CONFIG_BYTES >> 20} MiB; it is not a Hugging Face config.json"
        )
    try:
        return json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as e:
        raise ValueError(
            f"{where} is not UTF-8 text (byte 0x{raw[e.start]:02x} at position {e.start})"
        ) from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{where} is not valid JSON: {e}") from None
    except RecursionError:
        raise ValueError(f"{where} is nested too deeply to be a config.json") from None
    except ValueError as e:  # e.g. an integer over Python's 4,300-digit conversion limit
        raise ValueError(f"{where} is not valid JSON: {e}") from None


def from_hf_config(path: str | Path | dict[str, Any]) -> ModelSpec:
    """Import a Hugging Face ``config.json``: Llama, Mistral, Qwen2/3, GPT-2 and GPT-NeoX styles,
    and the mixture-of-experts families Mixtral, Qwen2/3-MoE, DeepSeek-V2/V3 (with MLA) and
    gpt-oss, and the layer-kind families (graph/hf_kinds.py): Llama 4 (chunked attention,
    interleaved MoE), Gemma 3 text (windows, GeGLU), DeepSeek-V3's multi-token prediction,
    Nemotron-H and Jamba (hybrid Mamba patterns), Qwen2.5-VL (vision encoder). Sliding windows
    are costed where the config states which layers have them. Not modelled: biases (a few
    vectors per layer). Other model types, a gated MLP with a non-SiLU gate (Gemma 3's GELU
    gate excepted), unknown rope scaling, windows without a layout and unmodelled encoders are
    refused. Every value is type- and range-checked: a ValueError names model.hf_config, the
    JSON key and the rule."""
    if isinstance(path, dict):
        cfg, stem = path, "hf-model"
    else:
        p = Path(path)
        cfg, stem = read_json(p), p.stem
    if not isinstance(cfg, dict):
        raise ValueError(
            f"model.hf_config: the file holds a JSON {type(cfg).__name__}, not an "
            "object of model settings (hidden_size, num_hidden_layers, ...)"
        )
    name = cfg.get("_name_or_path")
    name = name if isinstance(name, str) and name else stem  # only a display name
    model_type = _str(cfg, "model_type", default="")
    cfg, vision = flatten(cfg)
    default_act = {"nemotron_h": "relu2", "gemma3": "gelu", "gemma3_text": "gelu"}.get(model_type, "gelu")
    act_name = _str(cfg, "hidden_act", "activation_function", default=default_act)
    _check_modelled(cfg, model_type)
    if act_name not in _HF_ACTIVATIONS:
        raise ValueError(
            f"model.hf_config: activation {act_name!r} is not supported; paraplan "
            f"models {', '.join(sorted(_HF_ACTIVATIONS))}"
        )
    hidden = _int(cfg, "hidden_size", "n_embd", "d_model", spec="hidden")
    heads = _int(cfg, "num_attention_heads", "n_head", spec="num_heads")
    extra = _hf_moe_mla(cfg)
    ffn = _int(cfg, "intermediate_size", "n_inner", spec="ffn_hidden", default=4 * hidden)
    if extra.get("num_experts") and not extra.get("first_dense_layers"):
        ffn = 0  # every MLP is MoE: intermediate_size is the expert width (or unused)
    fields: dict[str, Any] = dict(
        name=name,
        num_layers=_int(cfg, "num_hidden_layers", "n_layer", spec="num_layers"),
        hidden=hidden,
        ffn_hidden=ffn,
        num_heads=heads,
        num_kv_heads=_int(cfg, "num_key_value_heads", spec="num_kv_heads", default=heads),
        vocab=_int(cfg, "vocab_size", spec="vocab"),
        head_dim=_int(cfg, "head_dim", spec="head_dim", default=0, minimum=0),
        activation=_HF_ACTIVATIONS[act_name],
        tied_embeddings=_bool(cfg, "tie_word_embeddings", default=model_type in ("gpt2",)),
        norm="layernorm" if model_type in ("gpt2", "gpt_neox") else "rmsnorm",
        **extra,
        **_hf_architecture(cfg, model_type),
    )
    fields.update(window_fields(cfg, model_type, fields["num_layers"]))
    fields.update(kind_fields(cfg, model_type, fields))
    if vision is not None:
        fields["vision"] = vision_fields(vision, hidden)
    return ModelSpec(**fields)
