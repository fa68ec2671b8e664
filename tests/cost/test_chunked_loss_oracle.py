"""The oracle of job.loss_chunks: torchtitan 0.3.0's own ChunkedLossWrapper run on CPU, its
peak tensor bytes read by torch's MemTracker, against cost/memory.py chunked_loss_bytes: the part
of the loss's peak that holds logits falls as 1 / num_chunks, and what stays besides is the
hidden states' fp32 gradient buffer and the inputs."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from paraplan.cost.memory_loss import CHUNK_GRAD_BYTES

pytestmark = [pytest.mark.torch, pytest.mark.oracle]

TOKENS, HIDDEN, VOCAB = 2048, 256, 16384


def _peak_bytes(chunks: int) -> float:
    """MemTracker's peak over ChunkedLossWrapper's forward and backward (the lm_head a plain
    callable: MemTracker's module hooks refuse a module called once per chunk)."""
    import torch
    from torch.distributed._tools.mem_tracker import MemTracker

    warnings.simplefilter("ignore")
    from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss

    torch.manual_seed(0)
    weight = torch.randn(VOCAB, HIDDEN, dtype=torch.bfloat16, requires_grad=True)

    class Head:
        def __call__(self, t: Any) -> Any:
            return torch.nn.functional.linear(t, weight)

    config = ChunkedLossWrapper.Config(
        num_chunks=chunks, loss_fn=CrossEntropyLoss.Config(global_vocab_size=VOCAB)
    )
    loss_fn = config.build()
    loss_fn.set_lm_head(Head())
    x = torch.randn(1, TOKENS, HIDDEN, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, VOCAB, (1, TOKENS))
    tracker = MemTracker()
    tracker.track_external(weight, x)
    with tracker:
        out = loss_fn(x * 1.0, labels)
        (out[0] if isinstance(out, tuple) else out).backward()
    peak = tracker.get_tracker_snapshot("peak")
    return float(sum(peak[device]["Total"] for device in peak))


def test_the_chunked_loss_holds_one_chunk_of_logits() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("torchtitan")
    one, two, eight = (_peak_bytes(n) for n in (1, 2, 8))
    logits = (one - eight) / (1 - 1 / 8)  # the part of the peak that scales as 1 / chunks
    assert two == pytest.approx(eight + logits * (1 / 2 - 1 / 8), rel=0.02)  # the 1 / N law
    # per logit element the chunked part is the eager upcast's (12 B) and the bf16 logits (2 B)
    assert 12 <= logits / (TOKENS * VOCAB) <= 14.5
    # what stays: the weight, its gradient, the input and its gradient (bf16) and the fp32
    # gradient buffer of the hidden states (CHUNK_GRAD_BYTES), within 15%
    rest = eight - logits / 8
    stays = 2 * 2 * VOCAB * HIDDEN + 2 * 2 * TOKENS * HIDDEN + CHUNK_GRAD_BYTES * TOKENS * HIDDEN
    assert rest == pytest.approx(stays, rel=0.15)
