"""ZeRO-2/3 under pipeline parallelism: a micro-batch's gradient reduce-scatter runs on beside
the stage's next forward (cost/dp.py reduces_across_micro_batches, cost/block.py zero_exposed_s;
Llama 3, arXiv 2407.21783 Sec. 3.3.2). Issue 25: the Llama 3 405B plan's reduce-scatter, exposed
past each backward, was the pessimistic term; its gradients stay sharded (it fits 80 GB)."""

from __future__ import annotations

from typing import Any

import pytest
from paraplan.cost import Plan
from paraplan.cost.block import zero_exposed_s
from paraplan.cost.dp import reduces_across_micro_batches

import paraplan


def test_only_pipelined_sharded_gradients_spill_into_the_next_forward() -> None:
    assert reduces_across_micro_batches(Plan(dp=4, tp=1, pp=2, zero=2))
    assert reduces_across_micro_batches(Plan(dp=4, tp=1, pp=2, zero=3))
    assert not reduces_across_micro_batches(Plan(dp=4, tp=1, pp=1, zero=2))
    assert not reduces_across_micro_batches(Plan(dp=4, tp=1, pp=2, zero=1))


def test_the_reduce_scatter_hides_under_backward_and_the_next_forwards_idle_link() -> None:
    # max(0, g - f) + max(0, g + r - b - max(0, f - g)) with the spill, without it max(0, g + r - b)
    g, r, f, b = 0.0, 36.0, 12.0, 25.0
    assert zero_exposed_s(g, r, f, b, overlap=True) == pytest.approx(r - b)
    assert zero_exposed_s(g, r, f, b, overlap=True, into_next_forward=True) == 0.0
    g = 5.0  # ZeRO-3: the next forward's own gather takes the link first
    assert zero_exposed_s(g, r, f, b, overlap=True, into_next_forward=True) == pytest.approx(
        g + r - b - (f - g)
    )
    assert zero_exposed_s(g, r, f, b, overlap=False, into_next_forward=True) == pytest.approx(r)


def _scenario(zero: int, pp: int) -> dict[str, Any]:
    return {
        "model": {"preset": "llama3.1-8b"},
        "cluster": {"preset": "dgx-h100", "gpus": 16},
        "job": {"seq_len": 8192, "global_batch": 64, "precision": "bf16"},
        "plan": {
            "dp": 16 // (2 * pp),
            "tp": 2,
            "pp": pp,
            "micro_batch": 1,
            "zero": zero,
            "recompute": "none",
        },
    }


def test_pipelined_zero2_keeps_sharded_gradients() -> None:
    one, two = (paraplan.evaluate(_scenario(z, 2)).predicted for z in (1, 2))
    assert two.stages[0].grads_bytes == pytest.approx(one.stages[0].grads_bytes / 4)  # over dp 4
