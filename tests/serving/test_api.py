"""The serving front door (issue 23): paraplan.solve / paraplan.evaluate and the CLI take a
serving scenario; the result holds issue 23's ``predicted`` keys, its plan round-trips through
evaluate and solve, and misuse is a ConfigError naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import paraplan
from paraplan.cli import main
from paraplan.errors import ConfigError, InfeasibleError
from paraplan.serving import ServingResult

SCENARIO = {
    "model": {"preset": "llama3.1-8b"},
    "cluster": {"preset": "dgx-h100", "gpus": 2},
    "workload": {
        "isl": 1024,
        "osl": 256,
        "request_rate": 4.0,
        "slo": {"ttft_ms": 1000, "tpot_ms": 40},
        "weights_precision": "fp8",
        "kv_precision": "fp8",
    },
    "engine": {"name": "vllm"},
}
AGGREGATED = {**SCENARIO, "plan": {"mode": "aggregated", "tp": 1, "replicas": 2}}
DISAGGREGATED = {
    **SCENARIO,
    "plan": {"mode": "disaggregated", "prefill": {"tp": 1, "workers": 1}, "decode": {"tp": 1, "workers": 1}},
}


@pytest.fixture(scope="module")
def solved() -> ServingResult:
    return paraplan.solve(SCENARIO, time_limit_s=60)


def test_evaluate_gives_the_issue_23_prediction_keys() -> None:
    r = paraplan.evaluate(AGGREGATED)
    assert isinstance(r, ServingResult)
    q = r.model_dump(mode="json")["predicted"]
    for key in (
        "ttft_ms",
        "tpot_ms",
        "output_tokens_per_s",
        "output_tokens_per_s_per_gpu",
        "goodput_requests_per_s",
        "kv_cache_tokens",
        "memory_per_gpu",
        "band",
    ):
        assert key in q
    assert set(q["ttft_ms"]) == {"p50", "p90"} and set(q["tpot_ms"]) == {"p50", "p90"}
    assert set(q["memory_per_gpu"]) == {"weights", "kv_cache", "activations", "buffers"}
    assert r.plan.num_devices == 2 and r.predicted.gpus == 2
    assert q["ttft_ms"]["p90"] >= q["ttft_ms"]["p50"] > 0
    assert r.predicted.output_tokens_per_s == pytest.approx(2 * r.predicted.output_tokens_per_s_per_gpu)
    assert r.explanation and r.explanation[0].startswith("plan: 2 x (tp1)")


def test_a_disaggregated_plan_evaluates() -> None:
    r = paraplan.evaluate(DISAGGREGATED)
    assert r.plan.mode == "disaggregated" and r.plan.prefill is not None and r.plan.decode is not None
    assert r.predicted.gpus == 2


def test_solve_proves_its_plan_and_it_round_trips(solved: ServingResult) -> None:
    assert solved.solver is not None and solved.solver.status == "OPTIMAL"
    assert solved.solver.objective_value == pytest.approx(
        solved.predicted.goodput_requests_per_s / solved.predicted.gpus
    )
    again = paraplan.evaluate(solved)  # the result's own plan on its own scenario
    assert again.predicted == solved.predicted
    resolved = paraplan.solve(solved.model_dump(mode="json"), time_limit_s=60)  # every knob fixed
    assert resolved.plan == solved.plan


def test_fixed_knobs_are_kept() -> None:
    r = paraplan.solve({**SCENARIO, "plan": {"mode": "aggregated", "max_batch": 32}}, time_limit_s=60)
    assert r.plan.mode == "aggregated" and r.plan.max_batch == 32


@pytest.mark.parametrize(
    ("plan", "words"),
    [
        ({"mode": "aggregated", "tp": 1}, ["plan.replicas"]),
        ({"mode": "disaggregated", "prefill": {"tp": 1}}, ["plan.prefill.workers", "plan.decode.tp"]),
        ({}, ["plan.mode"]),
        ({"mode": "aggregated", "tp": 3, "replicas": 1}, ["plan.tp=3", "attention heads"]),
        ({"mode": "aggregated", "tp": 2, "replicas": 2}, ["4 GPUs", "cluster has 2"]),
        ({"mode": "aggregated", "tp": 1, "replicas": 1, "num_devices": 2}, ["plan.num_devices=2", "1 GPUs"]),
        ({"mode": "aggregated", "tp": 1, "ep": 2, "replicas": 1}, ["ep=2", "experts"]),
    ],
)
def test_bad_serving_plans_name_the_field(plan: dict, words: list[str]) -> None:
    with pytest.raises(ConfigError) as e:
        paraplan.evaluate({**SCENARIO, "plan": plan})
    for w in words:
        assert w in str(e.value), str(e.value)


def test_an_unmeetable_slo_is_infeasible_naming_it() -> None:
    tight = {**SCENARIO, "workload": {**SCENARIO["workload"], "slo": {"tpot_ms": 0.01}}}
    with pytest.raises(InfeasibleError, match="SLO"):
        paraplan.solve(tight, time_limit_s=60)


def test_cli_plans_and_evaluates_a_serving_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], solved: ServingResult
) -> None:
    path = tmp_path / "serve.json"
    path.write_text(json.dumps(SCENARIO))
    assert main(["plan", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kind"] == "serving" and out["plan"] == solved.model_dump(mode="json")["plan"]
    result = tmp_path / "r.json"
    result.write_text(json.dumps(out))
    assert main(["evaluate", str(result)]) == 0
    text = capsys.readouterr().out
    assert "latency   TTFT p50" in text and "why this plan" in text
    assert main(["plan", str(path), "--target", "megatron"]) == 1
    assert "--target is for training scenarios" in capsys.readouterr().err


def test_disaggregated_pool_knobs_are_kept() -> None:
    plan = {"mode": "disaggregated", "prefill": {"tp": 2}, "decode": {"workers": 1}}
    r = paraplan.solve(
        {**SCENARIO, "cluster": {"preset": "dgx-h100", "gpus": 4}, "plan": plan}, time_limit_s=60
    )
    assert r.plan.prefill is not None and r.plan.prefill.tp == 2
    assert r.plan.decode is not None and r.plan.decode.workers == 1


def test_min_gpus_serves_the_rate_on_the_fewest_gpus() -> None:
    scenario = {**SCENARIO, "cluster": {"preset": "dgx-h100", "gpus": 8}, "objective": "min_gpus"}
    r = paraplan.solve(scenario, time_limit_s=60)
    assert r.solver is not None and r.solver.status == "OPTIMAL" and r.predicted.meets_slo
    assert r.predicted.output_tokens_per_s >= 4.0 * 256 * (1 - 1e-9)
    assert r.solver.objective_value == r.predicted.gpus
    fewer = {**scenario, "plan": {"num_devices": r.predicted.gpus - 1}} if r.predicted.gpus > 1 else None
    if fewer is not None:  # one GPU less serves no plan of the space
        with pytest.raises(InfeasibleError):
            paraplan.solve(fewer, time_limit_s=60)


QWEN_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "serve-qwen3-235b-16xb200.yaml"
QWEN_ONE_REPLICA = {"mode": "aggregated", "tp": 8, "dp_attention": True, "replicas": 1, "max_batch": 256}


def _qwen_example(ttft_ms: float, plan: dict) -> dict:
    import yaml

    doc = yaml.safe_load(QWEN_EXAMPLE.read_text())
    doc["workload"]["slo"]["ttft_ms"] = ttft_ms
    return {**doc, "plan": plan}


def test_a_missed_ttft_slo_names_the_miss_the_share_within_it_and_what_to_change() -> None:
    """Issue 23: the Qwen3-235B example printed "SLO NOT MET" for its own optimum with no reason.
    At slo.ttft_ms 3000 the one-replica plan misses at p90: the explanation names the figure, the
    share of requests within it (goodput over completions) and the closed loop's first wave."""
    r = paraplan.evaluate(_qwen_example(3000, QWEN_ONE_REPLICA))
    assert not r.predicted.meets_slo and r.predicted.ttft_ms.p90 > 3000
    miss = [e for e in r.explanation if e.startswith("SLO not met: TTFT p90")]
    assert len(miss) == 1
    share = r.predicted.goodput_requests_per_s / (r.predicted.output_tokens_per_s / 512)
    assert 0.0 < share < 1.0 and f"{share:.0%} of requests within it" in miss[0]
    assert "256 requests x 2,048 prompt tokens = 64 steps" in miss[0] and "more replicas" in miss[0]


def test_two_replicas_hold_the_3_s_slo_the_one_replica_misses() -> None:
    r = paraplan.evaluate(_qwen_example(3000, {**QWEN_ONE_REPLICA, "replicas": 2, "max_batch": 128}))
    assert r.predicted.meets_slo and r.predicted.ttft_ms.p90 < 3000
    assert not any(e.startswith("SLO not met") for e in r.explanation)


def test_the_qwen3_example_optimum_meets_its_own_slo() -> None:
    r = paraplan.solve(str(QWEN_EXAMPLE), time_limit_s=60)
    assert r.solver is not None and r.solver.status == "OPTIMAL"
    assert r.predicted.meets_slo
    assert not any(e.startswith("SLO not met") for e in r.explanation)
