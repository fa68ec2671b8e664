"""Applying a calibration profile: API, scenario key, CLI; the cost model sees only Efficiency."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from paraplan.hardware import apply_calibration, build_pooled_cluster, efficiency, profile_from_dict
from paraplan.hardware.calibration import profile_to_dict

import paraplan
from paraplan.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = {
    "model": {"preset": "llama3-8b"},
    "cluster": {"preset": "dgx-h100", "nodes": 1},
    "job": {"seq_len": 8192, "global_batch": 64, "precision": "bf16"},
    "plan": {"dp": 8, "tp": 1, "pp": 1, "micro_batch": 1, "zero": 1, "recompute": "none"},
}
SLOW_HOPPER = {
    "accelerators": {"hopper": {"parameters": {"gemm_bf16": 0.3}, "not_determined": ["attention"]}}
}


def _write(path: Path, data: object) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def test_profile_replaces_only_the_fitted_parameters() -> None:
    profile = profile_from_dict(SLOW_HOPPER)
    cluster = paraplan.instance.build_instance(paraplan.load_scenario(SCENARIO), profile).cluster
    catalog = efficiency("hopper")
    assert cluster.efficiency == replace(catalog, gemm_bf16=0.3)


def test_api_and_scenario_key_apply_the_profile(tmp_path: Path) -> None:
    profile = _write(tmp_path / "p.yaml", SLOW_HOPPER)
    base = paraplan.evaluate(SCENARIO).predicted.step_time_s
    by_path = paraplan.evaluate(SCENARIO, calibration=profile).predicted.step_time_s
    by_object = paraplan.evaluate(SCENARIO, calibration=profile_from_dict(SLOW_HOPPER))
    assert by_path > base * 1.2  # GEMMs at 0.3 instead of the catalog 0.495
    assert by_object.predicted.step_time_s == by_path
    # the scenario key, relative to the scenario file
    (tmp_path / "sub").mkdir()
    _write(tmp_path / "sub" / "p.yaml", SLOW_HOPPER)
    scenario = _write(tmp_path / "sub" / "s.yaml", {**SCENARIO, "calibration": "p.yaml"})
    assert paraplan.evaluate(scenario).predicted.step_time_s == by_path
    free = {**SCENARIO, "plan": {}}
    planned = paraplan.solve(free, time_limit_s=20, workers=1, calibration=profile)
    uncalibrated = paraplan.solve(free, time_limit_s=20, workers=1)
    assert planned.solver.objective_s == pytest.approx(planned.predicted.step_time_s, rel=1e-3)
    assert planned.predicted.step_time_s > uncalibrated.predicted.step_time_s * 1.2


def test_profile_round_trips() -> None:
    profile = profile_from_dict(SLOW_HOPPER)
    assert profile_from_dict(profile_to_dict(profile)) == profile


@pytest.mark.parametrize(
    ("profile", "field"),
    [
        (
            {"accelerators": {"hopper": {"parameters": {"gemm_fp9": 0.5}}}},
            "accelerators.hopper.parameters.gemm_fp9: unknown parameter",
        ),
        (
            {"accelerators": {"hopper": {"parameters": {"gemm_bf16": -0.5}}}},
            "accelerators.hopper.parameters.gemm_bf16=-0.5 is outside the plausible range",
        ),
        (
            {"accelerators": {"hopper": {"parameters": {"kernel_overhead_us": -3}}}},
            "accelerators.hopper.parameters.kernel_overhead_us=-3",
        ),
        (
            {"accelerators": {"hopper": {"parameters": {"attention": "fast"}}}},
            "accelerators.hopper.parameters.attention='fast' must be a number",
        ),
        ({"accelerators": {"hopper": {"gemm_bf16": 0.5}}}, "accelerators.hopper.gemm_bf16: unknown key"),
        ({"accelerators": {}}, "accelerators must map at least one"),
        ({"accelerators": {"hopper": {"parameters": {}}}, "format": "other/2"}, "format='other/2'"),
    ],
)
def test_bad_profiles_are_config_errors_naming_the_field(tmp_path: Path, profile: dict, field: str) -> None:
    path = _write(tmp_path / "bad.yaml", profile)
    with pytest.raises(ConfigError) as err:
        paraplan.evaluate(SCENARIO, calibration=path)
    assert field in str(err.value)


def test_profile_for_another_accelerator_or_a_cpu_is_refused(tmp_path: Path) -> None:
    ampere = _write(tmp_path / "a.yaml", {"accelerators": {"ampere": {"parameters": {}}}})
    with pytest.raises(ConfigError, match="covers ampere, not this cluster's h100 \\(hopper\\)"):
        paraplan.evaluate(SCENARIO, calibration=ampere)
    cpu = _write(tmp_path / "c.yaml", {"accelerators": {"cpu": {"parameters": {}, "smoke_test": True}}})
    with pytest.raises(ConfigError, match="CPU smoke-test entry and is never applied"):
        paraplan.evaluate(SCENARIO, calibration=cpu)


def test_pooled_cluster_calibrates_the_pools_the_profile_covers() -> None:
    cluster = build_pooled_cluster(
        [{"preset": "dgx-h100", "nodes": 1}, {"preset": "dgx-a100-80gb", "nodes": 1}]
    )
    out = apply_calibration(cluster, profile_from_dict(SLOW_HOPPER))
    assert out.pools[0].efficiency.gemm_bf16 == 0.3
    assert out.pools[1].efficiency == efficiency("ampere")


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "paraplan.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def test_cli_calibrate_then_evaluate_with_the_profile(tmp_path: Path) -> None:
    out = tmp_path / "h100-bf16.yaml"
    r = _cli("calibrate", str(ROOT / "examples" / "calibration" / "mosaic-h100-bf16.yaml"), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "hopper: gemm_bf16 0.5752 ->" in r.stdout and "not determined" in r.stdout
    scenario = str(ROOT / "examples" / "calibration" / "mpt-7b-128xh100.yaml")
    r = _cli("evaluate", scenario, "--calibration", str(out), "--json")
    assert r.returncode == 0, r.stderr
    assert '"step_time_s"' in r.stdout


def test_cli_bad_records_and_profiles_exit_one(tmp_path: Path) -> None:
    records = _write(tmp_path / "r.yaml", [SCENARIO])
    r = _cli("calibrate", str(records), "--out", str(tmp_path / "p.yaml"))
    assert r.returncode == 1 and "records[0]" in r.stderr and "Traceback" not in r.stderr
    bad = _write(tmp_path / "bad.yaml", {"accelerators": {"hopper": {"parameters": {"x": 1}}}})
    scenario = _write(tmp_path / "s.yaml", SCENARIO)
    r = _cli("evaluate", str(scenario), "--calibration", str(bad))
    assert r.returncode == 1 and "parameters.x: unknown parameter" in r.stderr
