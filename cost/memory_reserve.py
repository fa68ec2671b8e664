"""What a device holds beyond the model's tensors: the runtime reserve (CUDA context, NCCL buffers) and
the caching allocator's shares, reported (reserved) and must-fit (cost/memory.py adds them per stage).

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

On a TPU (``Accelerator.is_tpu``) the program is compiled by XLA:
- No runtime reserve is modelled (``XLA_RUNTIME_RESERVE_BYTES`` = 0): there is no CUDA context and
  no NCCL communicator (XLA compiles each collective into the program and its buffers into the
  program's memory plan). The TPU runtime keeps some HBM for itself, but no source gives a
  figure (MaxText's and Google's docs quote none), so none is modelled rather than a guess.
- No allocator fragmentation (``XLA_FRAGMENTATION`` = 0): XLA fixes every buffer's offset at
  compile time (buffer assignment over the heap simulator's live ranges, openxla.org/xla,
  "XLA architecture"), so no caching allocator churns with the activations.
(The logits' and the working block's live ranges on a TPU: cost/memory.py.)
"""

from __future__ import annotations

from paraplan.cost.ep import expert_shard_degree
from paraplan.cost.plan import Allocator, Job, Layout
from paraplan.hardware.memory import allocator_overhead_fit

__all__ = [
    "CUDA_CONTEXT_BYTES",
    "NCCL_BYTES_PER_COMMUNICATOR",
    "ALLOCATOR_OVERHEAD",
    "ALLOCATOR_FIT_OVERHEAD",
    "ALLOCATOR_FRAGMENTATION",
    "XLA_RUNTIME_RESERVE_BYTES",
    "XLA_FRAGMENTATION",
    "STRANDED_ACTIVATION_SHARE",
    "num_communicators",
    "runtime_reserve_bytes",
    "fragmentation",
    "stranded_share",
    "allocator_overhead",
]

CUDA_CONTEXT_BYTES = 0.5e9  # CUDA context + cuBLAS workspaces, lazy loading (module docstring)
NCCL_BYTES_PER_COMMUNICATOR = 0.25e9  # NCCL_BUFFSIZE 4 MiB x channels x peers (module docstring)
# reserved beyond allocated, a share of the allocated bytes (module docstring): as measured
# (reported as reserved) and the part that must fit (the allocator frees cached blocks first)
ALLOCATOR_OVERHEAD = {a: allocator_overhead_fit(a.value) for a in Allocator}  # hardware/data/memory.yaml
ALLOCATOR_FIT_OVERHEAD = {Allocator.DEFAULT: 0.028, Allocator.EXPANDABLE_SEGMENTS: 0.028}
ALLOCATOR_FRAGMENTATION = ALLOCATOR_FIT_OVERHEAD[Allocator.DEFAULT]
XLA_RUNTIME_RESERVE_BYTES = 0.0  # TPU: no CUDA context or NCCL buffers; no figure published
XLA_FRAGMENTATION = 0.0  # TPU: XLA assigns buffers at compile time (module docstring)
STRANDED_ACTIVATION_SHARE = 1.0  # one more set of activation blocks (module docstring): a bound


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
