"""XLA's compiled memory plan agrees with paraplan's TPU memory terms (issue 14).

tests/cost/xla_remat_memory_check.py compiles a MaxText-shaped decoder with jax in the Python 3.12
interpreter PARAPLAN_MAXTEXT_PYTHON names (.ci/run builds it with jax[cpu] for the MaxText oracle)
and reports XLA's temp bytes. Measured 2026-12-01 (jax 0.12.0.1, CPU backend): each layer keeps
exactly the block input under remat ``full`` and exactly minimal's set under ``minimal``; the
layer-backward transient does not grow with the vocabulary (logits and the re-materialised block
are not live together); MaxText's cross entropy keeps 4 B per logit element. Skipped when the
variable is unset. The CPU backend fuses differently from the TPU one; what a remat policy saves
and which buffers overlap in time do not depend on the backend.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from paraplan.cost import Job, Plan, Recompute, stored_activation_bytes
from paraplan.cost.block import LOGITS_BYTES_PER_ELEMENT
from paraplan.cost.recompute import block_input_bytes
from paraplan.graph import Activation, ModelSpec, build_graph

PYTHON = os.environ.get("PARAPLAN_MAXTEXT_PYTHON")
CHECK = Path(__file__).with_name("xla_remat_memory_check.py")

pytestmark = [pytest.mark.oracle, pytest.mark.skipif(not PYTHON, reason="PARAPLAN_MAXTEXT_PYTHON is not set")]


@pytest.fixture(scope="module")
def xla() -> dict:
    run = subprocess.run([str(PYTHON), str(CHECK)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def _paraplan(xla: dict) -> tuple[Plan, Job, list]:
    spec = ModelSpec(
        name="maxtext-shaped",
        num_layers=1,
        hidden=xla["hidden"],
        ffn_hidden=xla["ffn_hidden"],
        num_heads=xla["heads"],
        num_kv_heads=xla["heads"],
        head_dim=xla["head_dim"],
        vocab=1024,
        activation=Activation.RELU,
        dropout=False,
    )
    plan = Plan(dp=1, tp=1, pp=1, micro_batch=xla["batch"], layers_per_stage=(1,))
    return plan, Job(seq_len=xla["seq_len"], global_batch=xla["batch"]), build_graph(spec).block_layers(0)


def test_full_remat_keeps_the_block_input_per_layer(xla: dict) -> None:
    plan, job, _ = _paraplan(xla)
    assert xla["full_bytes_per_layer"] == pytest.approx(block_input_bytes(xla["hidden"], plan, job), rel=1e-3)


def test_minimal_remat_keeps_what_paraplan_counts_for_selective_on_a_tpu(xla: dict) -> None:
    plan, job, layers = _paraplan(xla)
    tpu = sum(stored_activation_bytes(ly, plan, job, Recompute.SELECTIVE, is_tpu=True) for ly in layers)
    megatron = sum(stored_activation_bytes(ly, plan, job, Recompute.SELECTIVE) for ly in layers)
    assert xla["minimal_bytes_per_layer"] == pytest.approx(tpu, rel=1e-3)
    assert xla["minimal_bytes_per_layer"] < 0.8 * megatron


def test_logits_are_not_live_with_the_rematerialised_block(xla: dict) -> None:
    # 4x the vocabulary adds 3072 logits per token; on top of the block that would be >= 12 MB
    assert xla["full_intercept_vocab_4096"] == xla["full_intercept_vocab_1024"]


def test_maxtexts_cross_entropy_keeps_no_more_than_paraplan_counts_per_logit(xla: dict) -> None:
    assert xla["loss_bytes_per_logit_element"] <= LOGITS_BYTES_PER_ELEMENT
