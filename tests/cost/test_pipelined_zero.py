"""ZeRO-2/3 under pipeline parallelism reduce-scatters gradients once per step, after the last
micro-batch, and holds an unsharded gradient copy meanwhile (cost/dp.py defers_grad_reduce;
torch 2.13 torch/distributed/pipelining/stage.py backward_maybe_with_nosync, perform_reduce_grad).
Issue 25: the Llama 3 405B plan's per-micro-batch reduce-scatter was the pessimistic term."""

from __future__ import annotations

from typing import Any

import pytest
from paraplan.cost import Job, Plan, Precision
from paraplan.cost.comm import allgather_s, group_span, reduce_scatter_s
from paraplan.cost.dp import (
    accumulates_unsharded_grads,
    defers_grad_reduce,
    grad_sync_s,
    micro_batch_reduce_s,
)
from paraplan.cost.plan import Axis
from paraplan.hardware import build_cluster

import paraplan

CLUSTER = build_cluster("dgx-h100", gpus=64)
JOB = Job(seq_len=4096, global_batch=64, precision=Precision.BF16)


def _plan(zero: int, pp: int) -> Plan:
    return Plan(dp=64 // (8 * pp), tp=8, pp=pp, micro_batch=1, zero=zero)


def test_pipelined_zero2_reduces_once_per_step_not_per_micro_batch() -> None:
    flat, piped = _plan(2, 1), _plan(2, 2)
    assert not defers_grad_reduce(flat) and defers_grad_reduce(piped)
    assert micro_batch_reduce_s(1e9, flat, JOB, CLUSTER) > 0
    assert micro_batch_reduce_s(1e9, piped, JOB, CLUSTER) == 0.0
    span = group_span(CLUSTER, piped, Axis.DP, Axis.CP)
    # once per step: AG(2 B) + RS(4 B fp32 grads)
    expected = allgather_s(span, 1e9 * 2) + reduce_scatter_s(span, 1e9 * 4)
    assert grad_sync_s(1e9, piped, JOB, CLUSTER) == pytest.approx(expected)
    assert grad_sync_s(1e9, _plan(3, 2), JOB, CLUSTER) == pytest.approx(reduce_scatter_s(span, 1e9 * 4))
    assert grad_sync_s(1e9, _plan(3, 1), JOB, CLUSTER) == 0.0
    assert not defers_grad_reduce(_plan(1, 2))


def test_unsharded_gradient_copy_only_with_micro_batches_to_accumulate() -> None:
    piped = _plan(2, 2)
    assert accumulates_unsharded_grads(piped, 4) and not accumulates_unsharded_grads(piped, 1)
    assert not accumulates_unsharded_grads(_plan(1, 2), 4)


def _scenario(zero: int) -> dict[str, Any]:
    return {
        "model": {"preset": "llama3.1-8b"},
        "cluster": {"preset": "dgx-h100", "gpus": 16},
        "job": {"seq_len": 4096, "global_batch": 32, "precision": "bf16"},
        "plan": {"dp": 4, "tp": 2, "pp": 2, "micro_batch": 1, "zero": zero, "recompute": "full"},
    }


def test_pipelined_zero2_gradients_cost_as_zero1s_in_memory_and_time() -> None:
    """Pipelined ZeRO-2 holds ZeRO-1's full gradient (plus its shard) and syncs as ZeRO-1 does."""
    one, two = (paraplan.evaluate(_scenario(z)).predicted for z in (1, 2))
    s1, s2 = one.stages[0], two.stages[0]
    params = s1.grads_bytes / 4  # ZeRO-1: unsharded fp32 gradients
    assert s2.grads_bytes == pytest.approx(params * 4 + params * 4 / 4)  # copy + shard over dp 4
    assert two.step_time_s == pytest.approx(one.step_time_s, rel=1e-9)
