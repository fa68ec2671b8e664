"""Where a plan's layers go: the even split, the embedding / loss slots of an interleaved split,
each rank's chunks and the block positions (and so the block kinds) each rank holds.

A pp rank s with vp chunks holds virtual stages c * pp + s (c = 0..vp-1), the blocks in virtual
stage order (Megatron's interleaved layer assignment): ``chunk_layers`` gives each chunk's
count (``Plan.layers_per_chunk`` or ``default_chunks``), ``chunk_ranges`` its block positions,
``kind_counts`` the blocks of each kind per rank. ``pipeline_slots`` is the unit the solver
splits in when vp does not divide the layers. cost/plan.py re-exports these names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from paraplan.cost.plan import Plan

__all__ = [
    "even_split",
    "even_layers",
    "default_chunks",
    "pipeline_slots",
    "chunk_layers",
    "chunk_ranges",
    "kind_counts",
    "is_even_chunks",
]


def even_split(num_layers: int, pp: int) -> tuple[int, ...]:
    """The one even split: equal counts, the remainder spread over the middle stages (the first
    and last also hold the embedding and the LM head), then over all when pp <= 2."""
    base, extra = divmod(num_layers, pp)
    split = [base] * pp
    middle = list(range(1, pp - 1)) or list(range(pp))
    for i in range(extra):
        split[middle[i % len(middle)]] += 1
    return tuple(split)


def even_layers(num_layers: int, pp: int, vp: int) -> tuple[int, ...] | None:
    """Even split in units of vp (less the embedding / loss slots, pipeline_slots), the
    remainder on the middle stages; None if impossible. The search's tie-break prefers it and
    the framework rules check a layout on it (rules/filter.py)."""
    slots = pipeline_slots(num_layers, pp, vp)
    if slots is None:
        return None
    k_total = (num_layers + sum(slots)) // vp
    ks = even_split(k_total, pp)
    if any(k < 1 + slot for k, slot in zip(ks, slots, strict=True)):
        return None
    return tuple(vp * k - slot for k, slot in zip(ks, slots, strict=True))


def default_chunks(layers_per_stage: tuple[int, ...], vp: int) -> tuple[tuple[int, ...], ...]:
    """Each stage's layers over its vp chunks as evenly as possible: stage 0 puts its short
    chunks first (next to the embedding), every other stage last (the last stage's are next to
    the loss). 126 layers as [15, 16 x 6, 15] on vp 8 give stage 0 [1, 2 x 7] and stage 7
    [2 x 7, 1]: Megatron's --account-for-embedding/loss-in-pipeline-split layout."""
    rows = []
    for s, n in enumerate(layers_per_stage):
        base, extra = divmod(n, vp)
        short, long_ = [base] * (vp - extra), [base + 1] * extra
        rows.append(tuple(short + long_) if s == 0 else tuple(long_ + short))
    return tuple(rows)


def pipeline_slots(num_layers: int, pp: int, vp: int) -> tuple[int, ...] | None:
    """Per stage, the layer slots the embedding / loss take when layers are split in units of
    vp (Megatron's --account-for-embedding/loss-in-pipeline-split): stage s holds
    vp * k_s - slots[s] layers, k_s >= 1 + slots[s] (every virtual stage keeps a layer).

    Formula: none when vp divides the layers; one slot on the last stage (the loss, next to
    the costlier LM head) when layers + 1 is a multiple of vp; one on the first and one on the
    last when layers + 2 is; else None (no such split; e.g. 126 layers on vp 8 take both: 128
    slots, 2 per virtual stage, the first and last virtual stages holding 1 layer)."""
    if vp == 1 or num_layers % vp == 0:
        return (0,) * pp
    need = -num_layers % vp
    if need > 2 or pp < 2:
        return None
    return (need - 1,) + (0,) * (pp - 2) + (1,)


def chunk_layers(plan: Plan) -> tuple[tuple[int, ...], ...]:
    """Layers of each (pp rank, chunk): ``plan.layers_per_chunk`` or ``default_chunks``."""
    return plan.layers_per_chunk or default_chunks(plan.layers_per_stage, plan.vp)


def chunk_ranges(plan: Plan) -> tuple[tuple[tuple[int, int], ...], ...]:
    """Per pp rank, the [start, end) block positions of each of its chunks. Virtual stage
    j = c * pp + s (rank s, chunk c) holds the blocks after those of virtual stages 0..j-1, so
    positions follow chunk_layers in that order (Megatron's interleaved layer assignment)."""
    rows = chunk_layers(plan)
    pp, vp = plan.pp, plan.vp
    out: list[list[tuple[int, int]]] = [[] for _ in range(pp)]
    start = 0
    for c in range(vp):
        for s in range(pp):
            n = rows[s][c]
            out[s].append((start, start + n))
            start += n
    return tuple(tuple(r) for r in out)


def kind_counts(block_kinds: tuple[int, ...], plan: Plan) -> tuple[tuple[int, ...], ...]:
    """Per pp rank, how many blocks of each kind it holds (``LayerGraph.block_kinds`` numbers
    each block's kind), from the exact positions of chunk_ranges."""
    num_kinds = max(block_kinds) + 1
    out = []
    for ranges in chunk_ranges(plan):
        counts = [0] * num_kinds
        for a, b in ranges:
            for k in block_kinds[a:b]:
                counts[k] += 1
        out.append(tuple(counts))
    return tuple(out)


def is_even_chunks(plan: Plan) -> bool:
    """Every chunk of each stage holds the same number of layers (vp divides every stage)."""
    return all(len(set(row)) == 1 for row in chunk_layers(plan))
