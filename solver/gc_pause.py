"""Python's cyclic garbage collector paused while the branch and bound runs (issue 22 item 7).

The branch and bound of solver/candidates.py is allocation-heavy pure Python: its memos (cost
terms, floors, the states' dominance, memory caps) grow to a few hundred MB of small objects that
live for the whole search. CPython's generational collector runs a collection every 700 net
allocations and, each time the long-lived objects have grown by a quarter, a full one that walks
every tracked object (CPython 3.11, Modules/gcmodule.c ``collect_generations``; cited from
memory of that source, not re-read here): on the searched
DeepSeek-V3 solve about 1,800 collections took 1.9 of 12.6 CPU s (benchmarks/results/speed.md,
eighth round). The search makes few reference cycles (about 6,500 objects were left for the
collector after that solve, and the peak resident memory was the same with and without it), and
reference counting frees everything else as before, so ``gc_paused`` stops the collector while a
search runs and lets the next automatic collection take what the search left.

The collector's switch is one per process: the pause is counted (threads that search at once
share one pause, the collector restarts when the last of them leaves) and restores the switch as
it found it (a caller that disabled the collector keeps it disabled), also when the search raises
(an error, a timeout, KeyboardInterrupt). Nothing the search computes depends on the collector, so
the results are the same with it paused or not.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]

_LOCK = threading.Lock()
_state = {"depth": 0, "was_enabled": False}  # searches inside the pause; the switch before it


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic collector disabled for the ``with`` block (module docstring): the first of
    nested or concurrent pauses disables it, the last one out enables it again if it was enabled
    before the first."""
    with _LOCK:
        if _state["depth"] == 0:
            _state["was_enabled"] = gc.isenabled()
            gc.disable()
        _state["depth"] += 1
    try:
        yield
    finally:
        with _LOCK:
            _state["depth"] -= 1
            if _state["depth"] == 0 and _state["was_enabled"]:
                gc.enable()
