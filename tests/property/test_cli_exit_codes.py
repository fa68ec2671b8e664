"""The CLI's exit codes and error output (issue 16, item 3): 0 plan, 1 invalid input or usage,
2 proven infeasible, 3 no plan within the time limit, 4 export refused; strict JSON on stdout;
no traceback on stderr for malformed input. Each case is a subprocess (slow): few of them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SMALL = {
    "model": {"layers": 4, "hidden": 256, "ffn_hidden": 1024, "heads": 4, "vocab": 1000},
    "cluster": {"preset": "dgx-h100", "gpus": 8},
    "job": {"seq_len": 1024, "global_batch": 16},
}


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "paraplan.cli", *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def _strict_json(text: str) -> dict:
    def refuse(name: str) -> None:
        raise ValueError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def _write(tmp_path: Path, doc: dict | str | bytes, name: str = "s.yaml") -> str:
    path = tmp_path / name
    if isinstance(doc, bytes):
        path.write_bytes(doc)
    else:
        path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return str(path)


def _clean_error(r: subprocess.CompletedProcess, code: int) -> None:
    assert r.returncode == code, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    assert r.stderr.strip(), "an error must say what is wrong"


def test_plan_exits_zero_with_strict_json_that_exports(tmp_path: Path) -> None:
    r = _cli("plan", _write(tmp_path, SMALL), "--json", "--time-limit", "10", "--workers", "1")
    assert r.returncode == 0, r.stderr
    data = _strict_json(r.stdout)
    assert data["solver"]["status"] == "OPTIMAL"
    result = tmp_path / "r.json"
    result.write_text(r.stdout)
    r = _cli("export", str(result), "--to", "trace")
    assert r.returncode == 0, r.stderr
    _strict_json(r.stdout)


@pytest.mark.parametrize(
    "doc",
    [
        "model: {preset: llama3-8b\ncluster: [",  # broken YAML
        "- just\n- a list\n",
        {**SMALL, "job": {"seq_len": 1024, "global_batch": 16, "bogus": 1}},
        {**SMALL, "plan": {"tp": "four"}},
    ],
)
def test_malformed_input_exits_one_without_traceback(tmp_path: Path, doc: dict | str) -> None:
    _clean_error(_cli("plan", _write(tmp_path, doc), "--time-limit", "5"), 1)


def test_infeasible_exits_two(tmp_path: Path) -> None:
    doc = {
        "model": {"preset": "llama3.1-405b"},
        "cluster": {"preset": "dgx-a100-40gb", "gpus": 1},
        "job": {"seq_len": 8192, "global_batch": 8},
    }
    _clean_error(_cli("plan", _write(tmp_path, doc), "--time-limit", "5"), 2)


def test_export_refused_exits_four(tmp_path: Path) -> None:
    doc = {
        **SMALL,
        "plan": {"dp": 2, "tp": 2, "pp": 2, "micro_batch": 1, "zero": 1, "recompute": ["full", "none"]},
    }
    r = _cli("evaluate", _write(tmp_path, doc), "--json")
    assert r.returncode == 0, r.stderr
    result = tmp_path / "r.json"
    result.write_text(r.stdout)
    _clean_error(_cli("export", str(result), "--to", "deepspeed"), 4)


def test_no_plan_in_time_exits_three(tmp_path: Path) -> None:
    doc = {
        "model": {"preset": "llama3-70b"},
        "cluster": {"preset": "dgx-h100", "nodes": 8},
        "job": {"seq_len": 8192, "global_batch": 128},
    }
    _clean_error(_cli("plan", _write(tmp_path, doc), "--time-limit", "1e-6"), 3)


def test_usage_error_exits_one(tmp_path: Path) -> None:
    _clean_error(_cli("plan", _write(tmp_path, SMALL), "--no-such-flag"), 1)


def test_nan_time_limit_exits_one(tmp_path: Path) -> None:
    _clean_error(_cli("plan", _write(tmp_path, SMALL), "--time-limit", "nan", "--json"), 1)


def test_binary_scenario_exits_one_without_traceback(tmp_path: Path) -> None:
    _clean_error(_cli("plan", _write(tmp_path, bytes(range(256)) * 4), "--time-limit", "5"), 1)
