"""A memo keyed by an object's identity, for the serving search's per-step lookups.

A Cluster or LayerGraph holds dicts (not hashable), and hashing a whole graph costs more than the
step's arithmetic, so the serving cost model's lookups (the tiers a group spans, a cluster's
serving efficiencies, a graph's layer groups) are remembered by ``id(obj)`` and a hashable rest.
Each entry keeps its object alive, so an id is not reused while the entry is there; past
``limit`` entries the memo starts again.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["IdentityMemo"]

V = TypeVar("V")


class IdentityMemo(Generic[V]):
    """``get(obj, rest, compute)``: ``compute()`` once per (identity of ``obj``, ``rest``)."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._store: dict[tuple[int, Hashable], tuple[object, V]] = {}

    def get(self, obj: object, rest: Hashable, compute: Callable[[], V]) -> V:
        key = (id(obj), rest)
        hit = self._store.get(key)
        if hit is not None and hit[0] is obj:
            return hit[1]
        if len(self._store) > self._limit:
            self._store.clear()
        value = compute()
        self._store[key] = (obj, value)
        return value
