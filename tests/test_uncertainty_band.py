"""Every prediction carries the model's uncertainty band; the explanation says when the
runner-up lies inside it (issue 11 item 5); text summaries show ep, etp and cp (issue 15)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from paraplan.cost import Plan, Recompute
from paraplan.cost import evaluate as cost_evaluate
from paraplan.hardware import step_time_band

import paraplan
from paraplan.instance import build_instance
from paraplan.reports.explain import explain, summary
from paraplan.reports.text import render_result
from paraplan.result import StepTimeBandOut, band_out

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
MOE_FIXED = {
    "model": {"preset": "qwen3-30b-a3b"},
    "cluster": {"preset": "dgx-h100", "gpus": 8},
    "job": {"seq_len": 4096, "global_batch": 64, "precision": "bf16"},
    "plan": {"dp": 8, "tp": 1, "pp": 1, "ep": 8, "micro_batch": 1, "zero": 1, "recompute": "full"},
}


def test_evaluate_carries_the_hopper_band() -> None:
    r = paraplan.evaluate(EXAMPLES / "llama3-70b-h100.yaml")
    band, step = r.predicted.step_time_band_s, r.predicted.step_time_s
    ratios = step_time_band(["hopper"])
    # band = [p10 ratio x step, p90 ratio x step] of measured/predicted on published H100 runs
    assert band.p10 == pytest.approx(ratios.p10_ratio * step)
    assert band.p90 == pytest.approx(ratios.p90_ratio * step)
    assert band.p10 <= step <= band.p90
    assert "hopper" in band.source
    text = render_result(r)
    assert f"band      {band.p10:.3f}-{band.p90:.3f} s" in text


def test_band_in_json_and_text_from_the_cli() -> None:
    cmd = [sys.executable, "-m", "paraplan.cli", "evaluate", str(EXAMPLES / "llama3-70b-h100.yaml")]
    data = json.loads(subprocess.run(cmd + ["--json"], capture_output=True, text=True, check=True).stdout)
    band = data["predicted"]["step_time_band_s"]
    assert set(band) == {"p10", "p90", "source"}
    assert band["p10"] <= data["predicted"]["step_time_s"] <= band["p90"]
    text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert "band " in text and "published hopper runs" in text
    assert paraplan.Result.model_validate(data).predicted.step_time_band_s is not None


def test_calibrated_band_says_it_is_the_catalog_models() -> None:
    inst = build_instance(paraplan.load_scenario(EXAMPLES / "llama3-70b-h100.yaml"))
    assert "calibration profile" not in band_out(inst.cluster, 1.0).source


def _two_plans() -> tuple:
    inst = build_instance(paraplan.load_scenario(EXAMPLES / "llama3-8b-h100.yaml"))
    plans = [
        Plan(dp=4, tp=1, pp=1, cp=2, micro_batch=1, recompute=(Recompute.NONE,), layers_per_stage=(32,)),
        Plan(
            dp=8, tp=1, pp=1, cp=1, micro_batch=1, zero=2, recompute=(Recompute.NONE,), layers_per_stage=(32,)
        ),
    ]
    scored = [(p, cost_evaluate(inst.graph, inst.cluster, inst.job, p)) for p in plans]
    return inst, sorted(scored, key=lambda pb: pb[1].step_time_s)  # the faster is "this plan"


def test_explanation_says_runner_up_inside_band_is_indistinguishable() -> None:
    inst, [(p, b), runner] = _two_plans()
    band = band_out(inst.cluster, b.step_time_s)
    assert band.p10 <= runner[1].step_time_s <= band.p90
    line = explain(p, b, inst.cluster, runner, band)[-1]
    assert line.startswith("runner-up")
    assert "indistinguishable under the model's uncertainty" in line


def test_explanation_says_when_runner_up_is_outside_a_narrow_band() -> None:
    inst, [(p, b), runner] = _two_plans()
    step = b.step_time_s
    narrow = StepTimeBandOut(p10=step * 0.9999, p90=step * 1.0001, source="test")
    assert runner[1].step_time_s > narrow.p90
    line = explain(p, b, inst.cluster, runner, narrow)[-1]
    assert "outside this plan's p10-p90 band" in line
    assert "indistinguishable" not in line


def test_solve_explains_the_runner_up_against_the_band() -> None:
    r = paraplan.solve(EXAMPLES / "llama3-70b-64xh100.yaml", workers=2, top=2)
    assert any("indistinguishable under the model's uncertainty" in e for e in r.explanation)
    alt = r.alternatives[0]
    assert alt.step_time_band_s.p10 <= alt.step_time_s <= alt.step_time_band_s.p90
    assert "(inside #1's band)" in render_result(r)


def test_summary_shows_ep_etp_and_cp() -> None:
    plan = Plan(
        dp=8,
        tp=2,
        pp=1,
        cp=4,
        ep=8,
        etp=1,
        micro_batch=1,
        recompute=(Recompute.NONE,),
        layers_per_stage=(48,),
    )
    text = summary(plan)
    assert "ep=8" in text and "etp=1" in text and "cp=4" in text and "cp_comm=p2p" in text


def test_text_report_shows_expert_parallelism() -> None:
    r = paraplan.evaluate(MOE_FIXED)
    first = render_result(r).splitlines()[0]
    assert "ep=8" in first and "etp=1" in first and "cp=1" in first
