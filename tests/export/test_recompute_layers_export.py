"""Partial recompute in the exports (Plan.recompute_layers): Megatron-LM, NeMo 2 and
Megatron-Bridge take --recompute-method block --recompute-num-layers N (one N for every rank);
a plan needing a different N per rank, and every framework without such a setting, is refused
with the nearest plan (full recompute of every layer)."""

from __future__ import annotations

import pytest

from paraplan.export import context
from paraplan.export.megatron import megatron_args
from paraplan.export.nemo import bridge_overrides, nemo2_overrides
from tests.export.test_exporters import assert_names_nearest_plan, flags, refusal, result

PARTIAL = {"dp": 4, "tp": 2, "pp": 2, "micro_batch": 1, "zero": 1, "recompute": "full", "recompute_layers": 3}


def test_megatron_block_method_with_n_layers() -> None:
    f = flags(megatron_args(context(result(**PARTIAL))))
    assert f["--recompute-granularity"] == "full"
    assert f["--recompute-method"] == "block"
    assert f["--recompute-num-layers"] == "3"


def test_full_recompute_stays_the_uniform_method() -> None:
    f = flags(megatron_args(context(result(**{**PARTIAL, "recompute_layers": None}))))
    assert (f["--recompute-method"], f["--recompute-num-layers"]) == ("uniform", "1")


def test_nemo_and_bridge_take_the_same_values() -> None:
    ctx = context(result(**PARTIAL))
    bridge = bridge_overrides(ctx)
    assert bridge["model.recompute_granularity"] == "full"
    assert bridge["model.recompute_method"] == "block"
    assert bridge["model.recompute_num_layers"] == 3
    nemo = nemo2_overrides(ctx)
    assert nemo["model.config.recompute_method"] == "block"
    assert nemo["model.config.recompute_num_layers"] == 3


def test_megatron_refuses_a_different_n_per_rank() -> None:
    res = result(**{**PARTIAL, "recompute_layers": [3, 5]})
    message = refusal(res, "megatron")
    assert "--recompute-num-layers is one N" in message
    assert_names_nearest_plan(message, "recompute -> full on every layer")


@pytest.mark.parametrize("target", ["torchtitan", "deepspeed", "torch"])
def test_frameworks_without_partial_recompute_refuse(target: str) -> None:
    message = refusal(result(**PARTIAL), target)
    assert "plan.recompute_layers=[3, 3]" in message
    assert_names_nearest_plan(message, "recompute -> full on every layer")
