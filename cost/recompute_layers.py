"""Partial (block) recompute: full recompute of the first N layers of each chunk, the rest stored.

Semantics, as megatron-core 0.19.2 runs ``--recompute-granularity full --recompute-method block
--recompute-num-layers N`` (megatron/core/recompute.py ``checkpointed_forward``, the 'block'
branch; transformer/transformer_block.py ``TransformerBlock.forward`` calls it for the block of
one virtual stage): in each TransformerBlock - one per (pp rank, chunk), holding
``len(self.layers)`` layers - layers 0..N-1 run under ``tensor_parallel.checkpoint`` (only their
input is kept; the forward runs again in backward) and the others keep every activation
(granularity full leaves nothing selective on them). N larger than a chunk recomputes the whole
chunk (``layer_idx < recompute_num_layers``), so a stage holds sum_c min(N, len_c) recomputed
layers. N is one value for every rank in Megatron (transformer_config.py ``recompute_num_layers``);
``Plan.recompute_layers`` allows one per rank (the exporters refuse what a framework cannot run).
Not modelled: the FP8 skip of layers whose input needs no gradient (never the case after the
embedding), and ``--recompute-method uniform`` with N > 1 (same time as N = 1, one checkpoint per
N layers: exported only as N = 1).

torchtitan 0.3 (torchtitan/distributed/activation_checkpoint.py ``_apply_ac_to_transformer_block``)
checkpoints every ``selective_ac_option``-th block ("selective" mode with an integer option), a
different placement with the same per-layer costs; the exporter maps a homogeneous plan whose
count per stage matches (rules/torchtitan.py).

Cost, per stage with counts n_k of blocks of kind k of which r_k are recomputed (each block's
BlockCost under NONE and FULL from cost/block.py, one model):
    time   = time(NONE, n) + sum_k r_k (full_k - none_k)       (likewise compute, backward)
    memory = memory(FULL, n) + sum_k (n_k - r_k) (act_none_k - act_full_k) held (1 + frag)
FULL's fixed part keeps the transient re-materialised block (memory.stage_memory_model). With
r = n (every layer) these are today's FULL numbers; the functions then return them unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from paraplan.cost.memory import StageMemory, stage_memory
from paraplan.cost.memory_reserve import allocator_overhead, fragmentation, stranded_share
from paraplan.cost.plan import Plan, Recompute
from paraplan.cost.pp import in_flight_micro_batches
from paraplan.cost.split import chunk_ranges
from paraplan.cost.stage import Counts, StageTerms

__all__ = [
    "StageCost",
    "recomputed_counts",
    "is_partial",
    "stage_cost",
    "partial_stage_memory",
    "uniform_recompute_layers",
    "stored_extra_bytes",
]


def is_partial(plan: Plan, stage: int) -> bool:
    """Stage ``stage`` recomputes full only the first recompute_layers[stage] layers of each chunk."""
    return bool(plan.recompute_layers) and plan.recompute[stage] is Recompute.FULL


def recomputed_counts(terms: StageTerms, plan: Plan | None = None) -> tuple[Counts, ...]:
    """Per stage, how many blocks of each kind are recomputed in full (module docstring): all of a
    FULL stage without recompute_layers, the first N of each chunk with it (positions from
    cost.split.chunk_ranges), none elsewhere."""
    plan = plan or terms.full_plan
    counts = terms.stage_counts(plan)
    out: list[Counts] = []
    ranges = chunk_ranges(plan) if plan.recompute_layers else ()
    kinds = terms.block_kinds
    for s, n in enumerate(counts):
        if plan.recompute[s] is not Recompute.FULL:
            out.append((0,) * len(n))
        elif not plan.recompute_layers:
            out.append(n)
        else:
            limit = plan.recompute_layers[s]
            if not terms.heterogeneous:
                out.append((sum(min(limit, b - a) for a, b in ranges[s]),))
                continue
            r = [0] * len(n)
            for a, b in ranges[s]:
                for k in kinds[a : min(b, a + limit)]:
                    r[k] += 1
            out.append(tuple(r))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class StageCost:
    """One stage, one micro-batch: forward + backward (+ exposed per-micro-batch comm), its
    compute and backward parts, and the exposed DP sync of the step (max(0, sync - window))."""

    time_s: float
    compute_s: float
    backward_s: float
    dp_exposed_s: float


def _extra(terms: StageTerms, stage: int, recomputed: Counts, field: str) -> float:
    """sum_k r_k (full_k - none_k) of BlockCost ``field``: what recomputing r blocks adds."""
    full = terms.kind_blocks_at(stage, Recompute.FULL)
    none = terms.kind_blocks_at(stage, Recompute.NONE)
    return sum(
        r * (getattr(f, field) - getattr(z, field)) for r, f, z in zip(recomputed, full, none, strict=True)
    )


def stage_cost(terms: StageTerms, stage: int, counts: Counts, recomputed: Counts) -> StageCost:
    """The stage's StageCost under the plan's recompute for ``stage`` (module docstring)."""
    mode = terms.full_plan.recompute[stage]
    if not is_partial(terms.full_plan, stage) or tuple(recomputed) == tuple(counts):
        return StageCost(
            terms.stage_time_s(stage, counts, mode),
            terms.stage_compute_s(stage, counts, mode),
            terms.stage_backward_s(stage, counts, mode),
            terms.dp_exposed_s(stage, counts, mode),
        )
    none = Recompute.NONE
    backward = terms.stage_backward_s(stage, counts, none) + _extra(terms, stage, recomputed, "backward_s")
    sync = terms.dp_sync_s(stage, counts)
    return StageCost(
        terms.stage_time_s(stage, counts, none) + _extra(terms, stage, recomputed, "time_s"),
        terms.stage_compute_s(stage, counts, none) + _extra(terms, stage, recomputed, "compute_s"),
        backward,
        max(0.0, sync - backward) if terms.job.overlap_dp_comm else sync,
    )


def partial_stage_memory(terms: StageTerms, stage: int, counts: Counts, recomputed: Counts) -> StageMemory:
    """Peak bytes of ``stage`` (module docstring): FULL's, plus what each stored block keeps
    beyond its input, per in-flight micro-batch, with its fragmentation share."""
    mode = terms.full_plan.recompute[stage]
    full = stage_memory(terms, stage, counts, mode)
    if not is_partial(terms.full_plan, stage) or tuple(recomputed) == tuple(counts):
        return full
    is_tpu = terms.at(stage).cluster.accelerator.is_tpu
    # the allocator's share that must fit, and the stranded blocks' of variable lengths (memory.py)
    frag = fragmentation(is_tpu, terms.job.allocator) + stranded_share(is_tpu, terms.job)
    act = sum((n - r) * e for n, r, e in zip(counts, recomputed, _stored_act(terms, stage), strict=True))
    return replace(
        full,
        activations_bytes=full.activations_bytes + act,
        buffers_bytes=full.buffers_bytes + frag * act,
        reserve_bytes=full.reserve_bytes + frag * act,
        allocator_bytes=full.allocator_bytes + allocator_overhead(is_tpu, terms.job.allocator) * act,
    )


def _stored_act(terms: StageTerms, stage: int) -> tuple[float, ...]:
    """Per kind: activation bytes a stored block keeps beyond a recomputed one, times the
    stage's in-flight micro-batches: (act_none - act_full) held."""
    held = in_flight_micro_batches(stage, terms.plan, terms.num_micro_batches)
    none = terms.kind_blocks_at(stage, Recompute.NONE)
    full = terms.kind_blocks_at(stage, Recompute.FULL)
    return tuple((z.activation_bytes - f.activation_bytes) * held for z, f in zip(none, full, strict=True))


def stored_extra_bytes(terms: StageTerms, stage: int) -> tuple[float, ...]:
    """Per kind: the peak bytes one stored (not recomputed) block of a FULL stage adds:
    (act_none - act_full) held (1 + fragmentation) (module docstring; the solver's row)."""
    is_tpu = terms.at(stage).cluster.accelerator.is_tpu
    frag = fragmentation(is_tpu, terms.job.allocator) + stranded_share(is_tpu, terms.job)
    return tuple(a * (1 + frag) for a in _stored_act(terms, stage))


def uniform_recompute_layers(plan: Plan) -> int | None:
    """The one N of Megatron's --recompute-num-layers (method block) that recomputes exactly the
    plan's layers on every rank, or None when no single N does (every stage FULL, the partial
    stages share N, and every all-recomputed stage's chunks are no longer than N). A plan without
    recompute_layers gives None (every layer: the uniform method)."""
    if not plan.recompute_layers or any(r is not Recompute.FULL for r in plan.recompute):
        return None
    ranges = chunk_ranges(plan)
    partial = {
        n for n, rs in zip(plan.recompute_layers, ranges, strict=True) if n < max(b - a for a, b in rs)
    }
    if len(partial) > 1:
        return None
    n = partial.pop() if partial else max(plan.recompute_layers)
    longest = max(b - a for rs in ranges for a, b in rs)
    for m, rs in zip(plan.recompute_layers, ranges, strict=True):
        if m >= max(b - a for a, b in rs) and max(b - a for a, b in rs) > n:
            return None
    return min(n, longest)
