"""plan.recompute_layers through paraplan.solve: honoured exactly, or refused naming the field."""

from __future__ import annotations

import pytest

import paraplan

BASE = {
    "model": {"preset": "llama3-8b"},
    "cluster": {"preset": "dgx-h100", "nodes": 2},
    "job": {"seq_len": 8192, "global_batch": 64},
    "solver": {"target": "any"},
}


def test_one_n_fixes_full_recompute_of_n_layers_per_chunk() -> None:
    r = paraplan.solve({**BASE, "plan": {"pp": 2, "recompute_layers": 3}}, time_limit_s=30)
    assert r.plan.recompute == "full" and r.plan.recompute_layers == [3, 3]
    again = paraplan.evaluate({**BASE, "plan": r.plan})
    assert again.predicted.step_time_s == pytest.approx(r.predicted.step_time_s, rel=1e-6)


def test_per_stage_counts_are_kept() -> None:
    r = paraplan.solve({**BASE, "plan": {"pp": 2, "recompute_layers": [1, 4]}}, time_limit_s=30)
    assert r.plan.recompute_layers == [1, 4]


@pytest.mark.parametrize(
    ("plan", "needle"),
    [
        ({"recompute": "none", "recompute_layers": 2}, "needs plan.recompute=full"),
        ({"recompute_layers": [1, 2]}, "fix plan.pp too"),
        (
            {"pp": 2, "recompute": ["full", "none"], "recompute_layers": [1, 2]},
            r"recompute_layers\[1\]=2 must be 0",
        ),
    ],
)
def test_refusals_name_the_field(plan: dict, needle: str) -> None:
    with pytest.raises(paraplan.ConfigError, match=needle):
        paraplan.solve({**BASE, "plan": plan}, time_limit_s=30)


def test_a_target_without_partial_recompute_refuses() -> None:
    with pytest.raises(paraplan.InfeasibleError, match="plan.recompute_layers"):
        paraplan.solve(
            {**BASE, "plan": {"recompute_layers": 2}, "solver": {"target": "torchtitan"}}, time_limit_s=30
        )


def test_models_with_several_block_kinds_are_refused() -> None:
    sc = {
        "model": {"preset": "deepseek-v3"},
        "cluster": {"preset": "hgx-h800", "gpus": 256},
        "job": {"seq_len": 4096, "global_batch": 1024},
        "plan": {"recompute_layers": 2},
    }
    with pytest.raises(paraplan.ConfigError, match="several block kinds"):
        paraplan.solve(sc, time_limit_s=30)
