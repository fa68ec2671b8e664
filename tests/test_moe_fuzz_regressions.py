"""Fuzzer finds of 2026-12-01 (python -m benchmarks.fuzz --seed 41), kept as regressions.

- a MoE plan fixing ``plan.moe_dispatcher`` on a pooled cluster: the re-evaluated plan lost the
  dispatcher (the reeval check built its plan section from a hand list; now it carries every
  software-state field), so evaluate and solve disagreed;
- MaxText's FP8 gradient-accumulation rule built its repair with micro_batch 0 when the layout's
  dp exceeded the global batch (ValueError from check_structure instead of a refusal).
"""

from __future__ import annotations

from pathlib import Path

import yaml

import paraplan
from benchmarks.fuzz import make_case
from benchmarks.fuzz_checks import check_reeval, run_case

FUZZ = Path(__file__).resolve().parent / "data" / "fuzz"


def _scenario(name: str) -> dict:
    return yaml.safe_load((FUZZ / name).read_text())


def test_dispatcher_on_pools_reevaluates_to_its_step_time() -> None:
    scenario = _scenario("violation_reeval_moe_dispatcher_pools.yaml")
    result = paraplan.solve(scenario, time_limit_s=10.0, workers=2)
    assert result.plan.moe_dispatcher == "deepep"
    check_reeval(scenario, result)  # raises PropertyFailure on a mismatch


def test_maxtext_fp8_rule_refuses_instead_of_crashing(tmp_path) -> None:
    """The fuzzer's own case (seed 41000016, a Hugging Face config it writes), run as it ran."""
    case, _ = make_case(41000016, time_limit_s=3.0, deep_share=1.0)
    out = run_case(case, tmp_path, deep=True)  # raised ValueError before the fix
    assert out is not None


def test_ep_overlap_plan_keeps_its_cost_across_layouts() -> None:
    """Under the EP overlap a block's exposed all-to-all depends on dp, pp and vp (the steady
    share of its passes): a block-cost cache keyed without them handed one layout another's cost,
    and the solver's re-check (objective against evaluate) failed on this scenario."""
    scenario = {
        "model": {"preset": "mixtral-8x7b"},
        "cluster": {"preset": "dgx-h100", "nodes": 2},
        "job": {"seq_len": 4096, "global_batch": 128},
        "plan": {"moe_dispatcher": "hybridep", "moe_overlap": True},
    }
    result = paraplan.solve(scenario, workers=2)
    again = paraplan.evaluate({**scenario, "plan": result.plan})
    assert again.predicted.step_time_s == result.predicted.step_time_s
