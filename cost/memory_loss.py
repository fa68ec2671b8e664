"""The loss's bytes at the last stage's peak, per logit element and for a chunked loss (cost/memory.py
adds them to the last stage's fixed activations).

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

These apply on a GPU; on a TPU cost/memory.py keeps the graph's LOGITS_BYTES_PER_ELEMENT (cost/block.py)
and no saved head inputs (XLA's buffer assignment).
"""

from __future__ import annotations

from paraplan.cost.compute import ACTIVATION_BYTES
from paraplan.cost.plan import CrossEntropy, Job, Layout

__all__ = [
    "LOGIT_BYTES",
    "LOSS_PARALLEL_EXTRA_BYTES",
    "HEAD_SAVED_INPUTS",
    "CHUNK_GRAD_BYTES",
    "logit_bytes_per_element",
    "chunked_loss_bytes",
]

# per logit element at the loss's peak (module docstring)
LOGIT_BYTES = {CrossEntropy.FUSED: 6.0, CrossEntropy.UPCAST: 12.0, CrossEntropy.COMPILED: 4.0}
LOSS_PARALLEL_EXTRA_BYTES = 4.0  # the upcast over tp-sharded logits, DTensor's loss_parallel (docstring)
HEAD_SAVED_INPUTS = 2  # the final norm's input and the LM head's input, n*h each (docstring)
CHUNK_GRAD_BYTES = 4  # torchtitan's GradAccumulator: fp32, one element per hidden state (chunked_loss_bytes)


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
