"""job.allocator: expandable_segments in every training export's launch environment, as
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (rules/launch_env.py); MaxText (JAX) refuses it
by name. The rendered outputs are read, as a user would run them."""

from __future__ import annotations

import json
import shlex
from functools import cache

import pytest
from paraplan.rules.launch_env import ALLOC_CONF_VAR, PYTORCH_FRAMEWORKS

import paraplan
from paraplan.errors import ExportError
from paraplan.export import export_text
from paraplan.result import Result

SETTING = f"{ALLOC_CONF_VAR}=expandable_segments:True"
PLAN = {"dp": 8, "tp": 2, "pp": 1, "micro_batch": 1, "zero": 1, "recompute": "selective"}
# torchtitan and the torch script shard with FSDP2 (ZeRO-3)
PLANS = {
    "torchtitan": {**PLAN, "zero": 3},
    "torch": {**PLAN, "tp": 1, "dp": 2, "zero": 3},
    "deepspeed": {**PLAN, "recompute": "full", "sequence_parallel": False},
}


@cache
def _result(allocator: str, target: str) -> Result:
    plan = PLANS.get(target, PLAN)
    gpus = plan["dp"] * plan["tp"] * plan["pp"]
    return paraplan.evaluate(
        {
            "model": {"preset": "llama3.1-8b"},
            "cluster": {"preset": "dgx-h100", "gpus": gpus},
            "job": {"seq_len": 4096, "global_batch": 64, "precision": "bf16", "allocator": allocator},
            "plan": plan,
        }
    )


def _text(allocator: str, target: str) -> str:
    return export_text(_result(allocator, target), target)


def _exported_before_launch(script: str, launcher: str) -> bool:
    """The script exports the setting on a line of its own before the launcher's line."""
    lines = script.splitlines()
    launch = next(i for i, line in enumerate(lines) if line.startswith(launcher))
    return f"export {SETTING}" in lines[:launch]


@pytest.mark.parametrize("target", ["megatron", "torchtitan"])
def test_launch_scripts_export_the_setting_before_torchrun(target: str) -> None:
    script = _text("expandable_segments", target)
    assert _exported_before_launch(script, "torchrun")
    assert ALLOC_CONF_VAR not in _text("default", target)


def test_nemo_script_says_to_launch_with_the_setting() -> None:
    text = _text("expandable_segments", "nemo")
    assert f"Launch with {SETTING} in the environment" in text
    assert f"executor.env_vars[{ALLOC_CONF_VAR!r}] = 'expandable_segments:True'" in text
    assert ALLOC_CONF_VAR not in _text("default", "nemo")


def test_torch_script_run_line_carries_the_setting() -> None:
    run = next(line for line in _text("expandable_segments", "torch").splitlines() if "run: " in line)
    words = shlex.split(run.split("run: ", 1)[1].split(";")[0])
    assert words[:2] == [SETTING, "torchrun"]
    assert ALLOC_CONF_VAR not in _text("default", "torch")


def test_deepspeed_config_carries_the_launch_env_and_its_deepspeed_env_line() -> None:
    config = json.loads(_text("expandable_segments", "deepspeed"))
    header = config["_paraplan"]
    assert header["launch_env"] == {ALLOC_CONF_VAR: "expandable_segments:True"}
    assert header["deepspeed_env"] == [SETTING]
    assert "launch_env" not in json.loads(_text("default", "deepspeed"))["_paraplan"]


def test_maxtext_refuses_it_by_name() -> None:
    with pytest.raises(ExportError) as err:
        _text("expandable_segments", "maxtext")
    message = str(err.value)
    assert "job.allocator=expandable_segments" in message and ALLOC_CONF_VAR in message
    assert "JAX" in message
    assert "maxtext" not in PYTORCH_FRAMEWORKS
