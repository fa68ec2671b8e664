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

The loss (last stage): the logits at ``LOGIT_BYTES[job.cross_entropy]`` per element and the head's
two saved inputs (the final norm's input and the LM head's input, n*h each, HEAD_SAVED_INPUTS).
Fused (Megatron / Transformer Engine vocab-parallel cross entropy): 6 B, bf16 logits and the fp32
softmax. Upcast (torchtitan's cross_entropy_loss: ``logits.float()`` into torch's cross_entropy):
12 B at the loss's peak, the fp32 copy, log_softmax's saved fp32 output and its gradient (the
oracle measures 12.0 B per logit: 4 B kept, 8 B transient, at vocabularies 8K-32K). Compiled (the
same function under torch.compile, as torchtitan compiles its loss from 2025, ``compile.components``
["model", "loss"]): 4 B, the bf16 logits kept for backward and their bf16 gradient. Inductor's
decompositions let AOTAutograd's min-cut partitioner save only the bf16 input and two per-row
fp32 values (max, log-sum-exp), and the backward's fp32 softmax, scatter and subtraction fuse into
one kernel that writes the bf16 gradient (tests/cost/test_memory_terms.py compiles the loss with
inductor on CPU and reads the buffers its kernels allocate: none of n x vocab in forward, one bf16
in backward). Loss parallel (the eager upcast over logits sharded by tp > 1: torchtitan runs
torch.distributed.tensor.parallel.loss_parallel, whose log_softmax and nll_loss on DTensors are
decomposed into separate fp32 ops, torch/distributed/tensor/parallel/loss.py; torchtitan 0.3.0's own
_LossParallelCrossEntropy is written the same way): 4 B more per local logit
(``LOSS_PARALLEL_EXTRA_BYTES``), measured with torch's MemTracker on CPU over a fake process group
at tp 2-8 (tests/cost/test_memory_terms.py: 18.0 against 14.0 B per local logit, leaf and its
gradient included). Chunked (``job.loss_chunks`` N > 1: torchtitan 0.3.0's ChunkedLossWrapper, 8 chunks
in its configs, runs lm_head + loss + backward one sequence chunk at a time): the logits' bytes / N
plus the fp32 buffer its GradAccumulator keeps for the hidden states' gradient (4 B x n x h,
``chunked_loss_bytes``).

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

The reserve is memory a real run holds that no tensor of the model accounts for:
- CUDA context and library workspaces: ``CUDA_CONTEXT_BYTES``. With lazy module loading (CUDA
  11.7+, default in PyTorch 2.x: NVIDIA CUDA C++ Programming Guide, "Lazy Loading") the context
  is a few hundred MB; cuBLAS/cuBLASLt workspaces add a few to tens of MiB per stream (PyTorch
  docs, "CUDA semantics", cuBLAS workspaces / CUBLAS_WORKSPACE_CONFIG). 0.5 GB is an estimate.
- NCCL buffers: each communicator a rank belongs to allocates NCCL_BUFFSIZE (default 4 MiB, NCCL
  docs "Environment Variables") per channel per peer and per protocol; with 16-32 channels on an
  NVLink/NVSwitch node and send + receive peers that is ~0.25 GB per communicator
  (``NCCL_BYTES_PER_COMMUNICATOR``). A rank belongs to the default (world) communicator and one
  per parallel group of size > 1 (tp, cp, dp x cp, pp, ep, expert data parallel).
- The caching allocator: PyTorch's allocator keeps freed blocks reserved and rounds and splits
  them (PyTorch docs, "CUDA semantics", memory management). Measured reserved - allocated is
  2.8-9.3% of allocated, median 5.3% (docs/memory.md Sec. 2: SimuMax's B200 runs, 13 of them in
  benchmarks/data/memory_runs_calibration.csv), largest at long sequences. ``ALLOCATOR_OVERHEAD``
  with the default allocator is one share fitted to every reserved reading of that file
  (hardware/data/memory.yaml: 7.2%, prior SimuMax's median 5.3%, bounded by SimuMax's range;
  torchtitan's FSDP2 runs read higher than Megatron's, leave-one-source-out in
  ``benchmarks.memory_fidelity --crossval``), and reported as reserved; with
  ``expandable_segments`` (segments grown in place, no split-block fragmentation) 2.8%, the
  smallest gap measured, an assumption (no measured reserved figure under it). Near capacity the
  allocator frees its cached blocks and retries before it raises out-of-memory
  (CUDACachingAllocator: release_cached_blocks on a failed cudaMalloc), so reserved saturates at
  capacity (rows at 96-97.6% of it) and only part of the overhead must fit:
  ``ALLOCATOR_FIT_OVERHEAD`` = 2.8%, the smallest gap measured (the MosaicML MPT-350m runs,
  micro-batch 18 on A100 40GB, rows 607-610 of benchmarks/data/published_runs_calibration.csv,
  ran at 37.5 GiB modelled allocated; 5.3% would not fit them).
- Variable sequence lengths (``job.variable_seq_len``: fine-tuning batches padded to their longest
  sequence, or packs of varying length) under the default allocator. The caching allocator
  (PyTorch c10/cuda/CUDACachingAllocator.cpp, read from memory of its comments: requests above
  1 MiB come from the large pool, those under 10 MiB from 20 MiB segments, larger ones from a
  segment of their own rounded to 2 MiB; a cached free block serves a smaller request by splitting
  and never a larger one; on a failed cudaMalloc only whole unsplit segments are released) keeps
  the blocks of one micro-batch's activation sizes when the next one's differ: a longer micro-batch
  needs new segments while the shorter one's blocks stay cached, split by the smaller tensors that
  reuse them. The must-fit peak keeps room for one more set of the stage's activations
  (``STRANDED_ACTIVATION_SHARE`` = 1, ``stranded_share``): a bound, one size generation stranded,
  not a fit (no row measures the stranded bytes). With ``expandable_segments`` the allocator maps
  pages into one growing segment and frees them back, so none is kept; XLA has no such allocator.
  The one row that shows it, Megatron-Bridge's Llama 3 70B SFT on 32 H100 (TP4 PP4 VPP5 DP2, FP8),
  ran out of memory at 54.8 GiB allocated of 79.2 usable in 30-60% of CI runs (Bridge PR #3107) and
  fits at 55.0 GiB with expandable_segments, so about 24 GiB were stranded when it failed. With
  paraplan's stage-0 activations (19.4 GiB) the bound puts the need at 84.2 GiB, over the 79.7 GiB
  device, and the plan is refused; but paraplan's allocated figure for the same plan reads 12% high
  (61.7 GiB against the 55.0 measured with expandable_segments), and had the 6.9 GiB excess been
  activations the bound would give about 70 GiB, a fit. The refusal rests on that activation figure as
  much as on the bound. Reported reserved stays the fitted share (as measured on runs of fixed
  length); only what must fit grows.

Size: one module because the stage's memory model (stage_memory_model), its affine layer bound
(max_layers_per_stage, kind_bytes_per_stage) and the overhead rules must agree term for term;
the solver's memory rows are read from the same function.

On a TPU (``Accelerator.is_tpu``) the program is compiled by XLA, which changes three things:
- No runtime reserve is modelled (``XLA_RUNTIME_RESERVE_BYTES`` = 0): there is no CUDA context and
  no NCCL communicator (XLA compiles each collective into the program and its buffers into the
  program's memory plan). The TPU runtime keeps some HBM for itself, but no source gives a
  figure (MaxText's and Google's docs quote none), so none is modelled rather than a guess.
- No allocator fragmentation (``XLA_FRAGMENTATION`` = 0): XLA fixes every buffer's offset at
  compile time (buffer assignment over the heap simulator's live ranges, openxla.org/xla,
  "XLA architecture"), so no caching allocator churns with the activations.
- The same live ranges free the logits and their gradient before the first decoder layer's
  backward starts, so FULL recompute's re-materialised block and the last stage's logits are
  transient at different times: the stage holds the larger of the two, not their sum.
XLA's own buffer assignment agrees (tests/cost/test_xla_memory_oracle.py, a MaxText-shaped
decoder compiled by jax: the layer-backward transient does not grow with the vocabulary, and
MaxText's cross entropy keeps 4 B per logit element against the 6 B counted here).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from paraplan.cost.block import LOGITS_BYTES_PER_ELEMENT
from paraplan.cost.compute import ACTIVATION_BYTES
from paraplan.cost.dp import WEIGHT_BYTES, StateBytes, grad_bytes, moment_bytes, shard_degree, state_bytes
from paraplan.cost.ep import expert_shard_degree
from paraplan.cost.plan import Allocator, CrossEntropy, Job, Layout, Recompute
from paraplan.cost.pp import in_flight_micro_batches
from paraplan.cost.pp_schedule import parameter_copies
from paraplan.cost.stage import StageTerms
from paraplan.hardware.memory import allocator_overhead_fit

__all__ = [
    "StageMemory",
    "StageMemoryModel",
    "stage_memory",
    "stage_memory_model",
    "max_layers_per_stage",
    "kind_bytes_per_stage",
    "last_stage_kind_bytes",
    "BaseMemo",
    "PartsMemo",
    "runtime_reserve_bytes",
    "num_communicators",
    "CUDA_CONTEXT_BYTES",
    "NCCL_BYTES_PER_COMMUNICATOR",
    "ALLOCATOR_FRAGMENTATION",
    "XLA_RUNTIME_RESERVE_BYTES",
    "XLA_FRAGMENTATION",
    "fragmentation",
    "allocator_overhead",
    "ALLOCATOR_OVERHEAD",
    "ALLOCATOR_FIT_OVERHEAD",
    "LOGIT_BYTES",
    "LOSS_PARALLEL_EXTRA_BYTES",
    "logit_bytes_per_element",
    "unsharded_under_pp",
    "chunked_loss_bytes",
    "CHUNK_GRAD_BYTES",
    "stranded_share",
    "STRANDED_ACTIVATION_SHARE",
]

CUDA_CONTEXT_BYTES = 0.5e9  # CUDA context + cuBLAS workspaces, lazy loading (module docstring)
NCCL_BYTES_PER_COMMUNICATOR = 0.25e9  # NCCL_BUFFSIZE 4 MiB x channels x peers (module docstring)
# reserved beyond allocated, a share of the allocated bytes (module docstring): as measured
# (reported as reserved) and the part that must fit (the allocator frees cached blocks first)
ALLOCATOR_OVERHEAD = {a: allocator_overhead_fit(a.value) for a in Allocator}  # hardware/data/memory.yaml
ALLOCATOR_FIT_OVERHEAD = {Allocator.DEFAULT: 0.028, Allocator.EXPANDABLE_SEGMENTS: 0.028}
ALLOCATOR_FRAGMENTATION = ALLOCATOR_FIT_OVERHEAD[Allocator.DEFAULT]
# per logit element at the loss's peak (module docstring)
LOGIT_BYTES = {CrossEntropy.FUSED: 6.0, CrossEntropy.UPCAST: 12.0, CrossEntropy.COMPILED: 4.0}
LOSS_PARALLEL_EXTRA_BYTES = 4.0  # the upcast over tp-sharded logits, DTensor's loss_parallel (docstring)
XLA_RUNTIME_RESERVE_BYTES = 0.0  # TPU: no CUDA context or NCCL buffers; no figure published
XLA_FRAGMENTATION = 0.0  # TPU: XLA assigns buffers at compile time (module docstring)
ZERO3_PREFETCH_BLOCKS = 2  # FSDP keeps the current and the prefetched block unsharded
ZERO3_GRAD_BUCKET = 5e8  # elements: DeepSpeed's default reduce_bucket_size (module docstring)
HEAD_SAVED_INPUTS = 2  # the final norm's input and the LM head's input, n*h each (docstring)
STRANDED_ACTIVATION_SHARE = 1.0  # one more set of activation blocks (module docstring): a bound
CHUNK_GRAD_BYTES = 4  # torchtitan's GradAccumulator: fp32, one element per hidden state (chunked_loss_bytes)
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
        return _max_layers(capacity_bytes - self.fixed.total_bytes, self.per_layer.total_bytes)


_PARTS = tuple(f.name for f in fields(StageMemory))


def _max_layers(room_bytes: float, per_layer_bytes: float) -> int:
    if room_bytes < per_layer_bytes:
        return 0
    return int(room_bytes // per_layer_bytes) if per_layer_bytes > 0 else 10**9


def num_communicators(plan: Layout) -> int:
    """NCCL communicators a rank belongs to: the world one plus one per parallel group of size > 1
    (tp, cp, dp x cp, pp, and with experts ep and the expert-data-parallel group)."""
    groups: tuple[int, ...] = (plan.tp, plan.cp, plan.dp * plan.cp, plan.pp)
    if plan.ep > 1:
        groups += (plan.ep, expert_shard_degree(plan))
    return 1 + sum(1 for g in groups if g > 1)


def runtime_reserve_bytes(plan: Layout, *, is_tpu: bool = False) -> float:
    """Fixed part of the runtime reserve of one device.

    Formula: CUDA_CONTEXT_BYTES + NCCL_BYTES_PER_COMMUNICATOR * num_communicators(plan); on a TPU
    XLA_RUNTIME_RESERVE_BYTES.
    Source: module docstring. Units: bytes. (Fragmentation scales with the activations and is
    added per stage in stage_memory_model.)
    """
    if is_tpu:
        return XLA_RUNTIME_RESERVE_BYTES
    return CUDA_CONTEXT_BYTES + NCCL_BYTES_PER_COMMUNICATOR * num_communicators(plan)


def fragmentation(is_tpu: bool, allocator: Allocator = Allocator.DEFAULT) -> float:
    """Share of the allocated bytes the caching allocator needs beyond them for a plan to fit:
    ALLOCATOR_FIT_OVERHEAD[allocator] on a GPU, XLA_FRAGMENTATION on a TPU (module docstring)."""
    return XLA_FRAGMENTATION if is_tpu else ALLOCATOR_FIT_OVERHEAD[allocator]


def stranded_share(is_tpu: bool, job: Job) -> float:
    """Share of the stage's activation bytes that must fit beyond them for the blocks the default
    caching allocator strands when activation sizes change from micro-batch to micro-batch:
    STRANDED_ACTIVATION_SHARE with ``job.variable_seq_len`` and ``job.allocator`` default on a
    GPU, else 0 (module docstring, "Variable sequence lengths")."""
    if is_tpu or not job.variable_seq_len or job.allocator is not Allocator.DEFAULT:
        return 0.0
    return STRANDED_ACTIVATION_SHARE


def allocator_overhead(is_tpu: bool, allocator: Allocator = Allocator.DEFAULT) -> float:
    """Share of the allocated bytes a run's reserved memory exceeds them by, as measured:
    ALLOCATOR_OVERHEAD[allocator] on a GPU, XLA_FRAGMENTATION on a TPU (module docstring)."""
    return XLA_FRAGMENTATION if is_tpu else ALLOCATOR_OVERHEAD[allocator]


def logit_bytes_per_element(job: Job, plan: Layout | None = None) -> float:
    """Bytes per logit element at the loss's peak: LOGIT_BYTES[job.cross_entropy], plus
    LOSS_PARALLEL_EXTRA_BYTES when the eager upcast runs over a vocabulary sharded by tp
    (module docstring, "Loss parallel")."""
    extra = (
        LOSS_PARALLEL_EXTRA_BYTES
        if job.cross_entropy is CrossEntropy.UPCAST and plan and plan.tp > 1
        else 0.0
    )
    return LOGIT_BYTES[job.cross_entropy] + extra


def chunked_loss_bytes(logits_bytes: float, block_input_bytes: float, plan: Layout, job: Job) -> float:
    """The logits' part of the loss's transient under ``job.loss_chunks`` N (torchtitan's
    ChunkedLossWrapper).

    Formula: N = 1: ``logits_bytes``; N > 1: logits / N + the fp32 gradient buffer of the final
    hidden states, CHUNK_GRAD_BYTES x n x h (GradAccumulator, allocated before the first chunk and
    held to the last), n x h being the FULL-recompute block input ``block_input_bytes`` (bf16, /tp
    with sequence parallelism) x tp (torchtitan replicates the hidden states over tp before it
    chunks) / ACTIVATION_BYTES. The head's saved inputs (HEAD_SAVED_INPUTS x n x h) are not
    chunked: the chunks are contiguous copies of the final norm's output, and the norm keeps its
    input. Source: torchtitan 0.3.0 components/loss.py ChunkedLossWrapper (the hidden states split
    into num_chunks along the sequence, lm_head + loss + backward per chunk, the chunk gradients
    written into a GradAccumulator of dtype float32). Units: bytes.
    """
    if job.loss_chunks <= 1:
        return logits_bytes
    sp_shard = plan.tp if plan.sequence_parallel else 1
    hidden_elements = block_input_bytes * sp_shard / ACTIVATION_BYTES
    return logits_bytes / job.loss_chunks + CHUNK_GRAD_BYTES * hidden_elements


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
PartsMemo = dict[tuple[int, Recompute], tuple[float, tuple[float, ...], tuple[float, ...]]]
"""One StageTerms' ``_kind_parts`` by (stage, mode): a memory check that asks the last stage
alone first (caps.py) and then every stage builds it once."""


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
    rows = [mem.per_layer] if not mem.per_kind else [_add(mem.per_layer, d) for d in mem.per_kind]
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


def _add(a: StageMemory, b: StageMemory) -> StageMemory:
    return StageMemory(*(getattr(a, f) + getattr(b, f) for f in _PARTS))


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
        out.append(_max_layers(room, state + layer_act + frag * (state + layer_act) + strand * layer_act))
    return out + [ends[pp - 1].max_layers(capacity_bytes)]


def _sum(a: StateBytes, b: StateBytes) -> StateBytes:
    return StateBytes(a.weights + b.weights, a.grads + b.grads, a.optimizer + b.optimizer)


def stage_memory(
    terms: StageTerms, stage: int, layers: int | tuple[int, ...], recompute: Recompute
) -> StageMemory:
    """Peak bytes on one device of ``stage`` holding ``layers`` (>= 1) blocks: a count on a model
    with one block kind, else the stage's per-kind counts (StageTerms.stage_counts)."""
    counts = terms.counts(layers)
    return stage_memory_model(terms, stage, recompute).at(sum(counts), counts)
