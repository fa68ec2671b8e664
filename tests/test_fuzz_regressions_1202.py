"""Fuzzer finds of 2026-12-02 (python -m benchmarks.fuzz --seed 77 and 78), kept as regressions.

- the neighbour check crashed on a MoE plan with etp = tp: it doubled tp in one ``replace`` and
  set etp in the next, but a Plan refuses etp not 1 or tp on construction (check_structure), so
  building the neighbour raised ValueError (seed 77000231: qwen3-30b-a3b on 32 H800, plan.etp 8).
- the neighbour check judged a runnable default's plan by the union's layout filter alone: a GPT-NeoX
  model (parallel attention + MLP) only DeepSpeed runs, whose pipeline builds its own even split,
  was "beaten" by moving a layer, a split no framework runs (seed 35000022, python -m
  benchmarks.fuzz --seed 35); the check now asks the per-stage limits of the frameworks that run
  the layout, as the search does (Options.layout_limits).
"""

from __future__ import annotations

import json
from pathlib import Path

import paraplan
from benchmarks.fuzz_checks import _instance, check_neighbours, neighbours, outside_space
from paraplan.export import to_cost_plan

ETP_8 = {
    "model": {"preset": "qwen3-30b-a3b"},
    "cluster": {"preset": "hgx-h800", "gpus": 32},
    "job": {"seq_len": 256, "global_batch": 16},
    "plan": {"etp": 8},
}


def test_neighbours_of_an_etp_equal_tp_plan_change_etp_with_tp() -> None:
    result = paraplan.solve(ETP_8, time_limit_s=10.0, workers=2)
    best = to_cost_plan(result.plan)
    assert best.tp == best.etp == 8
    plans = dict(neighbours(best, _instance(ETP_8)[0]))  # raised ValueError before the fix
    assert plans["tpx2,dp/2"].etp == 16
    assert plans["dpx2,tp/2"].etp == 4
    check_neighbours(ETP_8, result)  # the fuzz case's own check, which crashed


NEOX = {
    "hidden_size": 256,
    "num_attention_heads": 8,
    "num_hidden_layers": 12,
    "vocab_size": 50257,
    "intermediate_size": 1024,
    "model_type": "gpt_neox",
    "hidden_act": "gelu",
}


def test_a_neighbour_split_no_framework_runs_is_outside_the_runnable_default(tmp_path: Path) -> None:
    config = tmp_path / "neox.config.json"
    config.write_text(json.dumps(NEOX))
    scenario = {
        "model": {"hf_config": str(config)},
        "cluster": {"preset": "gh200-mgx", "gpus": 32},
        "job": {"seq_len": 512, "global_batch": 32},
    }
    result = paraplan.solve(scenario, time_limit_s=10.0, workers=2)
    best = to_cost_plan(result.plan)
    assert result.runs_on == ["deepspeed"] and best.layers_per_stage == (6, 6)
    inst, fixed, options = _instance(scenario)
    moved = dict(neighbours(best, inst))["move 1 layer(s) 1->0"]
    assert moved.layers_per_stage == (7, 5)
    why = outside_space(moved, inst, fixed, options)
    assert why is not None and why.startswith("no framework that runs the layout runs its stages")
    check_neighbours(scenario, result)  # failed before: the (7, 5) split is modelled faster
