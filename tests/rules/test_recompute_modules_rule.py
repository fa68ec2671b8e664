"""job.recompute_modules is Megatron's --recompute-modules: the other targets refuse it by name
(rules/checks.py megatron_recompute_modules_rule)."""

from __future__ import annotations

import pytest

import paraplan.api
from paraplan.errors import InfeasibleError


def test_frameworks_without_the_setting_refuse_it_by_name() -> None:
    scenario = {
        "model": {"preset": "qwen3-30b-a3b"},
        "cluster": {"preset": "dgx-h100", "nodes": 2},
        "job": {"seq_len": 4096, "global_batch": 256, "recompute_modules": ["layernorm", "moe_act"]},
        "plan": {"tp": 1, "pp": 1, "dp": 16, "ep": 8, "recompute": "selective", "micro_batch": 1, "zero": 1},
    }
    result = paraplan.api.evaluate(scenario)
    assert set(result.runs_on) == {"megatron", "nemo"}


def test_a_torchtitan_target_names_the_field() -> None:
    scenario = {
        "model": {"preset": "qwen3-30b-a3b"},
        "cluster": {"preset": "dgx-h100", "nodes": 2},
        "job": {"seq_len": 4096, "global_batch": 256, "recompute_modules": ["moe_act"]},
        "solver": {"target": "torchtitan"},
    }
    with pytest.raises(InfeasibleError, match="job.recompute_modules"):
        paraplan.api.solve(scenario)
