"""The stage memory model as the solver reads it: the most layers of the base kind each stage holds
(``max_layers_per_stage``), and each stage's fixed bytes and bytes per block of every kind
(``kind_bytes_per_stage``), affine in the layer counts; both from cost/memory.py's
``stage_memory_model``, so the solver's memory rows and the evaluator agree term for term."""

from __future__ import annotations

from paraplan.cost.memory import BaseMemo, layers_that_fit, stage_memory_model
from paraplan.cost.memory_reserve import fragmentation, stranded_share
from paraplan.cost.plan import Recompute
from paraplan.cost.pp import in_flight_micro_batches
from paraplan.cost.stage import StageTerms

__all__ = ["PartsMemo", "kind_bytes_per_stage", "last_stage_kind_bytes", "max_layers_per_stage"]

PartsMemo = dict[tuple[int, Recompute], tuple[float, tuple[float, ...], tuple[float, ...]]]
"""One StageTerms' ``_kind_parts`` by (stage, mode): a memory check that asks the last stage
alone first (caps.py) and then every stage builds it once."""


def kind_bytes_per_stage(
    terms: StageTerms, recompute: Recompute, memo: BaseMemo | None = None, parts: PartsMemo | None = None
) -> list[tuple[float, tuple[float, ...]]]:
    """Per stage, (fixed bytes, bytes of one block of each kind) under ``recompute``. On one
    device type the middle stages differ only in their in-flight micro-batches, so stage 1's
    model serves them with its activations scaled (as max_layers_per_stage). ``memo``: the
    stages' mode-free parts (``_stage_base``) of this ``terms``, shared by its modes; ``parts``:
    its stages' parts by (stage, mode) (``PartsMemo``)."""
    pp = terms.plan.pp
    shared = not terms.pool_terms and pp > 3  # middle stages from stage 1's model
    if shared:
        fixed1, state1, act1 = _kind_parts(terms, 1, recompute, memo, parts)
        held1 = in_flight_micro_batches(1, terms.plan, terms.num_micro_batches)
    out = []
    for s in range(pp):
        if shared and 0 < s < pp - 1:
            ratio = in_flight_micro_batches(s, terms.plan, terms.num_micro_batches) / held1
            fixed, state, act = fixed1, state1, tuple(a * ratio for a in act1)
        else:
            fixed, state, act = _kind_parts(terms, s, recompute, memo, parts)
        out.append((fixed, tuple(a + b for a, b in zip(state, act, strict=True))))
    return out


def _kind_parts(
    terms: StageTerms,
    stage: int,
    recompute: Recompute,
    memo: BaseMemo | None = None,
    parts: PartsMemo | None = None,
) -> tuple[float, tuple[float, ...], tuple[float, ...]]:
    """One stage's (fixed bytes, state bytes per kind, activation bytes per kind) under
    ``recompute``, as ``kind_bytes_per_stage`` sums them; ``parts``: by (stage, mode)."""
    if parts is not None:
        found = parts.get((stage, recompute))
        if found is None:
            found = parts[stage, recompute] = _kind_parts(terms, stage, recompute, memo)
        return found
    mem = stage_memory_model(terms, stage, recompute, memo)
    rows = [mem.per_layer] if not mem.per_kind else [mem.per_layer.plus(d) for d in mem.per_kind]
    # buffers per layer are the allocator's share of state and activations alike
    is_tpu = terms.at(stage).cluster.accelerator.is_tpu
    frag, strand = fragmentation(is_tpu, terms.job.allocator), stranded_share(is_tpu, terms.job)
    state = tuple((r.weights_bytes + r.grads_bytes + r.optimizer_bytes) * (1 + frag) for r in rows)
    act = tuple(r.activations_bytes * (1 + frag + strand) for r in rows)
    return mem.fixed.total_bytes, state, act


def last_stage_kind_bytes(
    terms: StageTerms, recompute: Recompute, memo: BaseMemo | None = None, parts: PartsMemo | None = None
) -> tuple[float, tuple[float, ...]]:
    """``kind_bytes_per_stage(terms, recompute, memo)[-1]`` alone: the last stage is never one
    of the middle stages built from stage 1's model, so its entry is its own (the same
    arithmetic, the same floats)."""
    fixed, state, act = _kind_parts(terms, terms.plan.pp - 1, recompute, memo, parts)
    return fixed, tuple(a + b for a, b in zip(state, act, strict=True))


def max_layers_per_stage(
    terms: StageTerms, recompute: Recompute, capacity_bytes: float | None = None
) -> list[int]:
    """``stage_memory_model(terms, s, recompute).max_layers(capacity)`` for every stage s, where
    capacity is ``capacity_bytes`` or, when None, the memory of the stage's own devices.

    On one device type, stages other than the first and the last differ only in their in-flight
    micro-batches (their fixed part has no embedding, head or dense-layer correction), so stage
    1's model serves them all with its activations scaled to each stage's in-flight count (summed
    in the same order as StageMemory.total_bytes, so the result is identical). On a pooled
    cluster each stage has its own pool's model."""
    pp = terms.plan.pp
    if terms.pool_terms:
        return [
            stage_memory_model(terms, s, recompute).max_layers(
                terms.stage_capacity_bytes(s) if capacity_bytes is None else capacity_bytes
            )
            for s in range(pp)
        ]
    if capacity_bytes is None:
        capacity_bytes = terms.capacity_bytes
    ends = {s: stage_memory_model(terms, s, recompute) for s in {0, pp - 1}}
    if pp <= 2:
        return [ends[s].max_layers(capacity_bytes) for s in range(pp)]
    middle = stage_memory_model(terms, 1, recompute)
    room = capacity_bytes - middle.fixed.total_bytes
    act = terms.block[recompute].activation_bytes + terms.software.per_layer_bytes  # as stage_memory_model
    frag = fragmentation(terms.cluster.accelerator.is_tpu, terms.job.allocator)
    strand = stranded_share(terms.cluster.accelerator.is_tpu, terms.job)
    p = middle.per_layer
    state = p.weights_bytes + p.grads_bytes + p.optimizer_bytes
    out = [ends[0].max_layers(capacity_bytes)]
    for s in range(1, pp - 1):
        held = in_flight_micro_batches(s, terms.plan, terms.num_micro_batches)
        layer_act = act * held
        out.append(layers_that_fit(room, state + layer_act + frag * (state + layer_act) + strand * layer_act))
    return out + [ends[pp - 1].max_layers(capacity_bytes)]
