"""A scenario file's ``model.layers`` given as a pattern or a list, read into the layer
descriptors of graph/layer_items.py and compiled by graph/builder.py's compiler (the one
``from_layers`` uses) into the scenario's explicit ``model:`` keys (:func:`scenario_layers`).
ValueError names the path of the entry (``model.layers[3].mlp``) and the rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields as dataclass_fields
from typing import Any

from paraplan.graph.builder import Placed, compile_layers
from paraplan.graph.layer_items import MAX_ITEMS, MLP_NAMES, Attention, Block, LayerItem, Mlp, Moe, Mtp
from paraplan.graph.spec import PATTERN_SYMBOLS, Mamba, ModelSpec, scenario_key, show_value

__all__ = ["scenario_layers", "DEFAULT_LEGEND"]


_SYMBOL_ENTRIES: dict[str, dict[str, Any]] = {
    "mamba": {"mamba": True},
    "attention": {"attention": "full"},
    "mlp": {"mlp": "dense"},
    "moe": {"mlp": "moe"},
}
DEFAULT_LEGEND: dict[str, dict[str, Any]] = {c: _SYMBOL_ENTRIES[k] for c, k in PATTERN_SYMBOLS.items()}
"""Megatron's hybrid symbols (PATTERN_SYMBOLS: M Mamba, * attention, - dense MLP, E MoE) as layer
entries; a pattern's ``legend`` adds characters to these or redefines them."""

_KEY = "\x00"  # in an entry's path, where a Block's ".attention" or ".mlp" goes
_LAYER_KEYS = ("attention", "mlp", "mamba", "mtp", "repeat")
_GROUP_KEYS = ("pattern", "legend", "layers", "repeat")
_ATTENTION_WORDS = ("full", "window", "chunk", "nope")


def scenario_layers(model: Mapping[str, Any]) -> dict[str, Any]:
    """The scenario's explicit ``model:`` keys that ``model.layers`` given as a pattern or a list
    stands for (``layers`` the count, ``layer_pattern`` or ``moe_pattern`` / ``first_dense_layers``
    / ``moe_layer_freq``, ``sliding_window`` / ``attention_chunk``, ``full_attention_every``,
    ``nope_full_attention``, ``mtp_layers``), compiled with the same compiler as from_layers.

    ``layers`` is ``{pattern: "M*M-ME", legend: {...}, repeat: n}`` (one legend character per
    layer; Megatron's symbols by default; spaces ignored) or a list of entries. An entry is a
    layer - ``attention`` (``full``, ``window``, ``chunk``, ``nope`` or ``{window: N}`` /
    ``{chunk: N}`` / ``{nope: true}``; ``window``/``chunk`` take ``model.sliding_window`` /
    ``model.attention_chunk``), ``mlp`` (``dense`` or ``moe``), ``mamba: true``, ``mtp: true``;
    attention (or mamba) with mlp is a block - or a group (``pattern``/``legend`` or ``layers``),
    each with an optional ``repeat``. ValueError names the path (``model.layers[3].mlp``)."""
    given = {_spec_name(k): v for k, v in model.items() if k != "layers"}
    items: list[tuple[str, LayerItem]] = []
    _document(model["layers"], "model.layers", given, items)
    numbered = [(f"{w} (layer {k})", x) for k, (w, x) in enumerate(items)]
    placed = [Placed(x, w, m) for w, x, m in _with_mlp_paths(numbered)]
    derived = compile_layers(placed, given, lambda f: f"model.{scenario_key(f)}", "model.layers")
    return {scenario_key(k): v for k, v in derived.items()}


def _spec_name(key: str) -> str:
    names = {scenario_key(f.name): f.name for f in dataclass_fields(ModelSpec)}
    return names.get(key, key)


def _with_mlp_paths(items: list[tuple[str, LayerItem]]) -> list[tuple[str, LayerItem, str]]:
    """(path, layer, mlp path): a Block's entry names its attention and its mlp key (``where``
    holds _KEY where the key goes)."""
    return [
        (w.replace(_KEY, ".attention"), x, w.replace(_KEY, ".mlp"))
        if isinstance(x, Block)
        else (w.replace(_KEY, ""), x, "")
        for w, x in items
    ]


def _document(value: Any, where: str, given: Mapping[str, Any], out: list[tuple[str, LayerItem]]) -> None:
    """Append the layers of ``value`` (a group mapping or a list of entries) to ``out``."""
    if isinstance(value, list):
        for j, entry in enumerate(value):
            _entry(entry, f"{where}[{j}]", given, out)
    elif isinstance(value, dict) and ("pattern" in value or "layers" in value):
        _group(value, where, given, out)
    else:
        raise ValueError(
            f"{where}={show_value(value)} must be a whole number (the layer count), a pattern "
            "{pattern: ..., legend: ...} or a list of layer entries"
        )


def _repeat(entry: Mapping[str, Any], where: str) -> int:
    n = entry.get("repeat", 1)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{where}.repeat={show_value(n)} must be a whole number >= 1")
    if n > MAX_ITEMS:
        raise ValueError(f"{where}.repeat={n:,} exceeds paraplan's limit of {MAX_ITEMS:,} layers")
    return n


def _entry(entry: Any, where: str, given: Mapping[str, Any], out: list[tuple[str, LayerItem]]) -> None:
    if not isinstance(entry, dict):
        raise ValueError(f"{where}={show_value(entry)} must be a mapping (a layer or a group of layers)")
    if "pattern" in entry or "layers" in entry:
        _group(entry, where, given, out)
        return
    unknown = sorted(set(entry) - set(_LAYER_KEYS))
    if unknown:
        raise ValueError(
            f"{where}.{unknown[0]} is not a layer key; a layer has {', '.join(_LAYER_KEYS)}, a group "
            f"pattern (+ legend) or layers (+ repeat)"
        )
    layers = _entry_layers(entry, where, given)
    _extend(out, [(f"{where}{_KEY}", x) for x in layers], _repeat(entry, where))


def _extend(out: list[tuple[str, LayerItem]], items: list[tuple[str, LayerItem]], n: int) -> None:
    """``items`` n times; refuses a list past MAX_ITEMS before building it."""
    if len(out) + n * len(items) > MAX_ITEMS:
        raise ValueError(f"model.layers: more than {MAX_ITEMS:,} layers (paraplan's limit)")
    out.extend(items * n)


def _entry_layers(entry: Mapping[str, Any], where: str, given: Mapping[str, Any]) -> list[LayerItem]:
    """The descriptors of one layer entry: a Block (attention + mlp), Mamba (+ its MLP), one
    layer, or an Mtp."""
    kinds = [k for k in ("attention", "mlp", "mamba", "mtp") if k in entry]
    for flag in ("mamba", "mtp"):
        if flag in entry and entry[flag] is not True:
            raise ValueError(f"{where}.{flag}={show_value(entry[flag])} must be true (or leave the key out)")
    if not kinds:
        raise ValueError(f"{where}: a layer entry needs attention, mlp, mamba or mtp")
    if "mtp" in entry and len(kinds) > 1:
        raise ValueError(f"{where}: mtp: true is a module of its own; give it without {kinds[0]}")
    if "mamba" in entry and "attention" in entry:
        raise ValueError(f"{where}: a layer is attention or mamba, not both (give two entries)")
    if "mtp" in entry:
        return [Mtp()]
    mlp = _mlp(entry["mlp"], f"{where}.mlp") if "mlp" in entry else None
    if "attention" in entry:
        attention = _attention(entry["attention"], f"{where}.attention", given)
        return [Block(attention, mlp)] if mlp is not None else [attention]
    if "mamba" in entry:
        return [Mamba(), mlp] if mlp is not None else [Mamba()]
    assert mlp is not None  # kinds is not empty and holds neither mtp, attention nor mamba
    return [mlp]


def _mlp(value: Any, where: str) -> Mlp | Moe:
    if value not in MLP_NAMES:
        raise ValueError(f"{where}={show_value(value)} is not one of 'dense', 'moe'")
    return MLP_NAMES[value]()


def _attention(value: Any, where: str, given: Mapping[str, Any]) -> Attention:
    """``full`` / ``nope`` / ``window`` / ``chunk`` (sizes from model.sliding_window /
    model.attention_chunk) or a mapping of Attention fields."""
    if isinstance(value, dict):
        unknown = sorted(set(value) - {"window", "chunk", "nope"})
        if unknown:
            raise ValueError(f"{where}.{unknown[0]} is not an attention key; use window, chunk or nope")
        try:
            return Attention(**value)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
    if value not in _ATTENTION_WORDS:
        raise ValueError(
            f"{where}={show_value(value)} is not one of {', '.join(_ATTENTION_WORDS)} "
            "(or a mapping {window: N} / {chunk: N} / {nope: true})"
        )
    if value in ("window", "chunk"):
        spec_field = "sliding_window" if value == "window" else "attention_chunk"
        size = given.get(spec_field)
        if not size:
            raise ValueError(
                f"{where}={value} needs model.{spec_field} (its size in tokens), or write "
                f"attention: {{{value}: N}}"
            )
        return Attention(**{value: size})
    return Attention(nope=value == "nope")


def _group(
    group: Mapping[str, Any], where: str, given: Mapping[str, Any], out: list[tuple[str, LayerItem]]
) -> None:
    unknown = sorted(set(group) - set(_GROUP_KEYS))
    if unknown or ("pattern" in group and "layers" in group):
        bad = unknown[0] if unknown else "layers"
        raise ValueError(
            f"{where}.{bad}: a group is {{pattern: ..., legend: ..., repeat: n}} or "
            "{layers: [...], repeat: n}"
        )
    if "legend" in group and "pattern" not in group:
        raise ValueError(f"{where}.legend belongs to a pattern; add {where}.pattern")
    n = _repeat(group, where)
    body: list[tuple[str, LayerItem]] = []
    if "layers" in group:
        if not isinstance(group["layers"], list):
            raise ValueError(f"{where}.layers must be a list of layer entries")
        _document(group["layers"], f"{where}.layers", given, body)
    else:
        _pattern(group, where, given, body)
    _extend(out, body, n)


def _pattern(
    group: Mapping[str, Any], where: str, given: Mapping[str, Any], out: list[tuple[str, LayerItem]]
) -> None:
    pattern = group["pattern"]
    if not isinstance(pattern, str) or not pattern.strip():
        raise ValueError(f"{where}.pattern={show_value(pattern)} must be a string of legend characters")
    legend_in = group.get("legend") or {}
    if not isinstance(legend_in, dict):
        raise ValueError(f"{where}.legend must map one character to a layer entry")
    legend = {**DEFAULT_LEGEND, **legend_in}
    for char, entry in legend_in.items():
        if not isinstance(char, str) or len(char) != 1 or char.isspace():
            raise ValueError(f"{where}.legend key {show_value(char)} must be one character")
        if not isinstance(entry, dict) or "repeat" in entry or "pattern" in entry or "layers" in entry:
            raise ValueError(
                f"{where}.legend.{char} must be one layer entry (attention, mlp, mamba, mtp), without repeat"
            )
    cache: dict[str, list[LayerItem]] = {}
    c = -1
    for char in pattern:
        if char.isspace():
            continue
        c += 1
        at = f"{where}.pattern[{c}] ({char!r})"
        if char not in legend:
            raise ValueError(f"{at} is not in the legend ({', '.join(map(repr, legend))})")
        if char not in cache:
            cache[char] = _entry_layers(legend[char], f"{where}.legend.{char}", given)
        _extend(out, [(f"{at}{_KEY}", x) for x in cache[char]], 1)
