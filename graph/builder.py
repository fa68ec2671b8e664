"""A model described as its list of layers, compiled into the ModelSpec fields that build it.

``from_layers([...], hidden=..., num_heads=..., vocab=..., ...)`` takes typed layer descriptors
(:class:`Attention`, :class:`Mlp`, :class:`Moe`, :class:`Block`, :class:`Mtp` and the spec's own
:class:`~paraplan.graph.spec.Mamba`), with :func:`repeat` for runs of them, and returns
``build_graph(spec)``: the solver and the cost model, which read the spec, see exactly these
layers. A scenario file's ``model.layers`` given as a pattern or a list (:func:`scenario_layers`)
goes through the same compiler.

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
from typing import Any, TypeAlias, cast

from paraplan.graph.layers import LayerGraph, build_graph
from paraplan.graph.spec import MODEL_LIMITS, PATTERN_SYMBOLS, Mamba, ModelSpec, scenario_key, show_value

__all__ = [
    "Attention",
    "Mlp",
    "Moe",
    "Block",
    "Mtp",
    "LayerItem",
    "repeat",
    "from_layers",
    "scenario_layers",
    "DERIVED_FIELDS",
    "DEFAULT_LEGEND",
]

MAX_ITEMS = MODEL_LIMITS["num_layers"] + MODEL_LIMITS["mtp_layers"]
"""Most layer descriptors a list may hold: the blocks' limit plus the MTP modules'."""

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


def _check_size(value: int | None, what: str, minimum: int = 1) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{what}={show_value(value)} must be a whole number >= {minimum}")


@dataclass(frozen=True, slots=True)
class Attention:
    """One self-attention layer (MHA/GQA/MQA, or MLA when the model sets ``kv_lora_rank``).

    ``window``: a query sees the last ``window`` tokens (sliding window; gpt-oss, Gemma 3);
    ``chunk``: a query sees only its own ``chunk`` of tokens (chunked local attention; Llama 4);
    neither: causal full attention. ``nope``: the layer skips RoPE (Llama 4's global layers;
    full attention only)."""

    window: int = 0
    chunk: int = 0
    nope: bool = False

    def __post_init__(self) -> None:
        _check_size(self.window, "Attention.window", 0)
        _check_size(self.chunk, "Attention.chunk", 0)
        if self.window and self.chunk:
            raise ValueError("Attention: give window or chunk, not both (one local kind per layer)")
        if self.nope and not self.is_full:
            raise ValueError("Attention: nope=True (no RoPE) applies to full attention only")

    @property
    def is_full(self) -> bool:
        return not (self.window or self.chunk)


@dataclass(frozen=True, slots=True)
class Mlp:
    """A dense MLP of ``ffn_hidden`` (None: the model's ``ffn_hidden``)."""

    ffn_hidden: int | None = None

    def __post_init__(self) -> None:
        _check_size(self.ffn_hidden, "Mlp.ffn_hidden")


@dataclass(frozen=True, slots=True, kw_only=True)
class Moe:
    """A mixture-of-experts MLP (router, shared and routed experts); each size None takes the
    model's field of the same name."""

    num_experts: int | None = None
    top_k: int | None = None
    moe_ffn_hidden: int | None = None
    num_shared_experts: int | None = None
    shared_ffn_hidden: int | None = None

    def __post_init__(self) -> None:
        for f in dataclass_fields(self):
            minimum = 0 if f.name in ("num_shared_experts", "shared_ffn_hidden") else 1
            _check_size(getattr(self, f.name), f"Moe.{f.name}", minimum)


_MLP_NAMES = {"dense": Mlp, "moe": Moe}


@dataclass(frozen=True, slots=True)
class Block:
    """A transformer block: ``attention`` then ``mlp`` (an :class:`Mlp`, a :class:`Moe`, or the
    string ``"dense"`` / ``"moe"``)."""

    attention: Attention = Attention()
    mlp: Mlp | Moe | str = Mlp()

    def __post_init__(self) -> None:
        if isinstance(self.mlp, str):
            if self.mlp not in _MLP_NAMES:
                raise ValueError(f"Block.mlp={self.mlp!r} is not 'dense' or 'moe' (or an Mlp / Moe)")
            object.__setattr__(self, "mlp", _MLP_NAMES[self.mlp]())
        if not isinstance(self.mlp, Mlp | Moe):
            raise ValueError(
                f"Block.mlp is a {type(self.mlp).__name__}; give an Mlp, a Moe, 'dense' or 'moe'"
            )
        if not isinstance(self.attention, Attention):
            raise ValueError(f"Block.attention is a {type(self.attention).__name__}; give an Attention")


@dataclass(frozen=True, slots=True)
class Mtp:
    """A multi-token-prediction module (DeepSeek-V3, arXiv:2412.19437 Sec. 2.2): after the last
    block, it runs one more block shaped like the last one and the shared LM head."""


LayerItem: TypeAlias = Attention | Mlp | Moe | Block | Mamba | Mtp
"""One entry of a layer list (``Mamba`` is paraplan.graph.Mamba: a Mamba layer of those sizes,
or of the model's ``mamba`` sizes when its ``version`` is 0)."""
_ITEM_TYPES = (Attention, Mlp, Moe, Block, Mamba, Mtp)


def repeat(n: int, *layers: LayerItem | Iterable[LayerItem]) -> tuple[LayerItem, ...]:
    """``layers`` (descriptors, or lists of them) ``n`` times in order, flattened:
    ``repeat(2, Attention(window=128), Attention())`` is four layers."""
    _check_size(n, "repeat(n)", 0)
    flat = [item for _, item in _flatten(layers)]
    if n * len(flat) > MAX_ITEMS:
        raise ValueError(
            f"repeat({n:,}, ...) makes {n * len(flat):,} layers; a model holds at most {MAX_ITEMS:,} "
            f"({MODEL_LIMITS['num_layers']:,} blocks and {MODEL_LIMITS['mtp_layers']} MTP modules)"
        )
    return tuple(flat) * n


_END = object()  # end of one level of nested layer lists


def _flatten(layers: Iterable[Any]) -> list[tuple[str, LayerItem]]:
    """(``layers[i]``, item) for every descriptor of ``layers`` (nested lists flattened; the
    index counts the flattened list); ValueError for anything that is not a descriptor."""
    out: list[tuple[str, LayerItem]] = []
    iterators = [iter(layers)]
    while iterators:
        item = next(iterators[-1], _END)
        if item is _END:
            iterators.pop()
            continue
        if isinstance(item, _ITEM_TYPES):
            out.append((f"layers[{len(out)}]", item))
            if len(out) > MAX_ITEMS:
                raise ValueError(f"layers: more than {MAX_ITEMS:,} layers (paraplan's limit)")
        elif isinstance(item, list | tuple):
            iterators.append(iter(item))
        else:
            raise ValueError(
                f"layers[{len(out)}] is a {type(item).__name__}, not a layer; give Attention, Mlp, "
                "Moe, Mamba, Block or Mtp (paraplan.graph), or lists of them (a vision encoder is the "
                "vision= field)"
            )
    return out


@dataclass(frozen=True, slots=True)
class _Placed:
    """A descriptor with the path an error names: the layer's (a Block's attention), and a
    Block's MLP."""

    layer: LayerItem
    where: str
    mlp_where: str = ""


def _placed(items: Sequence[tuple[str, LayerItem]]) -> list[_Placed]:
    return [
        _Placed(x, f"{w}.attention", f"{w}.mlp") if isinstance(x, Block) else _Placed(x, w) for w, x in items
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
    derived = _compile_layers(_placed(_flatten(layers)), given, lambda f: f, "layers")
    return build_graph(ModelSpec(name=name, **{**given, **derived}))


def _compile_layers(
    items: Sequence[_Placed], given: Mapping[str, Any], field_name: Callable[[str], str], root: str
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


def _split_mtp(items: Sequence[_Placed], root: str) -> tuple[list[_Placed], int]:
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


def _positions(body: Sequence[_Placed], hybrid: bool) -> list[tuple[str, _Placed]]:
    """(PATTERN_SYMBOLS character, placed layer) per block position; in a hybrid list a Block
    is two positions (its attention, then its MLP); in a list of Blocks each Block is one
    position, its character its MLP's (``E`` or ``-``)."""
    out: list[tuple[str, _Placed]] = []
    for p in body:
        x = p.layer
        if isinstance(x, Block):
            mlp = _Placed(_mlp_of(x), p.mlp_where)
            mlp_symbol = "E" if isinstance(x.mlp, Moe) else "-"
            if hybrid:
                out += [("*", _Placed(x.attention, p.where)), (mlp_symbol, mlp)]
            else:
                out.append((mlp_symbol, p))
        else:
            symbol = {Attention: "*", Mlp: "-", Moe: "E", Mamba: "M"}[type(x)]
            out.append((symbol, p))
    return out


def _parts(p: _Placed) -> tuple[_Placed, ...]:
    """A Block's attention and MLP, each with its path; any other layer itself."""
    if isinstance(p.layer, Block):
        return (_Placed(p.layer.attention, p.where), _Placed(_mlp_of(p.layer), p.mlp_where))
    return (p,)


def _mlp_of(b: Block) -> Mlp | Moe:
    """A Block's MLP: Block.__post_init__ has already turned a name ('dense', 'moe') into one."""
    return cast("Mlp | Moe", b.mlp)


def _attention_of(p: _Placed) -> Attention:
    return p.layer.attention if isinstance(p.layer, Block) else p.layer  # type: ignore[return-value]


def _attention_fields(
    attention: list[tuple[int, _Placed]], given: Mapping[str, Any], field_name: Callable[[str], str]
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
    stated: list[tuple[_Placed, Any]],
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


def _full_every(attention: list[tuple[int, _Placed]], full: list[tuple[int, _Placed]]) -> int:
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
    positions: list[tuple[str, _Placed]], given: Mapping[str, Any], field_name: Callable[[str], str]
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


# --- scenario files: model.layers as a pattern or a list ---------------------------------------

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
    placed = [_Placed(x, w, m) for w, x, m in _with_mlp_paths(numbered)]
    derived = _compile_layers(placed, given, lambda f: f"model.{scenario_key(f)}", "model.layers")
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
    if value not in _MLP_NAMES:
        raise ValueError(f"{where}={show_value(value)} is not one of 'dense', 'moe'")
    return _MLP_NAMES[value]()


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
