"""MaxText's own pyconfig loads paraplan's maxtext.yml with the mesh the plan chose (issue 14).

MaxText 0.2.5 needs Python >= 3.12, the project's interpreter is 3.11: the check runs
tests/export/maxtext_pyconfig_check.py in the interpreter PARAPLAN_MAXTEXT_PYTHON names (a 3.12
virtual environment with jax[cpu], flax, orbax-checkpoint and maxtext; .ci/run builds it).
Skipped when the variable is unset.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from paraplan.cost import Axis

import paraplan
from paraplan.export import context, export_text
from paraplan.export.maxtext import MESH_AXIS, mesh_split, slices

PYTHON = os.environ.get("PARAPLAN_MAXTEXT_PYTHON")
CHECK = Path(__file__).with_name("maxtext_pyconfig_check.py")
ROOT = Path(__file__).parents[2]

pytestmark = [pytest.mark.oracle, pytest.mark.skipif(not PYTHON, reason="PARAPLAN_MAXTEXT_PYTHON is not set")]

TPU_SCENARIOS = [
    "examples/llama3-70b-v5p-1024.yaml",
    "benchmarks/scenarios/llama3.1-405b-tpu-2xv5p-1024-s8k-b1024.yaml",
]


def _load_in_maxtext(text: str, devices: int, num_slices: int, tmp_path: Path) -> dict:
    path = tmp_path / "maxtext.yml"
    path.write_text(text)
    run = subprocess.run(
        [PYTHON, str(CHECK), str(path), str(devices), str(num_slices)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def _expected(res) -> dict[str, tuple[int, int]]:
    ctx = context(res)
    per_slice, num, _ = slices(ctx)
    split = mesh_split(ctx.plan, per_slice, num)
    names = {**MESH_AXIS, Axis.DP: "fsdp" if ctx.plan.zero == 3 else "data"}
    return {("expert" if a == "expert" else names[a]): v for a, v in split.items()}


@pytest.mark.parametrize("scenario", TPU_SCENARIOS)
def test_tpu_plans_load_in_maxtext_with_their_mesh(scenario: str, tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / scenario).read_text())
    data.pop("bench", None)
    data["solver"] = {"target": "maxtext"}
    res = paraplan.solve(data, time_limit_s=60, workers=2)
    assert res.solver.status == "OPTIMAL"
    cluster = context(res).cluster
    loaded = _load_in_maxtext(
        export_text(res, "maxtext"), cluster.num_devices, cluster.torus.num_slices, tmp_path
    )
    assert loaded["hardware"] == "tpu"
    for axis, (ici, dcn) in _expected(res).items():
        assert (loaded["ici"][axis], loaded["dcn"][axis]) == (ici, dcn), axis
    assert loaded["global_batch"] == data["job"]["global_batch"]
    assert loaded["max_target_length"] == data["job"]["seq_len"]


def test_gpu_plans_load_in_maxtext_as_gpu(tmp_path: Path) -> None:
    scenario = {
        "model": {"preset": "llama3-8b"},
        "cluster": {"preset": "dgx-h100", "nodes": 2},
        "job": {"seq_len": 4096, "global_batch": 64},
        "plan": {"dp": 8, "tp": 2, "pp": 1, "micro_batch": 2, "zero": 3, "recompute": "full"},
    }
    res = paraplan.evaluate(scenario)
    loaded = _load_in_maxtext(export_text(res, "maxtext"), 16, 2, tmp_path)
    assert loaded["hardware"] == "gpu"
    assert (loaded["ici"]["tensor"], loaded["ici"]["fsdp"], loaded["dcn"]["fsdp"]) == (2, 4, 2)
    assert loaded["global_batch"] == 64 and loaded["gradient_accumulation_steps"] == 4


def test_the_check_runs_in_another_interpreter() -> None:
    out = subprocess.run(
        [PYTHON, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() != str(sys.version_info[:2])


# Issue 15: at least 15 diverse plans per target pass the framework's own validation. Each is the
# fastest plan MaxText runs (solver.target: maxtext) on a benchmark scenario: TPU slices and GPU
# nodes, ZeRO 1 and 3 (data vs fsdp), tensor, context, expert and pipeline axes, interleaving.
MAXTEXT_PLANS = [
    "llama3-8b-tpu-v5e-256-s8k-b256",
    "mixtral-8x22b-tpu-v5p-512-s4k-b512",
    "gpt-oss-120b-h100-64-s8k-b256",
    "mixtral-8x7b-h100-64-s4k-b512",
    "qwen3-30b-a3b-h100-16-s4k-b512",
    "llama3-70b-h100-64-s8k-b128",
    "llama3-8b-h100-64-s128k-b64",
    "llama3-70b-b200-128-s8k-b256",
    "gpt3-175b-h100-512-s2k-b1536",
    "llama2-13b-b200-32-s4k-b512",
    "llama3-70b-h100-256-s8k-b512",
    "llama3.1-8b-h100-16-s32k-b64",
    "llama2-70b-h100-64-s4k-b128",
    "gpt3-1.3b-h100-8-s32k-b32",
    "llama3-70b-gb200-64-s8k-b128",
]


@pytest.mark.slow
@pytest.mark.parametrize("name", MAXTEXT_PLANS)
def test_maxtext_plans_load_with_the_planned_mesh(name: str, tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "benchmarks" / "scenarios" / f"{name}.yaml").read_text())
    data.pop("bench", None)
    data["solver"] = {**data.get("solver", {}), "target": "maxtext"}
    res = paraplan.solve(data, time_limit_s=60, workers=2)
    ctx = context(res)
    per_slice, num, _ = slices(ctx)
    loaded = _load_in_maxtext(export_text(res, "maxtext"), per_slice * num, num, tmp_path)
    assert loaded["hardware"] == ("tpu" if ctx.cluster.torus is not None else "gpu")
    for axis, (ici, dcn) in _expected(res).items():
        assert (loaded["ici"][axis], loaded["dcn"][axis]) == (ici, dcn), axis
    assert loaded["global_batch"] == data["job"]["global_batch"]
    if res.plan.pp == 1:
        assert loaded["gradient_accumulation_steps"] == res.plan.grad_accum
    else:  # the pipeline's micro-batches carry the accumulation
        assert loaded["num_pipeline_microbatches"] == res.plan.grad_accum
    assert loaded["max_target_length"] == data["job"]["seq_len"]


def test_the_maxtext_plans_are_diverse() -> None:
    assert len(MAXTEXT_PLANS) >= 15
