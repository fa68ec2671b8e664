"""Model presets (``data/presets.yaml``) and Hugging Face ``config.json`` import."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from paraplan.graph.spec import Activation, ModelSpec

__all__ = ["preset_names", "preset", "from_hf_config", "from_fields"]

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


def from_fields(name: str, fields: dict[str, Any]) -> ModelSpec:
    """ModelSpec from the scenario's explicit field names (layers, hidden, heads, ...)."""
    return ModelSpec(
        name=name,
        num_layers=int(fields["layers"]),
        hidden=int(fields["hidden"]),
        ffn_hidden=int(fields["ffn_hidden"]),
        num_heads=int(fields["heads"]),
        num_kv_heads=int(fields.get("kv_heads") or fields["heads"]),
        vocab=int(fields["vocab"]),
        head_dim=int(fields.get("head_dim") or 0),
        activation=Activation(fields.get("activation", "swiglu")),
        tied_embeddings=bool(fields.get("tied_embeddings", False)),
        norm=str(fields.get("norm", "rmsnorm")),
        dropout=bool(fields.get("dropout", False)),
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


def from_hf_config(path: str | Path | dict[str, Any]) -> ModelSpec:
    """Import a Hugging Face ``config.json`` (Llama, Mistral, Qwen2/3, GPT-2, GPT-NeoX styles)."""
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
    )
