"""Bad input gets a one-paragraph error naming the field and the rule, from the API."""

from __future__ import annotations

from pathlib import Path

import pytest

import paraplan
from paraplan import ConfigError

BASE = {
    "model": {"preset": "llama3-8b"},
    "cluster": {"preset": "dgx-h100", "nodes": 1},
    "job": {"seq_len": 4096, "global_batch": 32},
    "plan": {"dp": 8, "tp": 1, "pp": 1, "micro_batch": 1, "zero": 1, "recompute": "none"},
}


def _with(section: str, **kw: object) -> dict:
    out = {k: dict(v) for k, v in BASE.items()}
    out[section].update(kw)
    return out


@pytest.mark.parametrize(
    ("scenario", "pattern"),
    [
        (_with("cluster", foo=1), r"cluster\.foo: unknown key"),
        (_with("job", seq_len="long"), r"job\.seq_len: .*integer"),
        (_with("model", preset="llama9"), r"model\.preset='llama9' is not a known preset"),
        (_with("cluster", preset="dgx-z900"), r"cluster\.preset='dgx-z900' is not a known preset"),
        (_with("plan", dp=4), r"dp\*tp\*pp\*cp = 4\*1\*1\*1 = 4 must equal the cluster's 8 devices"),
        (
            {**_with("plan", tp=3, dp=8), "cluster": {"preset": "dgx-h100", "gpus": 24}},
            r"plan\.tp=3 must divide model heads=32",
        ),
        (_with("plan", micro_batch=3), r"global_batch=32 must be divisible by plan\.micro_batch\*dp"),
        (_with("job", precision="fp4"), r"job\.precision"),
        (_with("cluster", nodes=0), r"cluster\.nodes: .*greater than or equal to 1"),
        (
            {"model": {"preset": "llama3-8b", "layers": 3}, "cluster": BASE["cluster"], "job": BASE["job"]},
            r"exactly one of model\.preset, model\.hf_config or explicit fields",
        ),
    ],
)
def test_bad_input_names_field_and_rule(scenario: dict, pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern):
        paraplan.evaluate(scenario)


def test_a100_has_no_fp8_tensor_cores() -> None:
    s = _with("cluster", preset="dgx-a100-80gb")
    s["job"]["precision"] = "fp8"
    with pytest.raises(ConfigError, match="fp8.*not supported by NVIDIA A100"):
        paraplan.evaluate(s)


def test_missing_knobs_are_each_named() -> None:
    s = _with("plan")
    s["plan"] = {"tp": 1}
    with pytest.raises(
        ConfigError,
        match=r"plan\.dp, plan\.pp, plan\.micro_batch, plan\.zero, "
        r"plan\.recompute",
    ):
        paraplan.evaluate(s)


def test_yaml_is_loaded_safely(tmp_path: Path) -> None:
    f = tmp_path / "evil.yaml"
    f.write_text("model: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        paraplan.load_scenario(f)


def test_json_and_yaml_and_dict_agree(tmp_path: Path) -> None:
    import json

    import yaml

    (tmp_path / "s.json").write_text(json.dumps(BASE))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(BASE))
    a = paraplan.evaluate(BASE).predicted.step_time_s
    assert paraplan.evaluate(tmp_path / "s.json").predicted.step_time_s == a
    assert paraplan.evaluate(str(tmp_path / "s.yaml")).predicted.step_time_s == a


def test_hf_config_path_is_relative_to_the_scenario(tmp_path: Path) -> None:
    import shutil

    src = Path(__file__).resolve().parents[1] / "graph" / "data" / "hf" / "llama3-8b.json"
    shutil.copy(src, tmp_path / "config.json")
    s = _with("model")
    s["model"] = {"hf_config": "config.json"}
    import yaml

    (tmp_path / "s.yaml").write_text(yaml.safe_dump(s))
    assert paraplan.evaluate(tmp_path / "s.yaml").predicted.step_time_s == pytest.approx(
        paraplan.evaluate(BASE).predicted.step_time_s
    )


def test_explicit_model_fields() -> None:
    s = _with("model")
    s["model"] = {
        "layers": 32,
        "hidden": 4096,
        "ffn_hidden": 14336,
        "heads": 32,
        "kv_heads": 8,
        "vocab": 128256,
        "activation": "swiglu",
    }
    assert paraplan.evaluate(s).predicted.step_time_s == pytest.approx(
        paraplan.evaluate(BASE).predicted.step_time_s
    )


def test_result_json_has_the_contract_keys() -> None:
    r = paraplan.evaluate(BASE).model_dump(mode="json")
    assert {
        "dp",
        "tp",
        "pp",
        "cp",
        "ep",
        "vp",
        "micro_batch",
        "grad_accum",
        "zero",
        "sequence_parallel",
        "recompute",
        "layers_per_stage",
    } <= set(r["plan"])
    assert {
        "step_time_s",
        "tokens_per_s_per_gpu",
        "model_flops_per_token",
        "model_tflops_per_gpu",
        "mfu",
        "peak_memory_bytes",
        "memory_capacity_bytes",
        "compute_s",
        "bubble_s",
        "exposed_comm_s",
    } <= set(r["predicted"])
    assert paraplan.Result.model_validate(r) == paraplan.evaluate(BASE)
