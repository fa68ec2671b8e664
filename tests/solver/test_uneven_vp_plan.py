"""Planning with Megatron's uneven virtual pipeline (issue 11 item 4): Llama 3.1 405B on pp 8 x
vp 8 (126 layers: NVIDIA's recipe) plans, and the plan re-evaluates to its objective."""

from __future__ import annotations

from pathlib import Path

import pytest

import paraplan
from paraplan.errors import ConfigError
from paraplan.scenario.schema import load_scenario

EXAMPLE_405B = Path(__file__).parents[2] / "examples" / "llama31-405b-1024xh100.yaml"
RECIPE_CHUNKS = [[1] + [2] * 7] + [[2] * 8] * 6 + [[2] * 7 + [1]]


def _scenario(**plan: object) -> dict:
    s = load_scenario(EXAMPLE_405B).model_dump(mode="json", exclude_none=True)
    s["plan"] = {"tp": 8, "pp": 8, "cp": 2, "vp": 8, **plan}
    s["solver"] = {"max_vp": 8}
    return s


def test_405b_pp8_vp8_plans_and_matches_evaluate() -> None:
    res = paraplan.solve(_scenario(), time_limit_s=60, workers=1)
    assert res.solver.status == "OPTIMAL"
    assert (res.plan.pp, res.plan.vp) == (8, 8)
    assert sum(res.plan.layers_per_stage) == 126
    assert res.plan.layers_per_chunk  # 126 is no multiple of 8: the slots make chunks unequal
    fixed = paraplan.evaluate(
        res.scenario
        | {
            "plan": {
                k: getattr(res.plan, k)
                for k in (
                    "dp",
                    "tp",
                    "pp",
                    "cp",
                    "vp",
                    "micro_batch",
                    "zero",
                    "sequence_parallel",
                    "layers_per_stage",
                )
            }
            | {"recompute": res.plan.recompute_per_stage}
        }
    )
    assert fixed.predicted.step_time_s == pytest.approx(res.predicted.step_time_s, rel=1e-9)
    assert res.solver.objective_s == pytest.approx(res.predicted.step_time_s, rel=1e-6)


def test_405b_recipe_split_is_its_plan_when_fixed() -> None:
    res = paraplan.solve(
        _scenario(dp=8, micro_batch=1, zero=1, recompute="none", layers_per_chunk=RECIPE_CHUNKS),
        time_limit_s=60,
        workers=1,
    )
    assert res.plan.layers_per_stage == [15] + [16] * 6 + [15]
    assert res.plan.layers_per_chunk == RECIPE_CHUNKS
    assert res.predicted.step_time_s == pytest.approx(
        paraplan.evaluate(EXAMPLE_405B).predicted.step_time_s, rel=1e-9
    )


def test_plan_refuses_a_chunk_layout_it_does_not_search() -> None:
    chunks = [[2, 1, 2, 2, 2, 2, 2, 2]] + RECIPE_CHUNKS[1:]
    with pytest.raises(ConfigError, match=r"plan\.layers_per_chunk=.*paraplan evaluate"):
        paraplan.solve(_scenario(layers_per_chunk=chunks), time_limit_s=60, workers=1)
    with pytest.raises(ConfigError, match=r"plan\.layers_per_chunk rows must each list vp=4"):
        paraplan.solve(_scenario(vp=4, layers_per_chunk=RECIPE_CHUNKS), time_limit_s=60, workers=1)


def test_megatron_target_plans_the_account_for_split() -> None:
    scenario = _scenario(dp=8, micro_batch=1, zero=1, recompute="none")
    scenario["solver"]["target"] = "megatron"
    res = paraplan.solve(scenario, time_limit_s=60, workers=1)
    assert res.plan.layers_per_chunk
    text = paraplan.export(res, "megatron")
    assert "--account-for-embedding-in-pipeline-split" in text or "--pipeline-model-parallel-layout" in text
