"""LoRA / adapter fine-tuning (``job.frozen_base``): the base weights take no weight gradient.

Backward runs dgrad only (one GEMM per forward GEMM instead of two), the weights keep their bf16
copy and nothing else (no gradient, no optimizer state), and no gradient is reduced over dp.
"""

from __future__ import annotations

import pytest
from paraplan.cost import Job, Plan, Precision
from paraplan.cost.compute import LayerTime, layer_forward
from paraplan.cost.dp import (
    OPTIMIZER_STEP_BYTES_PER_PARAM,
    grad_bytes,
    grad_sync_s,
    micro_batch_reduce_s,
    optimizer_step_bytes_per_param,
    state_bytes,
)
from paraplan.graph import preset
from paraplan.graph.layers import build_graph
from paraplan.hardware import build_cluster

import paraplan

CLUSTER = build_cluster("dgx-h100", gpus=8)
TRAIN = Job(seq_len=4096, global_batch=32, precision=Precision.BF16)
LORA = Job(seq_len=4096, global_batch=32, precision=Precision.BF16, frozen_base=True)
PLAN = Plan(dp=8, tp=1, pp=1, micro_batch=1, zero=1)


def test_backward_is_dgrad_only_for_frozen_weights() -> None:
    t = LayerTime(gemm_s=1.0, attention_s=0.0, elementwise_s=0.0)
    frozen = LayerTime(gemm_s=1.0, attention_s=0.0, elementwise_s=0.0, wgrad=0.0)
    assert t.backward_s() == pytest.approx(2.0) and frozen.backward_s() == pytest.approx(1.0)
    layer = next(ly for ly in build_graph(preset("llama3-8b")).layers() if ly.gemms)
    train = layer_forward(layer, PLAN, TRAIN, CLUSTER.accelerator, CLUSTER.efficiency)
    lora = layer_forward(layer, PLAN, LORA, CLUSTER.accelerator, CLUSTER.efficiency)
    assert lora.total_s == pytest.approx(train.total_s)
    assert train.backward_s() - lora.backward_s() == pytest.approx(train.gemm_s)


def test_frozen_weights_hold_no_gradient_or_optimizer_state_and_sync_nothing() -> None:
    assert grad_bytes(LORA) == 0 and grad_bytes(TRAIN) == 4
    s = state_bytes(1e9, zero=1, dp=8, grad_bytes_per_param=grad_bytes(LORA))
    assert (s.weights, s.grads, s.optimizer) == (2e9, 0.0, 0.0)
    assert state_bytes(1e9, zero=3, dp=8, grad_bytes_per_param=0).weights == pytest.approx(2e9 / 8)
    assert grad_sync_s(1e9, PLAN, TRAIN, CLUSTER) > 0
    assert grad_sync_s(1e9, PLAN, LORA, CLUSTER) == 0.0
    assert micro_batch_reduce_s(1e9, Plan(dp=8, tp=1, pp=1, micro_batch=1, zero=3), LORA, CLUSTER) == 0.0
    assert optimizer_step_bytes_per_param(TRAIN) == OPTIMIZER_STEP_BYTES_PER_PARAM
    assert optimizer_step_bytes_per_param(LORA) == 0.0


def test_lora_scenario_is_faster_and_smaller_than_full_training() -> None:
    sc = {
        "model": {"preset": "llama3-8b"},
        "cluster": {"preset": "dgx-h100", "gpus": 8},
        "job": {"seq_len": 4096, "global_batch": 32, "precision": "bf16"},
        "plan": {"dp": 8, "tp": 1, "pp": 1, "micro_batch": 1, "zero": 1, "recompute": "none"},
    }
    full = paraplan.evaluate(sc).predicted
    lora = paraplan.evaluate({**sc, "job": {**sc["job"], "frozen_base": True}}).predicted
    assert lora.step_time_s < 0.85 * full.step_time_s
    assert lora.peak_memory_bytes < full.peak_memory_bytes - 8e9 * 4  # no fp32 grads at least
