"""The serving scenario (issue 23): ``workload:`` makes a scenario a serving one; bad input is a
ConfigError naming the field and the rule, as for training."""

from __future__ import annotations

import pytest

from paraplan.errors import ConfigError
from paraplan.scenario.schema import load_scenario
from paraplan.serving.schema import ServingScenario, is_serving_document, validate_serving

BASE = {
    "model": {"preset": "llama3.1-8b"},
    "cluster": {"preset": "dgx-h100", "gpus": 8},
    "workload": {"isl": 1024, "osl": 256, "concurrency": 64, "slo": {"ttft_ms": 2000, "tpot_ms": 50}},
}


def with_(**sections: object) -> dict:
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in BASE.items()}
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def test_a_minimal_serving_scenario_validates_with_defaults() -> None:
    sc = validate_serving(BASE)
    assert isinstance(sc, ServingScenario)
    assert sc.engine.name == "vllm" and sc.objective == "goodput_per_gpu"
    assert sc.workload.slo.percentile == 90 and sc.workload.kv_precision == "bf16"
    assert sc.workload.lengths() == (1024.0, None, 256.0, None)


def test_lengths_take_a_mean_and_a_p90() -> None:
    sc = validate_serving(with_(workload={"isl": {"mean": 1000, "p90": 3000}, "osl": {"mean": 200}}))
    assert sc.workload.lengths() == (1000.0, 3000.0, 200.0, None)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"workload": {"concurrency": None}}, ["workload", "exactly one of workload.concurrency"]),
        ({"workload": {"request_rate": 3.0}}, ["exactly one of workload.concurrency"]),
        ({"workload": {"slo": {"percentile": 95}}}, ["workload.slo", "percentile=95", "50, 90"]),
        ({"workload": {"isl": {"mean": 1000, "p90": 10}}}, ["workload.isl", "p90=10", "at least the mean"]),
        ({"workload": {"isl": 0}}, ["workload.isl"]),
        ({"workload": {"request_rate": float("nan"), "concurrency": None}}, ["workload.request_rate"]),
        ({"workload": {"concurrency": True}}, ["workload.concurrency", "true/false"]),
        ({"workload": {"weights_precision": "fp3"}}, ["workload.weights_precision"]),
        ({"workload": {"burst": 2}}, ["workload.burst", "unknown key"]),
        ({"engine": {"name": "tgi"}}, ["engine.name"]),
        ({"objective": "max_speed"}, ["objective"]),
        ({"objective": "min_gpus"}, ["min_gpus", "request_rate"]),
        ({"plan": {"mode": "aggregated", "prefill": {"tp": 2}}}, ["plan", "prefill", "disaggregated"]),
        ({"plan": {"mode": "disaggregated", "tp": 2}}, ["plan", "plan.tp", "per pool"]),
        ({"plan": {"tp": 0}}, ["plan.tp"]),
        ({"plan": {"decode": {"workers": 0}}}, ["plan.decode.workers"]),
        ({"plan": {"dp": 2}}, ["plan.dp", "unknown key"]),
        (
            {"cluster": {"preset": None, "gpus": None, "pools": [{"preset": "dgx-h100", "nodes": 1}]}},
            ["pools"],
        ),
    ],
)
def test_bad_serving_input_names_the_field(change: dict, words: list[str]) -> None:
    with pytest.raises(ConfigError) as e:
        validate_serving(with_(**change))
    for w in words:
        assert w in str(e.value), str(e.value)


def test_job_and_workload_together_are_refused() -> None:
    with pytest.raises(ConfigError, match="not both"):
        validate_serving(with_(job={"seq_len": 4096, "global_batch": 8}))


def test_the_training_loader_points_a_serving_scenario_to_its_loader() -> None:
    with pytest.raises(ConfigError, match="serving scenario"):
        load_scenario(BASE)


def test_serving_documents_and_their_results_are_recognised() -> None:
    assert is_serving_document(BASE)
    assert is_serving_document({"plan": {}, "predicted": {}, "scenario": BASE, "version": "0"})
    assert not is_serving_document({"model": {}, "cluster": {}, "job": {}})
    assert not is_serving_document([BASE])
