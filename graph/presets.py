"""Model presets (``data/presets.yaml``) and Hugging Face ``config.json`` import."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from paraplan.graph.spec import Activation, ModelSpec

__all__ = ["preset_names", "preset", "from_hf_config", "from_fields", "MOE_MLA_FIELDS"]

_HF_ACTIVATIONS = {
    "silu": Activation.SWIGLU, "swiglu": Activation.SWIGLU,
    "gelu": Activation.GELU, "gelu_new": Activation.GELU, "gelu_fast": Activation.GELU,
    "gelu_pytorch_tanh": Activation.GELU, "relu": Activation.RELU, "relu2": Activation.RELU2,
}


@cache
def _presets() -> dict[str, dict[str, Any]]:
    text = resources.files("paraplan.graph").joinpath("data/presets.yaml").read_text()
    return yaml.safe_load(text)


def preset_names() -> list[str]:
    return sorted(_presets())


# scenario / preset field name -> ModelSpec field, for the optional MoE and MLA shape fields
MOE_MLA_FIELDS = {
    "experts": "num_experts", "top_k": "top_k", "shared_experts": "num_shared_experts",
    "moe_ffn_hidden": "moe_ffn_hidden", "shared_ffn_hidden": "shared_ffn_hidden",
    "first_dense_layers": "first_dense_layers", "moe_layer_freq": "moe_layer_freq",
    "q_lora_rank": "q_lora_rank", "kv_lora_rank": "kv_lora_rank",
    "qk_nope_head_dim": "qk_nope_head_dim", "qk_rope_head_dim": "qk_rope_head_dim",
    "v_head_dim": "v_head_dim",
}


def from_fields(name: str, fields: dict[str, Any]) -> ModelSpec:
    """ModelSpec from the scenario's explicit field names (layers, hidden, heads, ...; experts,
    top_k, ... for mixture-of-experts models; kv_lora_rank, ... for latent attention)."""
    extra = {spec_name: int(fields[key]) for key, spec_name in MOE_MLA_FIELDS.items()
             if fields.get(key) is not None}
    return ModelSpec(
        name=name,
        num_layers=int(fields["layers"]),
        hidden=int(fields["hidden"]),
        ffn_hidden=int(fields.get("ffn_hidden") or 0),
        num_heads=int(fields["heads"]),
        num_kv_heads=int(fields.get("kv_heads") or fields["heads"]),
        vocab=int(fields["vocab"]),
        head_dim=int(fields.get("head_dim") or 0),
        activation=Activation(fields.get("activation", "swiglu")),
        tied_embeddings=bool(fields.get("tied_embeddings", False)),
        norm=str(fields.get("norm", "rmsnorm")),
        dropout=bool(fields.get("dropout", False)),
        **extra,
    )


def preset(name: str) -> ModelSpec:
    presets = _presets()
    if name not in presets:
        raise ValueError(
            f"model.preset={name!r} is not a known preset; choose one of {', '.join(sorted(presets))}"
        )
    return from_fields(name, presets[name])


def _first(cfg: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return default


def _hf_moe_mla(cfg: dict[str, Any]) -> dict[str, int]:
    """MoE and MLA fields of a Mixtral, Qwen2/3-MoE, DeepSeek-V2/V3 or gpt-oss config."""
    experts = _first(cfg, "num_local_experts", "n_routed_experts", "num_experts", default=0)
    out: dict[str, int] = {}
    if experts:
        out["num_experts"] = int(experts)
        out["top_k"] = int(_first(cfg, "num_experts_per_tok", "experts_per_token", "moe_topk"))
        # Mixtral and gpt-oss give the expert width as intermediate_size
        out["moe_ffn_hidden"] = int(_first(cfg, "moe_intermediate_size", "intermediate_size"))
        shared = int(_first(cfg, "n_shared_experts", default=0) or 0)
        shared_width = _first(cfg, "shared_expert_intermediate_size", default=0) or 0
        if shared_width and not shared:
            shared = 1  # Qwen2-MoE: one shared expert of its own width
        out["num_shared_experts"] = shared
        out["shared_ffn_hidden"] = int(shared_width or shared * out["moe_ffn_hidden"])
        out["first_dense_layers"] = int(_first(cfg, "first_k_dense_replace", default=0))
        out["moe_layer_freq"] = int(_first(cfg, "moe_layer_freq", default=1))
        step = int(_first(cfg, "decoder_sparse_step", default=1))
        if step > 1:  # Qwen MoE: layer i is sparse when (i + 1) % step == 0
            out["first_dense_layers"], out["moe_layer_freq"] = step - 1, step
        dense_only = list(cfg.get("mlp_only_layers") or [])
        if dense_only:
            if dense_only != list(range(len(dense_only))):
                raise ValueError(
                    f"model.hf_config: mlp_only_layers={dense_only} is not a prefix of the layers; "
                    "paraplan models dense layers only as the first ones (first_dense_layers)"
                )
            out["first_dense_layers"] = max(out["first_dense_layers"], len(dense_only))
    if _first(cfg, "kv_lora_rank", default=0):
        out["kv_lora_rank"] = int(cfg["kv_lora_rank"])
        out["q_lora_rank"] = int(_first(cfg, "q_lora_rank", default=0) or 0)
        for key in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            out[key] = int(cfg[key])
    return out


def from_hf_config(path: str | Path | dict[str, Any]) -> ModelSpec:
    """Import a Hugging Face ``config.json``: Llama, Mistral, Qwen2/3, GPT-2 and GPT-NeoX styles,
    and the mixture-of-experts families Mixtral, Qwen2/3-MoE, DeepSeek-V2/V3 (with MLA) and
    gpt-oss. Not modelled: DeepSeek's multi-token-prediction module, gpt-oss's sliding-window
    layers (costed as full attention) and biases."""
    if isinstance(path, dict):
        cfg, name = path, str(path.get("_name_or_path", "hf-model"))
    else:
        p = Path(path)
        try:
            cfg = json.loads(p.read_text())
        except FileNotFoundError:
            raise ValueError(f"model.hf_config={str(p)!r}: no such file") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"model.hf_config={str(p)!r} is not valid JSON: {e}") from None
        name = str(cfg.get("_name_or_path") or p.stem)
    model_type = cfg.get("model_type", "")
    hidden = _first(cfg, "hidden_size", "n_embd", "d_model")
    heads = _first(cfg, "num_attention_heads", "n_head")
    layers = _first(cfg, "num_hidden_layers", "n_layer")
    vocab = _first(cfg, "vocab_size")
    if None in (hidden, heads, layers, vocab):
        raise ValueError(
            f"model.hf_config: model_type={model_type!r} lacks one of hidden_size/n_embd, "
            "num_attention_heads/n_head, num_hidden_layers/n_layer, vocab_size"
        )
    act_name = _first(cfg, "hidden_act", "activation_function", default="gelu")
    if act_name not in _HF_ACTIVATIONS:
        raise ValueError(f"model.hf_config: activation {act_name!r} is not supported")
    activation = _HF_ACTIVATIONS[act_name]
    ffn = _first(cfg, "intermediate_size", "n_inner", default=4 * hidden)
    tied_default = model_type in ("gpt2",)
    extra = _hf_moe_mla(cfg)
    if extra.get("num_experts") and not extra.get("first_dense_layers"):
        ffn = 0  # every MLP is MoE: intermediate_size is the expert width (or unused)
    return ModelSpec(
        name=name,
        num_layers=int(layers),
        hidden=int(hidden),
        ffn_hidden=int(ffn),
        num_heads=int(heads),
        num_kv_heads=int(_first(cfg, "num_key_value_heads", default=heads)),
        vocab=int(vocab),
        head_dim=int(_first(cfg, "head_dim", default=0)),
        activation=activation,
        tied_embeddings=bool(cfg.get("tie_word_embeddings", tied_default)),
        norm="layernorm" if model_type in ("gpt2", "gpt_neox") else "rmsnorm",
        **extra,
    )
