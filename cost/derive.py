"""``derive``: a Layout (or Plan) with some knobs changed, for the search's hot loops.

``dataclasses.replace`` walks the class's fields, builds a keyword dict and calls ``__init__``,
which runs ``check_structure`` whatever changed: about 9 us a copy, and the branch and bound
(solver/candidates.py) makes one per family and ZeRO stage, per rank order and per twin
(limits.twins), some 17,000 for one GPT-3 solve. ``derive`` copies the slots directly and runs
the class's checks (``__post_init__``) only when a checked knob changes, so it builds the same
object (equal, same hash) that ``replace`` builds, or raises the same ValueError.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from operator import attrgetter
from typing import Any, TypeVar

from paraplan.cost.plan import Layout

__all__ = ["derive"]

L = TypeVar("L", bound=Layout)

UNCHECKED = frozenset(
    {
        "sequence_parallel",
        "cp_comm",
        "stage_pools",
        "torus_shape",
        "moe_dispatcher",
        "moe_overlap",
        "cuda_graphs",
    }
)
"""Knobs no ``__post_init__`` check reads (cost/plan.py ``check_structure``, and for a Plan
``check_recompute_layers``): changing only these needs no check."""

_new = object.__new__
_set = object.__setattr__


_Slots = tuple[tuple[str, ...], frozenset[str], Callable[[object], tuple[Any, ...]]]
_SLOTS: dict[type, _Slots] = {}


def _slots(cls: type) -> _Slots:
    """The class's field names in order, as a set, and one getter of all their values (in C)."""
    found = _SLOTS.get(cls)
    if found is None:
        names = tuple(f.name for f in fields(cls))
        found = _SLOTS[cls] = (names, frozenset(names), attrgetter(*names))
    return found


def derive(layout: L, **changes: Any) -> L:
    """``dataclasses.replace(layout, **changes)``: the same object, built faster (module
    docstring); TypeError on a name that is not a field, as replace."""
    cls = type(layout)
    names, known, values = _slots(cls)
    if not known.issuperset(changes):
        unknown = changes.keys() - known
        raise TypeError(f"derive: {sorted(unknown)} are not fields of {cls.__name__}")
    new = _new(cls)
    for name, value in zip(names, values(layout), strict=True):
        _set(new, name, changes[name] if name in changes else value)
    if not UNCHECKED.issuperset(changes):
        new.__post_init__()
    return new
