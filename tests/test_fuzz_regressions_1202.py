"""Fuzzer finds of 2026-12-02 (python -m benchmarks.fuzz --seed 77 and 78), kept as regressions.

- the neighbour check crashed on a MoE plan with etp = tp: it doubled tp in one ``replace`` and
  set etp in the next, but a Plan refuses etp not 1 or tp on construction (check_structure), so
  building the neighbour raised ValueError (seed 77000231: qwen3-30b-a3b on 32 H800, plan.etp 8).
"""

from __future__ import annotations

import paraplan
from benchmarks.fuzz_checks import _instance, check_neighbours, neighbours
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
