"""job.loss_chunks: torchtitan exports it as ``--loss.num-chunks`` (every config function it
builds these models with wraps the loss in ChunkedLossWrapper), the other training frameworks
refuse a value above 1 by name (rules/checks.py loss_chunks_rule), and torchtitan refuses a count
that does not divide each rank's tokens (rules/torchtitan.py check_loss_chunks)."""

from __future__ import annotations

from functools import cache

import pytest

import paraplan
from paraplan.errors import ExportError
from paraplan.export import export_text
from paraplan.result import Result
from tests.export.test_alloc_conf import PLAN, PLANS  # a plan each framework runs


@cache
def _result(loss_chunks: int, target: str, seq_len: int = 4096, cp: int = 1) -> Result:
    plan = {**PLANS.get(target, PLAN), "cp": cp}
    gpus = plan["dp"] * plan["tp"] * plan["pp"] * cp
    return paraplan.evaluate(
        {
            "model": {"preset": "llama3.1-8b"},
            "cluster": {"preset": "dgx-h100", "gpus": gpus},
            "job": {"seq_len": seq_len, "global_batch": 64, "loss_chunks": loss_chunks},
            "plan": plan,
        }
    )


@pytest.mark.parametrize("chunks", [1, 8])
def test_torchtitan_writes_the_chunk_count(chunks: int) -> None:
    lines = export_text(_result(chunks, "torchtitan"), "torchtitan").splitlines()
    assert f"  --loss.num-chunks {chunks} \\" in lines


@pytest.mark.parametrize("target", ["megatron", "nemo", "deepspeed", "torch"])
def test_frameworks_without_a_chunked_loss_refuse_it_by_name(target: str) -> None:
    assert export_text(_result(1, target), target)  # one chunk: the plain loss
    with pytest.raises(ExportError, match=r"job\.loss_chunks=8: .*\(run by: torchtitan"):
        export_text(_result(8, target), target)


def test_torchtitan_refuses_a_count_that_does_not_divide_the_ranks_tokens() -> None:
    """cp 2 leaves each rank 2,048 of 4,096 tokens: 8 chunks divide it, 3 do not."""
    assert "--loss.num-chunks 8" in export_text(_result(8, "torchtitan", cp=2), "torchtitan")
    with pytest.raises(ExportError, match=r"job\.loss_chunks=3: .*2,048 tokens"):
        export_text(_result(3, "torchtitan", seq_len=4096, cp=2), "torchtitan")


def test_the_runnable_default_plans_a_chunked_loss_on_torchtitan_only() -> None:
    result = paraplan.solve(
        {
            "model": {"preset": "llama3.1-8b"},
            "cluster": {"preset": "dgx-h100", "gpus": 8},
            "job": {"seq_len": 8192, "global_batch": 32, "loss_chunks": 8},
        },
        time_limit_s=60,
    )
    assert result.runs_on == ["torchtitan"]
