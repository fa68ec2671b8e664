"""Model presets (``data/presets.yaml``, each entry with its source) and the scenario's explicit
``model:`` fields: :func:`from_fields` makes a ModelSpec of them, :func:`to_fields` writes one
back. Hugging Face ``config.json`` import is graph/hf_config.py.
"""

from __future__ import annotations

from dataclasses import fields as dataclass_fields
from functools import cache
from importlib import resources
from typing import Any

import yaml
from paraplan.graph.spec import Activation, Mamba, ModelSpec, Rope, Router, Vision

__all__ = [
    "preset_names",
    "preset",
    "from_fields",
    "to_fields",
    "MOE_MLA_FIELDS",
    "preset_fields",
    "ARCHITECTURE_FIELDS",
    "KIND_FIELDS",
]


@cache
def _presets() -> dict[str, dict[str, Any]]:
    text = resources.files("paraplan.graph").joinpath("data/presets.yaml").read_text()
    return yaml.safe_load(text)


def preset_names() -> list[str]:
    return sorted(_presets())


def preset_fields(name: str) -> dict[str, Any]:
    """The data file's entry of preset ``name`` (its model fields and ``source``); KeyError if
    unknown."""
    return dict(_presets()[name])


# scenario / preset field name -> ModelSpec field, for the optional MoE and MLA shape fields
MOE_FIELDS = {
    "experts": "num_experts",
    "top_k": "top_k",
    "shared_experts": "num_shared_experts",
    "moe_ffn_hidden": "moe_ffn_hidden",
    "shared_ffn_hidden": "shared_ffn_hidden",
    "moe_latent_dim": "moe_latent_dim",
    "first_dense_layers": "first_dense_layers",
    "moe_layer_freq": "moe_layer_freq",
}
"""Scenario key -> ModelSpec field of a mixture-of-experts model's sizes."""
MLA_FIELDS = {
    "q_lora_rank": "q_lora_rank",
    "kv_lora_rank": "kv_lora_rank",
    "qk_nope_head_dim": "qk_nope_head_dim",
    "qk_rope_head_dim": "qk_rope_head_dim",
    "v_head_dim": "v_head_dim",
}
"""Scenario key -> ModelSpec field of multi-head latent attention's sizes."""
MOE_MLA_FIELDS = {**MOE_FIELDS, **MLA_FIELDS}


ARCHITECTURE_FIELDS: dict[str, type] = {
    "position_embedding": str,
    "norm_eps": float,
    "zero_centered_norm": bool,
    "linear_bias": bool,
    "qkv_bias": bool,
    "qk_norm": bool,
    "parallel_residual": bool,
    "sliding_window": int,
    "full_attention_every": int,
    "attention_sinks": bool,
}
"""Optional ModelSpec fields that shape the built model, not the layer graph's numbers; ``rope``
and ``router`` are mappings of :class:`Rope` / :class:`Router` fields."""


KIND_FIELDS: dict[str, type] = {
    "attention_chunk": int,
    "nope_full_attention": bool,
    "layer_pattern": str,
    "moe_pattern": str,
    "mtp_layers": int,
}
"""Optional ModelSpec fields that add layer kinds (graph/layers.py); ``mamba`` and ``vision`` are
mappings of :class:`Mamba` / :class:`Vision` fields."""
_NESTED = (("rope", Rope), ("router", Router), ("mamba", Mamba), ("vision", Vision))


def _nested(cls: type, key: str, value: Any) -> Any:
    """A Rope or Router from a mapping of its fields; ValueError names the unknown key."""
    if value is None:
        return cls()
    if not isinstance(value, dict):
        raise ValueError(f"model.{key} must be a mapping of {cls.__name__} fields")
    known = {f.name for f in dataclass_fields(cls)}
    unknown = sorted(set(value) - known)
    if unknown:
        raise ValueError(
            f"model.{key}.{unknown[0]} is not a known field; choose from {', '.join(sorted(known))}"
        )
    defaults = cls()
    return cls(**{k: type(getattr(defaults, k))(v) for k, v in value.items()})


def _architecture(fields: dict[str, Any]) -> dict[str, Any]:
    """The ModelSpec keyword arguments of ARCHITECTURE_FIELDS, ``rope`` and ``router``."""
    known = {**ARCHITECTURE_FIELDS, **KIND_FIELDS}
    out: dict[str, Any] = {
        key: kind(fields[key]) for key, kind in known.items() if fields.get(key) is not None
    }
    for key, cls in _NESTED:
        out[key] = _nested(cls, key, fields.get(key))
    return out


def from_fields(name: str, fields: dict[str, Any]) -> ModelSpec:
    """ModelSpec from the scenario's explicit field names (layers, hidden, heads, ...; experts,
    top_k, ... for mixture-of-experts models; kv_lora_rank, ... for latent attention)."""
    extra: dict[str, Any] = {  # integer fields only; Any so ** can fill the spec's other types too
        spec_name: int(fields[key])
        for key, spec_name in MOE_MLA_FIELDS.items()
        if fields.get(key) is not None
    }
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
        **_architecture(fields),
    )


def to_fields(spec: ModelSpec) -> dict[str, Any]:
    """The scenario's explicit ``model:`` fields of ``spec`` (from_fields reads them back into an
    equal spec): e.g. ``paraplan.solve({"model": to_fields(from_module(...)), ...})``."""
    fields: dict[str, Any] = {
        "name": spec.name,
        "layers": spec.num_layers,
        "hidden": spec.hidden,
        "ffn_hidden": spec.ffn_hidden,
        "heads": spec.num_heads,
        "kv_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "vocab": spec.vocab,
        "activation": spec.activation.value,
        "tied_embeddings": spec.tied_embeddings,
        "norm": spec.norm,
        "dropout": spec.dropout,
    }
    moe = tuple(MOE_FIELDS) if spec.is_moe else ()
    mla = tuple(MLA_FIELDS) if spec.is_mla else ()
    for key in (*moe, *mla):
        value = getattr(spec, MOE_MLA_FIELDS[key])
        if value:
            fields[key] = value
    defaults = {f.name: f.default for f in dataclass_fields(ModelSpec)}
    for key in (*ARCHITECTURE_FIELDS, *KIND_FIELDS):
        if getattr(spec, key) != defaults.get(key):
            fields[key] = getattr(spec, key)
    for key, cls in _NESTED:
        changed = {
            f.name: _plain(getattr(getattr(spec, key), f.name))
            for f in dataclass_fields(cls)
            if getattr(getattr(spec, key), f.name) != getattr(cls(), f.name)
        }
        if changed:
            fields[key] = changed
    return fields


def _plain(value: Any) -> Any:
    """An enum as its value (to_fields writes plain YAML/JSON values)."""
    return value.value if isinstance(value, Activation) else value


def preset(name: str) -> ModelSpec:
    presets = _presets()
    if name not in presets:
        raise ValueError(
            f"model.preset={name!r} is not a known preset; choose one of {', '.join(sorted(presets))}"
        )
    return from_fields(name, presets[name])
