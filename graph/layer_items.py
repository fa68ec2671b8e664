"""The layer descriptors a model is listed in: :class:`Attention`, :class:`Mlp`, :class:`Moe`,
:class:`Block` (attention + MLP), :class:`Mtp` and the spec's own
:class:`~paraplan.graph.spec.Mamba`, with :func:`repeat` for runs of them. Each checks its own
sizes when made (ValueError naming the field); graph/builder.py compiles a list of them into the
ModelSpec fields, graph/scenario_layers.py reads a scenario file's ``model.layers`` into them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from typing import Any, TypeAlias

from paraplan.graph.spec import MODEL_LIMITS, Mamba, show_value

__all__ = [
    "Attention",
    "Mlp",
    "Moe",
    "Block",
    "Mtp",
    "LayerItem",
    "repeat",
    "flatten_layers",
    "MLP_NAMES",
    "MAX_ITEMS",
]

MAX_ITEMS = MODEL_LIMITS["num_layers"] + MODEL_LIMITS["mtp_layers"]
"""Most layer descriptors a list may hold: the blocks' limit plus the MTP modules'."""


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


MLP_NAMES = {"dense": Mlp, "moe": Moe}


@dataclass(frozen=True, slots=True)
class Block:
    """A transformer block: ``attention`` then ``mlp`` (an :class:`Mlp`, a :class:`Moe`, or the
    string ``"dense"`` / ``"moe"``)."""

    attention: Attention = Attention()
    mlp: Mlp | Moe | str = Mlp()

    def __post_init__(self) -> None:
        if isinstance(self.mlp, str):
            if self.mlp not in MLP_NAMES:
                raise ValueError(f"Block.mlp={self.mlp!r} is not 'dense' or 'moe' (or an Mlp / Moe)")
            object.__setattr__(self, "mlp", MLP_NAMES[self.mlp]())
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
    flat = [item for _, item in flatten_layers(layers)]
    if n * len(flat) > MAX_ITEMS:
        raise ValueError(
            f"repeat({n:,}, ...) makes {n * len(flat):,} layers; a model holds at most {MAX_ITEMS:,} "
            f"({MODEL_LIMITS['num_layers']:,} blocks and {MODEL_LIMITS['mtp_layers']} MTP modules)"
        )
    return tuple(flat) * n


_END = object()  # end of one level of nested layer lists


def flatten_layers(layers: Iterable[Any]) -> list[tuple[str, LayerItem]]:
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
