"""plan.pp_schedule (issue 22 item 2): each schedule's bubble, in-flight activations and
parameter copies (cost/pp_schedule.py), and what DualPipe hides."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from typing import Any

import pytest
from paraplan.cost import Plan, PPSchedule, in_flight_micro_batches
from paraplan.cost.pp_schedule import (
    bubble_weight,
    held_stage_units,
    micro_batch_rule,
    paired_share,
    parameter_copies,
    rank_values,
    schedule_rule,
)

import paraplan

F, B, W = 1.0, 2.0, 1.0  # the zero-bubble papers' F = B_input = W
SHARES = (B / (F + B), W / (F + B))


def test_bubbles_follow_the_dualpipe_table() -> None:
    """(p-1)(F+B), (p-1)(F+B-2W), (p/2-1)(F&B+B-3W) with F&B = F + B, in units of the 1F1B
    stage time t = F + B; DualPipeV at vp = 2 runs 2p half-size stages."""
    p = 8
    one = bubble_weight(PPSchedule.ONE_F_ONE_B, p, 1, *SHARES)
    assert one == 1 and bubble_weight(None, p, 4, *SHARES) == Fraction(1, 4)
    zb = float(bubble_weight(PPSchedule.ZB1P, p, 1, *SHARES))
    assert zb * (p - 1) * (F + B) == pytest.approx((p - 1) * (F + B - 2 * W), rel=2e-3)
    dual = float(bubble_weight(PPSchedule.DUALPIPE, p, 1, *SHARES))
    assert dual * (p - 1) * (F + B) == pytest.approx((p / 2 - 1) * (F + B + B - 3 * W), rel=2e-3)
    v = float(bubble_weight(PPSchedule.DUALPIPEV, p, 2, *SHARES))
    # the table's 2p stages of half a rank: (2p/2 - 1)(F&B + B - 3W) of half-size chunks
    half_f, half_b, half_w = F / 2, B / 2, W / 2
    assert v * (p - 1) * (F + B) == pytest.approx((p - 1) * (half_f + 2 * half_b - 3 * half_w), rel=2e-3)
    assert bubble_weight(PPSchedule.ZB1P, p, 2, *SHARES).denominator <= 2000  # exact in the solver


def test_activations_and_parameter_copies() -> None:
    """1F1B and ZB1P hold p - s micro-batches, DualPipe p + 1 on every rank, DualPipeV p + 1/2
    rank units (2p + 1 half-size stages); DualPipe keeps two copies of the model state."""
    assert [held_stage_units(PPSchedule.ZB1P, s, 4, 1, 16) for s in range(4)] == [4, 3, 2, 1]
    assert [held_stage_units(PPSchedule.DUALPIPE, s, 4, 1, 16) for s in range(4)] == [5] * 4
    assert held_stage_units(PPSchedule.DUALPIPEV, 3, 4, 2, 16) == 4.5
    assert held_stage_units(PPSchedule.DUALPIPE, 0, 4, 1, 2) == 2  # at most m
    plan = Plan(dp=1, tp=1, pp=4, vp=2, pp_schedule=PPSchedule.DUALPIPEV, layers_per_stage=(2,) * 4)
    assert in_flight_micro_batches(0, plan, 16) == 4.5  # no interleaving factor on top
    assert parameter_copies(PPSchedule.DUALPIPE) == 2 and parameter_copies(PPSchedule.DUALPIPEV) == 1


def test_dualpipe_ranks_run_stage_pairs() -> None:
    assert rank_values(PPSchedule.DUALPIPE, [1.0, 2.0, 3.0, 6.0], mean=True) == [3.5, 2.5, 2.5, 3.5]
    assert rank_values(PPSchedule.DUALPIPE, [1.0, 0.0, 0.0, 2.0], mean=False) == [3.0, 0.0, 0.0, 3.0]
    assert rank_values(PPSchedule.ZB1P, [1.0, 2.0], mean=True) == [1.0, 2.0]
    assert paired_share(16, 120) == pytest.approx(1 - 16 / 240)


def test_schedules_name_the_degrees_they_need() -> None:
    assert schedule_rule(PPSchedule.INTERLEAVED, 4, 1) == (
        "plan.pp_schedule=interleaved needs vp > 1 (1f1b runs vp=1); the plan has pp=4, vp=1"
    )
    assert "needs vp=2" in str(schedule_rule(PPSchedule.DUALPIPEV, 4, 4))
    assert "even pp" in str(schedule_rule(PPSchedule.DUALPIPE, 3, 1))
    assert "pp > 1" in str(schedule_rule(PPSchedule.ZB1P, 1, 1))
    assert schedule_rule(PPSchedule.ZB1P, 4, 3) is None
    assert schedule_rule(PPSchedule.ONE_F_ONE_B, 1, 1) is None
    assert "2*pp=8" in str(micro_batch_rule(PPSchedule.DUALPIPEV, 4, 6))
    assert "even micro-batch count" in str(micro_batch_rule(PPSchedule.DUALPIPE, 4, 5))


def _scenario(**plan: Any) -> dict[str, Any]:
    return {
        "model": {"preset": "llama3.1-8b"},
        "cluster": {"preset": "dgx-h100", "gpus": 16},
        "job": {"seq_len": 8192, "global_batch": 64, "precision": "bf16"},
        "plan": {"dp": 1, "tp": 4, "pp": 4, "micro_batch": 1, "zero": 1, "recompute": "full", **plan},
    }


def test_schedules_change_the_bubble_only_and_dualpipe_its_memory() -> None:
    base = paraplan.evaluate(_scenario(vp=2)).predicted
    zb = paraplan.evaluate(_scenario(vp=2, pp_schedule="zb1p")).predicted
    v = paraplan.evaluate(_scenario(vp=2, pp_schedule="dualpipev")).predicted
    dual = paraplan.evaluate(_scenario(pp_schedule="dualpipe")).predicted
    one = paraplan.evaluate(_scenario()).predicted
    assert zb.compute_s == pytest.approx(base.compute_s) and zb.bubble_s < base.bubble_s
    assert zb.step_time_s - zb.bubble_s == pytest.approx(base.step_time_s - base.bubble_s)
    assert v.bubble_s < base.bubble_s
    assert dual.bubble_s < one.bubble_s
    assert dual.stages[1].weights_bytes == pytest.approx(2 * one.stages[1].weights_bytes)
    assert dual.stages[1].optimizer_bytes == pytest.approx(2 * one.stages[1].optimizer_bytes)


def test_a_schedule_the_degrees_do_not_allow_is_a_config_error() -> None:
    with pytest.raises(paraplan.ConfigError, match=r"plan\.pp_schedule=dualpipev needs vp=2"):
        paraplan.evaluate(_scenario(pp_schedule="dualpipev"))
    with pytest.raises(paraplan.ConfigError, match=r"pp_schedule"):
        paraplan.evaluate(_scenario(pp_schedule="gpipe"))


def test_a_result_plan_writes_the_schedule_and_reads_back_the_same_plan() -> None:
    r = paraplan.evaluate(_scenario(vp=2))
    assert r.plan.pp_schedule == "interleaved"
    again = paraplan.evaluate(r)
    assert again.predicted.step_time_s == r.predicted.step_time_s
    plan = Plan(dp=1, tp=1, pp=2, vp=2, pp_schedule=PPSchedule.ZB1P)
    assert replace(plan, vp=1).pp_schedule == PPSchedule.ZB1P  # repairs build plans check_plan judges
