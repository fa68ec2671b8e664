"""plan.pp_schedule per framework (rules/pp_schedule.py): each framework refuses by name the
schedules it does not run and names those that do; torchtitan runs ZB1P (vp >= 2) and DualPipeV;
no target runs DualPipe; the torchtitan export writes torch 2.13's schedule names."""

from __future__ import annotations

import pytest
from paraplan.cost import Job, Plan, PPSchedule, Precision, Recompute
from paraplan.graph import preset
from paraplan.hardware import build_cluster
from paraplan.rules import FRAMEWORKS, Draft, RuleContext, first_refusal, rules_of
from paraplan.rules.pp_schedule import RUNS, TORCHTITAN_NAMES, runs_schedule, searched_schedules

import paraplan
from paraplan.export import context
from paraplan.export.torchtitan import torchtitan_args


def _ctx() -> RuleContext:
    job = Job(global_batch=64, seq_len=4096, precision=Precision.BF16)
    return RuleContext(preset("llama3.1-8b"), job, build_cluster("dgx-h100", nodes=2), "llama3.1-8b")


def _refusal(framework: str, schedule: PPSchedule | None, vp: int) -> str | None:
    plan = Plan(
        dp=4,
        tp=1,
        pp=4,
        vp=vp,
        pp_schedule=schedule,
        recompute=(Recompute.FULL,) * 4,
        layers_per_stage=(8,) * 4,
    )
    rules = [r for r in rules_of(framework).rules if r.__module__ == "paraplan.rules.pp_schedule"]
    assert len(rules) == 1, framework
    refusal = first_refusal(_ctx(), Draft(plan, Precision.BF16), rules)
    return None if refusal is None else refusal.rule


def test_every_framework_runs_what_vp_implies() -> None:
    for name in FRAMEWORKS:
        for schedule, vp in ((None, 1), (None, 2), (PPSchedule.ONE_F_ONE_B, 1), (PPSchedule.INTERLEAVED, 2)):
            assert _refusal(name, schedule, vp) is None, name


@pytest.mark.parametrize("name", ["megatron", "nemo", "deepspeed", "maxtext", "torch"])
def test_frameworks_without_the_schedule_refuse_it_by_name(name: str) -> None:
    rule = _refusal(name, PPSchedule.ZB1P, 2)
    assert rule is not None and rule.startswith("plan.pp_schedule=zb1p (vp=2): ")
    assert rule.endswith("run by: torchtitan")
    dual = _refusal(name, PPSchedule.DUALPIPE, 1)
    assert dual is not None and "none of paraplan's targets" in dual


def test_torchtitan_runs_zero_bubble_and_dualpipev() -> None:
    assert _refusal("torchtitan", PPSchedule.ZB1P, 2) is None
    assert _refusal("torchtitan", PPSchedule.DUALPIPEV, 2) is None
    one = _refusal("torchtitan", PPSchedule.ZB1P, 1)
    assert one is not None and "needs vp >= 2" in one and "run by: none" in one
    assert not runs_schedule("torchtitan", PPSchedule.DUALPIPE, 1)
    assert searched_schedules("torchtitan") == (PPSchedule.ZB1P, PPSchedule.DUALPIPEV)
    assert searched_schedules("megatron") == ()
    assert set(RUNS) == set(FRAMEWORKS)


def _scenario(**plan: object) -> dict[str, object]:
    return {
        "model": {"preset": "llama3.1-8b"},
        "cluster": {"preset": "dgx-h100", "gpus": 16},
        "job": {"seq_len": 4096, "global_batch": 64, "precision": "bf16"},
        "plan": {
            "dp": 4,
            "tp": 1,
            "pp": 4,
            "vp": 2,
            "micro_batch": 1,
            "zero": 1,
            "recompute": "full",
            **plan,
        },
    }


@pytest.mark.parametrize("schedule", ["zb1p", "dualpipev", None])
def test_the_torchtitan_export_writes_torchs_schedule_name(schedule: str | None) -> None:
    r = paraplan.evaluate(_scenario(**({"pp_schedule": schedule} if schedule else {})))
    args = torchtitan_args(context(r))
    at = args.index("--parallelism.pipeline-parallel-schedule")
    assert args[at + 1] == TORCHTITAN_NAMES[PPSchedule(schedule or "interleaved")]


def test_solve_searches_the_schedules_the_target_runs() -> None:
    scenario = {**_scenario(), "plan": {"pp": 4, "tp": 1}}
    titan = paraplan.solve({**scenario, "solver": {"target": "torchtitan"}}, time_limit_s=30)
    mega = paraplan.solve({**scenario, "solver": {"target": "megatron"}}, time_limit_s=30)
    default = paraplan.solve(scenario, time_limit_s=30)
    assert titan.plan.pp_schedule in ("zb1p", "dualpipev")
    assert titan.predicted.step_time_s < mega.predicted.step_time_s
    assert mega.plan.pp_schedule in ("1f1b", "interleaved")
    assert default.plan.pp_schedule in ("1f1b", "interleaved")  # the runnable default: implied ones


def test_dualpipe_is_evaluated_not_planned() -> None:
    with pytest.raises(paraplan.ConfigError, match=r"plan\.pp_schedule=dualpipe: `paraplan plan` does not"):
        paraplan.solve({**_scenario(), "plan": {"pp": 4, "pp_schedule": "dualpipe"}}, time_limit_s=10)
