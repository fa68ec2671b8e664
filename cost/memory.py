"""Peak memory of one device of a pipeline stage, by part: allocated, reserved, and what must fit.

allocated (tensor bytes, torch.cuda.max_memory_allocated) =
       model state (weights + grads + optimizer, by ZeRO stage, see dp.py)
     + activations (per block per micro-batch, see recompute.py) * layers * in-flight micro-batches
     + the larger of two transient peaks on a GPU: the loss's (last stage) and a block's backward
       (FULL recompute's re-materialised block; ZeRO-3's gathered weights and gradient buffers)
reserved (torch.cuda.max_memory_reserved) = allocated * (1 + ALLOCATOR_OVERHEAD[job.allocator])
peak, what must fit = allocated * (1 + ALLOCATOR_FIT_OVERHEAD) + CUDA context + NCCL buffers.
The MoE software state (cost/moe_memory.py, StageTerms.software) adds the DeepEP / HybridEP
buffer to the reserve (outside torch's allocator) and the CUDA graphs' static buffers to each
layer's activations per in-flight micro-batch.

Checked against torch's FSDPMemTracker (tests/cost/test_memory_oracle.py: a Llama-shaped decoder,
FSDP2 over a fake process group on CPU): within 2% on 12 dense configurations (GQA / MQA-like /
MHA, FSDP 2-8, recompute none and full, vocabularies 2K-8K); MoE 4-9% above.

The reserve and the allocator's shares: cost/memory_reserve.py. The loss's bytes: cost/memory_loss.py.
The affine layer bound the solver reads: cost/memory_layers.py.

A block's backward under ZeRO-3 (FSDP2, GPU): the block and the prefetched next one unsharded
(ZERO3_PREFETCH_BLOCKS x 2 B per parameter), its gradients unsharded in bf16 and in the reduce
dtype (2 + g B), and the previous block's reduce-scatter input (g B) where it outlives what the
block's backward frees (FSDP2 keeps each reduce-scatter's buffers until the next one is issued);
the oracle's tracker shows exactly these (Unsharded Param, All Gather, Temp, Reduce Scatter). The
gradient buffers are at most ZERO3_GRAD_BUCKET elements (DeepSpeed ZeRO-3 reduces in buckets of
``reduce_bucket_size``, 5e8 elements by default; a bound that only binds for blocks over 0.5 B
parameters per device, e.g. Narayanan et al. 2021's 530B ZeRO-3 baseline). The loss's peak comes
before the blocks' backward (the logits and their gradients are freed first), so the two are not
added. ZeRO-3 under pipeline parallelism (``unsharded_under_pp``): torchtitan turns
reshard_after_forward off when pp is on and torch.distributed.pipelining reduces gradients on the
last micro-batch only, so a stage holds its weights unsharded (2 B) and accumulates unsharded
gradients (g B) beside the shards; torchtitan's Llama 3.1 405B run (pp 8, FSDP 8, 75.3 GiB
reserved) is 35 GiB short without them.

On a TPU (``Accelerator.is_tpu``) XLA fixes every buffer's live range at compile time (no reserve and
no fragmentation: cost/memory_reserve.py), and the same live ranges free the logits and their
gradient before the first decoder layer's backward starts, so FULL recompute's re-materialised
block and the last stage's logits are transient at different times: the stage holds the larger
of the two, not their sum.
XLA's own buffer assignment agrees (tests/cost/test_xla_memory_oracle.py, a MaxText-shaped
decoder compiled by jax: the layer-backward transient does not grow with the vocabulary, and
MaxText's cross entropy keeps 4 B per logit element against the 6 B counted here).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from paraplan.cost.block import LOGITS_BYTES_PER_ELEMENT
from paraplan.cost.dp import WEIGHT_BYTES, StateBytes, grad_bytes, moment_bytes, shard_degree, state_bytes
from paraplan.cost.memory_loss import HEAD_SAVED_INPUTS, chunked_loss_bytes, logit_bytes_per_element
from paraplan.cost.memory_reserve import (
    allocator_overhead,
    fragmentation,
    runtime_reserve_bytes,
    stranded_share,
)
from paraplan.cost.plan import Layout, Recompute
from paraplan.cost.pp import in_flight_micro_batches
from paraplan.cost.pp_schedule import parameter_copies
from paraplan.cost.stage import StageTerms

__all__ = [
    "StageMemory",
    "StageMemoryModel",
    "stage_memory",
    "stage_memory_model",
    "layers_that_fit",
    "BaseMemo",
    "unsharded_under_pp",
    "ZERO3_PREFETCH_BLOCKS",
    "ZERO3_GRAD_BUCKET",
]

ZERO3_PREFETCH_BLOCKS = 2  # FSDP keeps the current and the prefetched block unsharded
ZERO3_GRAD_BUCKET = 5e8  # elements: DeepSpeed's default reduce_bucket_size (module docstring)
# (ZeRO-3 buffers during a block's backward: module docstring, "ZeRO-3 (FSDP2)")


@dataclass(frozen=True, slots=True)
class StageMemory:
    """One device's peak bytes by part. ``total_bytes`` is what must fit; the reserve splits into
    the caching allocator's overhead (``allocator_bytes``: reserved beyond allocated) and what
    lies outside torch's statistics (``context_bytes``: CUDA context, NCCL buffers) and the
    allocator's share that must fit (fragmentation); ``allocator_bytes`` is the larger share a
    run's reserved memory shows (allocator_overhead), reported, not fitted."""

    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    buffers_bytes: float  # the runtime reserve included (ZeRO-3 prefetch buffers besides)
    reserve_bytes: float = 0.0  # the runtime reserve part of buffers_bytes (informational)
    allocator_bytes: float = 0.0  # reserved beyond allocated, as measured (allocator_overhead)
    context_bytes: float = 0.0  # the CUDA-context + NCCL part of reserve_bytes

    @property
    def total_bytes(self) -> float:
        return (
            self.weights_bytes
            + self.grads_bytes
            + self.optimizer_bytes
            + self.activations_bytes
            + self.buffers_bytes
        )

    @property
    def allocated_bytes(self) -> float:
        """Tensor bytes at the peak (torch.cuda.max_memory_allocated): total less the reserve."""
        return self.total_bytes - self.reserve_bytes

    @property
    def reserved_bytes(self) -> float:
        """What the caching allocator holds (torch.cuda.max_memory_reserved): allocated plus its
        overhead."""
        return self.allocated_bytes + self.allocator_bytes

    def plus(self, other: StageMemory) -> StageMemory:
        """Part by part, this and ``other`` added (a base-kind block and a kind's difference)."""
        return StageMemory(*(getattr(self, name) + getattr(other, name) for name in _PARTS))


@dataclass(frozen=True, slots=True)
class StageMemoryModel:
    """A stage's peak memory as fixed + per-layer parts (valid for one layer or more), the
    per-layer part a base-kind block's; ``per_kind`` holds each kind's block less the base's
    (cost/stage.py), empty for a model with one kind."""

    fixed: StageMemory
    per_layer: StageMemory
    per_kind: tuple[StageMemory, ...] = ()

    def at(self, layers: int, counts: tuple[int, ...] = ()) -> StageMemory:
        f, p = self.fixed, self.per_layer
        parts = [StageMemory(*(getattr(f, name) + layers * getattr(p, name) for name in _PARTS))]
        for d, n in zip(self.per_kind, counts, strict=False):
            if n:
                parts.append(StageMemory(*(n * getattr(d, name) for name in _PARTS)))
        if len(parts) == 1:
            return parts[0]
        return StageMemory(*(sum(getattr(q, name) for q in parts) for name in _PARTS))

    def max_layers(self, capacity_bytes: float) -> int:
        """Most base-kind layers that fit ``capacity_bytes`` (0 if even one does not; large if free)."""
        return layers_that_fit(capacity_bytes - self.fixed.total_bytes, self.per_layer.total_bytes)


_PARTS = tuple(f.name for f in fields(StageMemory))


def layers_that_fit(room_bytes: float, per_layer_bytes: float) -> int:
    if room_bytes < per_layer_bytes:
        return 0
    return int(room_bytes // per_layer_bytes) if per_layer_bytes > 0 else 10**9


def unsharded_under_pp(plan: Layout, num_micro_batches: int) -> bool:
    """ZeRO-3 under pipeline parallelism with more than one micro-batch keeps each stage's weights
    unsharded from the first forward to the last backward and accumulates unsharded gradients
    (torchtitan: reshard_after_forward off when pp is on; torch.distributed.pipelining syncs
    gradients on the last micro-batch only). Module docstring."""
    return plan.zero >= 3 and plan.pp > 1 and num_micro_batches > 1 and shard_degree(plan) > 1


def _overheads(fit: float, typical: float, allocated: float) -> tuple[float, float]:
    return fit * allocated, typical * allocated


@dataclass(frozen=True, slots=True)
class _StageBase:
    """The parts of one stage's memory model that no recompute mode changes (``_stage_base``)."""

    fixed_state: StateBytes
    layer_state: StateBytes
    kind_states: tuple[StateBytes, ...]  # state bytes of each kind's parameters less the base's
    is_tpu: bool
    gbytes: float
    frag: float
    strand: float
    typical: float
    held: float
    gathered: float
    tpu_buffers: float  # XLA's gathered and prefetched blocks (0 off a TPU)
    ends_act: float  # the head's and the last stage's stored parts per in-flight micro-batch
    loss: float  # the loss's transient (last stage; 0 elsewhere)
    software_per_layer: float
    context: float


BaseMemo = dict[int, _StageBase]
"""One StageTerms' ``_stage_base`` by stage: the modes of a memory check share it (caps.py)."""


def _stage_base(terms: StageTerms, stage: int, memo: BaseMemo | None = None) -> _StageBase:
    """What ``stage_memory_model`` computes the same under every recompute mode (its docstring):
    the model state, the overheads' shares, the in-flight micro-batches, ZeRO-3's gathered
    parameters, the ends' activations and the loss, the software state's bytes and the reserve.
    ``memo``: by stage, for one ``terms``."""
    if memo is not None and stage in memo:
        return memo[stage]
    plan, job = terms.plan, terms.job
    shards, gbytes, mbytes = shard_degree(plan), grad_bytes(job), moment_bytes(job)
    expert_shards = shard_degree(plan, expert=True)
    is_tpu = terms.at(stage).cluster.accelerator.is_tpu
    unsharded = not is_tpu and unsharded_under_pp(plan, terms.num_micro_batches)

    copies = parameter_copies(plan.pp_schedule)  # DualPipe: two (cost/pp_schedule.py)

    def state(params: float, expert_params: float) -> StateBytes:
        out = _sum(
            state_bytes(copies * params, plan.zero, shards, gbytes, mbytes),
            state_bytes(copies * expert_params, plan.zero, expert_shards, gbytes, mbytes),
        )
        if not unsharded:
            return out
        full = params + (expert_params if expert_shards > 1 else 0.0)
        return StateBytes(out.weights + WEIGHT_BYTES * full, out.grads + gbytes * full, out.optimizer)

    fixed_state = state(terms.stage_params(stage, 0), terms.stage_expert_params(stage, 0))
    layer_state = state(terms.block_params, terms.block_expert_params)
    kind_states: tuple[StateBytes, ...] = ()
    if terms.heterogeneous:
        kind_states = tuple(state(p, e) for p, e in terms.param_deltas(stage))
    held = in_flight_micro_batches(stage, plan, terms.num_micro_batches)
    kinds = terms.at(stage).kinds
    prefetch = max(k.params for k in kinds) if kinds else terms.block_params
    expert_prefetch = max(k.expert_params for k in kinds) if kinds else terms.block_expert_params
    zero3 = not is_tpu and plan.zero >= 3 and shards > 1 and not unsharded
    expert_zero3 = not is_tpu and plan.zero >= 3 and expert_shards > 1 and not unsharded
    gathered = (prefetch if zero3 else 0.0) + (expert_prefetch if expert_zero3 else 0.0)
    fixed_act = 0.0
    if stage == 0:  # the head's stored part (vision encoder) per in-flight micro-batch, as blocks'
        first = terms.at(stage).first
        fixed_act += first.activation_bytes - first.stored_bytes + first.stored_bytes * held
    loss = 0.0
    if stage == plan.pp - 1:
        last = terms.at(stage).last
        loss = last.activation_bytes - last.stored_bytes  # transient (logits, loss); MTP stored
        block_input, saved = terms.at(stage).block[Recompute.FULL].activation_bytes, 0.0
        if not is_tpu:  # the loss kernel's bytes per logit, and the head's saved inputs
            loss = loss * logit_bytes_per_element(job, plan) / LOGITS_BYTES_PER_ELEMENT
            saved = HEAD_SAVED_INPUTS * block_input
        loss = chunked_loss_bytes(loss, block_input, plan, job) + saved
        fixed_act += last.stored_bytes * held
    tpu_buffers = 0.0
    if is_tpu:  # XLA's FSDP holds the gathered block and the prefetched one throughout
        tpu_buffers = (
            ZERO3_PREFETCH_BLOCKS
            * WEIGHT_BYTES
            * (
                (prefetch if plan.zero >= 3 and shards > 1 else 0.0)
                + (expert_prefetch if plan.zero >= 3 and expert_shards > 1 else 0.0)
            )
        )
    software = terms.at(stage).software  # the MoE software state's buffers (cost/moe_memory.py)
    out = _StageBase(
        fixed_state=fixed_state,
        layer_state=layer_state,
        kind_states=kind_states,
        is_tpu=is_tpu,
        gbytes=gbytes,
        frag=fragmentation(is_tpu, job.allocator),
        strand=stranded_share(is_tpu, job),
        typical=allocator_overhead(is_tpu, job.allocator),
        held=held,
        gathered=gathered,
        tpu_buffers=tpu_buffers,
        ends_act=fixed_act,
        loss=loss,
        software_per_layer=software.per_layer_bytes,
        context=runtime_reserve_bytes(plan, is_tpu=is_tpu) + software.reserve_bytes,
    )
    if memo is not None:
        memo[stage] = out
    return out


def stage_memory_model(
    terms: StageTerms, stage: int, recompute: Recompute, memo: BaseMemo | None = None
) -> StageMemoryModel:
    """Parts of the module docstring, split into what one layer adds and what the stage has anyway.

    Formula per layer: state(block params) + block activations x in-flight micro-batches;
    fixed: state(embedding/head, MTP experts included) + logits (x logit_bytes_per_element / 6,
    the end's logits being priced at 6 B) + the ends' stored activations (vision encoder, MTP
    block: EndCost.stored_bytes) x the same in-flight micro-batches + FULL's working block +
    ZeRO-3 buffers (the prefetched blocks and one block's unsharded gradients) + reserve;
    ZeRO-3 under PP (unsharded_under_pp) adds the unsharded weights and gradients to the state
    and needs no prefetch. The reserve is runtime_reserve_bytes (context_bytes) + fragmentation
    x the allocated bytes (allocator_bytes), fixed and per layer.
    On a TPU the logits and the working block count as max(logits, working), not their sum
    (module docstring). Routed-expert state is sharded over the expert-data-parallel group
    (dp*cp/ep). Models with several block kinds: per layer is the base kind's block, each other
    kind adds its difference (``per_kind``); the working block and the ZeRO-3 buffers are the
    largest kind's (whichever kinds the stage holds: a bound that keeps the model affine).
    """
    b = _stage_base(terms, stage, memo)
    frag, strand, typical, held, gathered = b.frag, b.strand, b.typical, b.held, b.gathered
    block = terms.block_at(stage, recompute)
    blocks = terms.kind_blocks_at(stage, recompute)
    working = max(k.working_bytes for k in blocks)
    # ZeRO-3 (FSDP2) during a block's backward: the block and the prefetched one unsharded, its
    # gradients unsharded in bf16 and in the reduce dtype, and the previous block's reduce-scatter
    # input where it outlives what the block's backward frees
    freed = min(k.activation_bytes for k in blocks)
    grads = min(gathered, ZERO3_GRAD_BUCKET)  # gradient buffers: a block, at most a bucket
    zero3_backward = (
        gathered * ZERO3_PREFETCH_BLOCKS * WEIGHT_BYTES
        + grads * (WEIGHT_BYTES + b.gbytes)
        + max(0.0, b.gbytes * grads - freed)
    )
    loss = b.loss
    if loss >= working + zero3_backward:  # the peak: the loss's transient, or a block's backward
        fixed_act, zero_buffers = b.ends_act + loss, 0.0
    else:
        fixed_act, zero_buffers = b.ends_act + working, zero3_backward
    if b.is_tpu:  # XLA's FSDP holds the gathered block and the prefetched one throughout
        zero_buffers += b.tpu_buffers
    fixed_state, layer_state, context = b.fixed_state, b.layer_state, b.context
    layer_act = (block.activation_bytes + b.software_per_layer) * held
    fit, seen = _overheads(frag, typical, fixed_state.total + fixed_act + zero_buffers)
    layer_fit, layer_seen = _overheads(frag, typical, layer_state.total + layer_act)
    fit, layer_fit = fit + strand * fixed_act, layer_fit + strand * layer_act  # stranded blocks
    per_kind: tuple[StageMemory, ...] = ()
    if terms.heterogeneous:
        acts = [(k.activation_bytes - block.activation_bytes) * held for k in blocks]
        per_kind = tuple(
            _kind_delta(st, act, frag, typical, strand) for st, act in zip(b.kind_states, acts, strict=True)
        )
    return StageMemoryModel(
        fixed=StageMemory(
            fixed_state.weights,
            fixed_state.grads,
            fixed_state.optimizer,
            fixed_act,
            zero_buffers + context + fit,
            context + fit,
            seen,
            context,
        ),
        per_layer=StageMemory(
            layer_state.weights,
            layer_state.grads,
            layer_state.optimizer,
            layer_act,
            layer_fit,
            layer_fit,
            layer_seen,
        ),
        per_kind=per_kind,
    )


def _kind_delta(
    state: StateBytes, act_bytes: float, frag: float, typical: float, strand: float
) -> StageMemory:
    fit, seen = _overheads(frag, typical, state.total + act_bytes)
    fit += strand * act_bytes
    return StageMemory(state.weights, state.grads, state.optimizer, act_bytes, fit, fit, seen)


def _sum(a: StateBytes, b: StateBytes) -> StateBytes:
    return StateBytes(a.weights + b.weights, a.grads + b.grads, a.optimizer + b.optimizer)


def stage_memory(
    terms: StageTerms, stage: int, layers: int | tuple[int, ...], recompute: Recompute
) -> StageMemory:
    """Peak bytes on one device of ``stage`` holding ``layers`` (>= 1) blocks: a count on a model
    with one block kind, else the stage's per-kind counts (StageTerms.stage_counts)."""
    counts = terms.counts(layers)
    return stage_memory_model(terms, stage, recompute).at(sum(counts), counts)
