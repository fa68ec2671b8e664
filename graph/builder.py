"""A model described as its list of layers, compiled into the ModelSpec fields that build it.

``from_layers([...], hidden=..., num_heads=..., vocab=..., ...)`` takes typed layer descriptors
(graph/layer_items.py: :class:`Attention`, :class:`Mlp`, :class:`Moe`, :class:`Block`,
:class:`Mtp` and the spec's own :class:`~paraplan.graph.spec.Mamba`), with ``repeat`` for runs of
them, and returns ``build_graph(spec)``: the solver and the cost model, which read the spec, see
exactly these layers. A scenario file's ``model.layers`` given as a pattern or a list
(graph/scenario_layers.py) goes through the same compiler, :func:`compile_layers`.

Two shapes of stack, as in Megatron:

- **transformer blocks**: a list of only :class:`Block` (attention + dense or MoE MLP, one
  pipeline-placeable block each). MoE placement compiles to ``first_dense_layers`` /
  ``moe_layer_freq`` when it has that shape, else to ``moe_pattern``.
- **hybrid**: any single layer (``Attention()``, ``Mlp()``, ``Moe()``, ``Mamba()``) makes the
  list Megatron's hybrid stack (``layer_pattern``, one PATTERN_SYMBOLS character per layer);
  a ``Block`` in it is its two layers.

Attention kinds compile to ``sliding_window`` / ``attention_chunk`` + ``full_attention_every``
(+ ``nope_full_attention``), MTP modules (trailing :class:`Mtp`) to ``mtp_layers``. What one
ModelSpec cannot hold is refused with a ValueError naming the layer and the rule, never
approximated: two window (or chunk) sizes, windows and chunks together, full attention not on
every n-th layer ((i + 1) % n == 0), RoPE skipped on some full layers but not others, MLP, expert
or Mamba widths that differ between layers, an MTP module before a block.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from typing import Any, cast

from paraplan.graph.layer_items import Attention, Block, LayerItem, Mlp, Moe, Mtp, flatten_layers
from paraplan.graph.layers import LayerGraph, build_graph
from paraplan.graph.spec import MODEL_LIMITS, Mamba, ModelSpec, show_value

__all__ = ["from_layers", "compile_layers", "Placed", "DERIVED_FIELDS"]

DERIVED_FIELDS = (
    "num_layers",
    "layer_pattern",
    "moe_pattern",
    "first_dense_layers",
    "moe_layer_freq",
    "full_attention_every",
    "nope_full_attention",
    "mtp_layers",
)
"""ModelSpec fields the layer list sets; giving one as well is refused (the list is the truth)."""


@dataclass(frozen=True, slots=True)
class Placed:
    """A descriptor with the path an error names: the layer's (a Block's attention), and a
    Block's MLP."""

    layer: LayerItem
    where: str
    mlp_where: str = ""


def _placed(items: Sequence[tuple[str, LayerItem]]) -> list[Placed]:
    return [
        Placed(x, f"{w}.attention", f"{w}.mlp") if isinstance(x, Block) else Placed(x, w) for w, x in items
    ]


def from_layers(
    layers: Iterable[LayerItem | Iterable[LayerItem]],
    *,
    hidden: int,
    num_heads: int,
    vocab: int,
    ffn_hidden: int = 0,
    num_kv_heads: int = 0,
    name: str = "custom",
    **fields: Any,
) -> LayerGraph:
    """The layer graph of a model given as its layers, in order (module docstring): e.g.
    DeepSeek-V3 ``[repeat(3, Block()), repeat(58, Block(mlp="moe")), Mtp()]``. ``num_kv_heads``
    0 means ``num_heads``; any other ModelSpec field (``num_experts``, ``kv_lora_rank``,
    ``mamba``, ``vision``, ``activation``, ...) is a keyword, except those the list sets
    (DERIVED_FIELDS). Returns ``build_graph(spec)``; the compiled spec is ``graph.spec``.
    ValueError names the layer (``layers[i]``, counting the flattened list) and the rule."""
    known = {f.name for f in dataclass_fields(ModelSpec)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(f"from_layers: {unknown[0]} is not a ModelSpec field")
    given = {
        "hidden": hidden,
        "num_heads": num_heads,
        "vocab": vocab,
        "ffn_hidden": ffn_hidden,
        "num_kv_heads": num_kv_heads or num_heads,
        **fields,
    }
    derived = compile_layers(_placed(flatten_layers(layers)), given, lambda f: f, "layers")
    return build_graph(ModelSpec(name=name, **{**given, **derived}))


def compile_layers(
    items: Sequence[Placed], given: Mapping[str, Any], field_name: Callable[[str], str], root: str
) -> dict[str, Any]:
    """The ModelSpec fields (by their ModelSpec names) that make build_graph produce exactly
    ``items``: ``num_layers`` and the pattern, attention, width and MTP fields (only those not at
    their defaults). ``given``: the model's other fields (checked against the list);
    ``field_name``: how an error names a field (``num_experts`` or ``model.experts``), ``root``
    the list (``layers`` or ``model.layers``)."""
    for key in DERIVED_FIELDS:
        if given.get(key) not in (None, _default(key)):
            raise ValueError(f"{field_name(key)} is set by the layers list; drop it")
    body, mtp = _split_mtp(items, root)
    hybrid = any(not isinstance(p.layer, Block) for p in body)
    positions = _positions(body, hybrid)
    out: dict[str, Any] = {"num_layers": len(positions)}
    if len(positions) > MODEL_LIMITS["num_layers"]:
        raise ValueError(
            f"{body[-1].where}: the list holds {len(positions):,} layers; paraplan's limit is "
            f"{MODEL_LIMITS['num_layers']:,}"
        )
    if mtp:
        out["mtp_layers"] = mtp
    attention = [(i, p) for i, (sym, p) in enumerate(positions) if sym == "*" or isinstance(p.layer, Block)]
    out.update(_attention_fields(attention, given, field_name))
    out.update(_width_fields(positions, given, field_name))
    symbols = "".join(sym for sym, _ in positions)
    if hybrid:
        out["layer_pattern"] = symbols
    else:
        out.update(_moe_placement([s == "E" for s in symbols]))
    return out


def _default(field: str) -> Any:
    return next((f.default for f in dataclass_fields(ModelSpec) if f.name == field), None)


def _split_mtp(items: Sequence[Placed], root: str) -> tuple[list[Placed], int]:
    """The blocks before the trailing MTP modules, and how many there are."""
    body = [p for p in items if not isinstance(p.layer, Mtp)]
    if not body:
        raise ValueError(f"{root}: the list needs at least one layer (before any MTP module)")
    last_block = max(i for i, p in enumerate(items) if not isinstance(p.layer, Mtp))
    early = next((p for p in items[:last_block] if isinstance(p.layer, Mtp)), None)
    if early is not None:
        raise ValueError(
            f"{early.where}: an MTP module (Mtp(), mtp: true) must come after the last block (a "
            "multi-token-prediction module follows the final norm and LM head; ModelSpec.mtp_layers)"
        )
    return body, len(items) - len(body)


def _positions(body: Sequence[Placed], hybrid: bool) -> list[tuple[str, Placed]]:
    """(PATTERN_SYMBOLS character, placed layer) per block position; in a hybrid list a Block
    is two positions (its attention, then its MLP); in a list of Blocks each Block is one
    position, its character its MLP's (``E`` or ``-``)."""
    out: list[tuple[str, Placed]] = []
    for p in body:
        x = p.layer
        if isinstance(x, Block):
            mlp = Placed(_mlp_of(x), p.mlp_where)
            mlp_symbol = "E" if isinstance(x.mlp, Moe) else "-"
            if hybrid:
                out += [("*", Placed(x.attention, p.where)), (mlp_symbol, mlp)]
            else:
                out.append((mlp_symbol, p))
        else:
            symbol = {Attention: "*", Mlp: "-", Moe: "E", Mamba: "M"}[type(x)]
            out.append((symbol, p))
    return out


def _parts(p: Placed) -> tuple[Placed, ...]:
    """A Block's attention and MLP, each with its path; any other layer itself."""
    if isinstance(p.layer, Block):
        return (Placed(p.layer.attention, p.where), Placed(_mlp_of(p.layer), p.mlp_where))
    return (p,)


def _mlp_of(b: Block) -> Mlp | Moe:
    """A Block's MLP: Block.__post_init__ has already turned a name ('dense', 'moe') into one."""
    return cast("Mlp | Moe", b.mlp)


def _attention_of(p: Placed) -> Attention:
    return p.layer.attention if isinstance(p.layer, Block) else p.layer  # type: ignore[return-value]


def _attention_fields(
    attention: list[tuple[int, Placed]], given: Mapping[str, Any], field_name: Callable[[str], str]
) -> dict[str, Any]:
    """``sliding_window`` / ``attention_chunk``, ``full_attention_every`` and
    ``nope_full_attention`` of the attention layers at their block positions: ModelSpec makes
    block i full attention when (i + 1) % full_attention_every == 0 and local otherwise."""
    out: dict[str, Any] = {}
    kinds = (("window", "sliding_window", "chunk"), ("chunk", "attention_chunk", "window"))
    for size, spec_field, other in kinds:
        sized = [
            (p, getattr(_attention_of(p), size)) for _, p in attention if getattr(_attention_of(p), size)
        ]
        model = given.get(spec_field) or None
        if model and not sized:
            raise ValueError(
                f"{field_name(spec_field)}={show_value(model)} but no layer of the list has {size} "
                f"attention; give the size per layer (Attention({size}=N)) or drop it"
            )
        value = _one_value(sized, f"Attention.{size}", spec_field, model, field_name)
        if value:
            out[spec_field] = value
            clash = next((p for _, p in attention if getattr(_attention_of(p), other)), None)
            if clash is not None:
                raise ValueError(
                    f"{clash.where}: {other} attention in a model that also has {size} attention; "
                    "ModelSpec has one local kind (sliding_window and attention_chunk exclude each other)"
                )
    full = [(i, p) for i, p in attention if _attention_of(p).is_full]
    if full and len(full) < len(attention):
        out["full_attention_every"] = _full_every(attention, full)
    nope = [(p, _attention_of(p).nope) for _, p in full]
    if _one_value(nope, "Attention.nope", "nope_full_attention", None, field_name):
        out["nope_full_attention"] = True
    return out


def _one_value(
    stated: list[tuple[Placed, Any]],
    what: str,
    spec_field: str,
    model: Any,
    field_name: Callable[[str], str],
) -> Any:
    """The one value every layer of ``stated`` gives, which the model's ``spec_field`` (``model``,
    None if not given) must equal; ValueError naming the first layer that differs. None if
    ``stated`` is empty."""
    if not stated:
        return None
    first, value = stated[0]
    for p, v in stated[1:]:
        if v != value:
            rule = (
                "ModelSpec skips RoPE on all its full-attention layers or on none (nope_full_attention)"
                if spec_field == "nope_full_attention"
                else f"one model has one {spec_field}: layers that differ in it are not expressible"
            )
            raise ValueError(
                f"{p.where}: {what}={show_value(v)} differs from {show_value(value)} of {first.where}; {rule}"
            )
    if model is not None and model != value:
        raise ValueError(
            f"{first.where}: {what}={show_value(value)} differs from the model's "
            f"{field_name(spec_field)}={show_value(model)}; one model has one {spec_field}"
        )
    return value


def _full_every(attention: list[tuple[int, Placed]], full: list[tuple[int, Placed]]) -> int:
    """The smallest n >= 2 with (i + 1) % n == 0 exactly at the full-attention positions i
    (n divides every i + 1 of a full layer, so it divides their gcd). When none fits, ValueError
    naming the first layer that breaks n0 = first full position + 1 (n0 fits whenever any n
    does: then n0 is the gcd)."""
    g = 0
    for i, _ in full:
        g = math.gcd(g, i + 1)
    local = [i for i, p in attention if not _attention_of(p).is_full]
    for n in range(2, g + 1):
        if g % n == 0 and all((j + 1) % n for j in local):
            return n
    n0, first = full[0][0] + 1, full[0][1]
    rule = (
        "ModelSpec.full_attention_every puts full attention on every n-th layer ((i + 1) % n == 0) "
        "and local attention on the others"
    )
    if n0 == 1:
        raise ValueError(f"{first.where}: full attention at layer 0 makes every layer full (n = 1); {rule}")
    i, p = next((i, p) for i, p in attention if _attention_of(p).is_full != ((i + 1) % n0 == 0))
    kind = "full" if _attention_of(p).is_full else "local"
    raise ValueError(
        f"{p.where}: {kind} attention at layer {i} fits no n ({first.where}, the first full layer, "
        f"asks for n = {n0}); {rule}"
    )


_WIDTHS: tuple[tuple[type, str], ...] = ((Mlp, "ffn_hidden"), *((Moe, f.name) for f in dataclass_fields(Moe)))
"""Descriptor sizes and the ModelSpec field of the same name each one sets."""


def _width_fields(
    positions: list[tuple[str, Placed]], given: Mapping[str, Any], field_name: Callable[[str], str]
) -> dict[str, Any]:
    """The MLP, expert and Mamba sizes the descriptors state (one value across the layers, equal
    to the model's field if given), and the rules that tie layers to fields: a MoE layer needs
    experts, experts need a MoE layer, a Mamba layer needs its sizes."""
    out: dict[str, Any] = {}
    parts = [q for _, p in positions for q in _parts(p)]
    for cls, attr in _WIDTHS:
        stated = [(p, getattr(p.layer, attr)) for p in parts if isinstance(p.layer, cls)]
        stated = [(p, v) for p, v in stated if v is not None]
        model = given.get(attr)
        model = None if model is None or (attr == "ffn_hidden" and model == 0) else model
        value = _one_value(stated, f"{cls.__name__}.{attr}", attr, model, field_name)
        if value is not None:
            out[attr] = value
    moe = next((p for p in parts if isinstance(p.layer, Moe)), None)
    experts = out.get("num_experts") or given.get("num_experts")
    if moe is not None and not experts:
        raise ValueError(
            f"{moe.where}: a MoE layer needs its experts: give num_experts, top_k and moe_ffn_hidden "
            f"(as Moe(...) fields or the model's {field_name('num_experts')}, ...)"
        )
    if moe is None and experts:
        raise ValueError(
            f"{field_name('num_experts')}={show_value(experts)} but no layer of the list is a MoE layer"
        )
    mambas = [p for p in parts if isinstance(p.layer, Mamba)]
    sized = [(p, p.layer) for p in mambas if p.layer.version]  # type: ignore[union-attr]
    model_mamba = given.get("mamba")
    model_sizes = model_mamba if isinstance(model_mamba, Mamba) and model_mamba.version else None
    value = _one_value(sized, "Mamba", "mamba", model_sizes, field_name)
    if value is not None:
        out["mamba"] = value
    elif mambas and model_mamba is None:
        raise ValueError(
            f"{mambas[0].where}: Mamba() needs its sizes: Mamba(version=2, num_heads=..., ...) in the "
            f"list or the model's {field_name('mamba')}"
        )
    return out


def _moe_placement(is_moe: list[bool]) -> dict[str, Any]:
    """``first_dense_layers`` d and ``moe_layer_freq`` f when block i is MoE exactly for
    i >= d and (i - d) % f == 0 (ModelSpec.is_moe_layer), else ``moe_pattern``."""
    if not any(is_moe):
        return {}
    moes = [i for i, m in enumerate(is_moe) if m]
    d = moes[0]
    f = moes[1] - d if len(moes) > 1 else len(is_moe) - d
    if all(m == (i >= d and (i - d) % f == 0) for i, m in enumerate(is_moe)):
        return {k: v for k, v in (("first_dense_layers", d), ("moe_layer_freq", f)) if v != _default(k)}
    return {"moe_pattern": "".join("E" if m else "-" for m in is_moe)}
