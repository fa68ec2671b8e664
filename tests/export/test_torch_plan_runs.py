"""The PyTorch-native export runs under torchrun on CPU/gloo and matches a reference.

Each launch renders ``torch_plan.py`` for one plan, runs it with
``python -m torch.distributed.run --standalone --nproc_per_node N script --check`` and
reads the JSON line rank 0 prints after comparing loss, every gradient and every
SGD-updated parameter with a single-process float64 reference (frameworks.md §7).
Launches cost about 20 s (4 processes) and 40 s (8 processes) on 2 CPU cores, mostly
importing torch in every process.
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from paraplan.export.torch_plan import render_torch_plan  # noqa: E402

pytestmark = pytest.mark.torch

REPO_ROOT = Path(__file__).resolve().parents[2]
LAUNCH_TIMEOUT_S = 300
CHECK_TOLERANCE = 1e-6  # the script's own threshold; asserted again here

BASE_PLAN = {
    "dp": 1,
    "tp": 1,
    "pp": 1,
    "vp": 1,
    "micro_batch": 1,
    "global_batch": 8,
    "seq_len": 16,
    "zero": 0,
    "sequence_parallel": False,
    "recompute": "none",
    "layers_per_stage": None,
    "num_layers": 2,
}


def _plan(**overrides: object) -> dict:
    """BASE_PLAN with some knobs changed."""
    return {**BASE_PLAN, **overrides}


def _worker_env() -> dict[str, str]:
    """Environment for launched scripts: one thread per process, quiet warnings."""
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONWARNINGS"] = "ignore"
    return env


def _check_result(proc: subprocess.CompletedProcess) -> dict:
    """The ``{"check": ...}`` JSON line printed by rank 0."""
    for line in proc.stdout.splitlines():
        if line.startswith('{"check"'):
            return json.loads(line)
    tail = (proc.stdout + proc.stderr)[-4000:]
    raise AssertionError(f"no check line (rc={proc.returncode}):\n{tail}")


def _launch_check(tmp_path: Path, **plan: object) -> dict:
    """Render the plan, run it under torchrun with --check, return rank 0's result."""
    script = tmp_path / "torch_plan.py"
    script.write_text(render_torch_plan(**_plan(**plan)), encoding="utf-8")
    num_devices = plan.get("dp", 1) * plan.get("tp", 1) * plan.get("pp", 1)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={num_devices}",
        str(script),
        "--check",
    ]
    proc = subprocess.run(
        cmd,
        cwd=tmp_path,
        env=_worker_env(),
        capture_output=True,
        text=True,
        timeout=LAUNCH_TIMEOUT_S,
        check=False,
    )
    result = _check_result(proc)
    assert proc.returncode == 0, (result, proc.stderr[-4000:])
    return result


def _assert_matches_reference(result: dict) -> None:
    """Loss, gradients and updated parameters equal the single-process reference."""
    assert result["check"] == "ok", result
    assert result["mismatched_names"] == []
    assert result["loss"] == pytest.approx(result["ref_loss"], rel=CHECK_TOLERANCE)
    assert result["max_rel_grad_diff"] <= CHECK_TOLERANCE
    assert result["max_rel_param_diff"] <= CHECK_TOLERANCE


def test_render_compiles_and_states_degrees() -> None:
    src = render_torch_plan(**_plan(dp=2, tp=2, pp=2, vp=2, zero=3, num_layers=4, sequence_parallel=True))
    compile(src, "torch_plan.py", "exec")
    for line in ("DP = 2", "TP = 2", "PP = 2", "VP = 2", "ZERO = 3", "NUM_MICRO_BATCHES = 4"):
        assert f"\n{line}\n" in src
    assert "LAYERS_PER_STAGE = [1, 1, 1, 1]" in src
    assert "--nproc_per_node=8" in src


def test_render_does_not_import_torch() -> None:
    code = (
        "import sys\n"
        "from paraplan.export.torch_plan import render_torch_plan\n"
        f"render_torch_plan(**{BASE_PLAN!r})\n"
        "assert 'torch' not in sys.modules, 'rendering imported torch'\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)


def test_embedded_model_is_the_reference_module() -> None:
    from paraplan.export import reference_model

    namespace: dict = {"__name__": "torch_plan"}
    exec(compile(render_torch_plan(**BASE_PLAN), "torch_plan.py", "exec"), namespace)
    args = reference_model.ModelArgs(num_layers=2)
    torch.manual_seed(0)
    expected = reference_model.Transformer(args)
    torch.manual_seed(0)
    embedded = namespace["Transformer"](namespace["ModelArgs"](num_layers=2))
    tokens = torch.randint(0, args.vocab_size, (2, 8))
    torch.testing.assert_close(embedded(tokens), expected(tokens), rtol=0, atol=0)


def test_uneven_split_fills_middle_stages_as_the_cost_model_does() -> None:
    src = render_torch_plan(**_plan(pp=2, vp=2, num_layers=6))
    assert "\nLAYERS_PER_STAGE = [1, 2, 2, 1]\n" in src


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"dp": 2, "global_batch": 7}, r"global_batch=7 must be divisible by micro_batch \* dp"),
        ({"pp": 4, "global_batch": 2, "num_layers": 4}, r"Schedule1F1B needs num_micro_batches"),
        (
            {"pp": 4, "vp": 2, "global_batch": 9, "num_layers": 8},
            r"ScheduleInterleaved1F1B needs num_micro_batches % max\(1",
        ),
        ({"vp": 2}, r"vp=2 needs pp > 1"),
        ({"pp": 2, "layers_per_stage": [1, 2]}, r"sums to 3 but must sum to num_layers=2"),
        ({"pp": 2, "vp": 2, "num_layers": 4, "layers_per_stage": [2, 2]}, r"pp \* vp = 4"),
        ({"zero": 4}, r"zero=4"),
        ({"recompute": "block"}, r"recompute='block'"),
        ({"tp": 4, "seq_len": 6, "sequence_parallel": True}, r"seq_len=6 must be divisible"),
        ({"dp": 0}, r"dp=0 must be an integer >= 1"),
    ],
)
def test_invalid_plan_raises_value_error_naming_the_rule(overrides: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        render_torch_plan(**_plan(**overrides))


def test_check_fails_when_gradients_differ(tmp_path: Path) -> None:
    """Regression guard: --check must exit non-zero on a wrong gradient."""
    src = render_torch_plan(**BASE_PLAN)
    marker = "    rt.optimizer.step()\n"
    assert src.count(marker) == 1
    sabotage = "    rt.parts[0].lm_head.weight.grad.mul_(1.01)\n"
    script = tmp_path / "torch_plan.py"
    script.write_text(src.replace(marker, sabotage + marker), encoding="utf-8")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = _worker_env() | {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }
    proc = subprocess.run(
        [sys.executable, str(script), "--check"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=LAUNCH_TIMEOUT_S,
        check=False,
    )
    result = _check_result(proc)
    assert proc.returncode != 0
    assert result["check"] == "fail"
    assert result["max_rel_grad_diff"] == pytest.approx(0.01, rel=1e-6)


def test_dp2_tp2_sequence_parallel_zero3_matches_reference(tmp_path: Path) -> None:
    # 2 micro-batches per dp rank (gradient accumulation), selective recompute.
    result = _launch_check(
        tmp_path,
        dp=2,
        tp=2,
        sequence_parallel=True,
        zero=3,
        micro_batch=2,
        recompute="selective",
    )
    _assert_matches_reference(result)


def test_pp2_dp2_1f1b_full_recompute_uneven_stages_matches_reference(tmp_path: Path) -> None:
    # zero=0: replicated params, gradients all-reduced over dp by the script.
    result = _launch_check(
        tmp_path,
        pp=2,
        dp=2,
        zero=0,
        recompute="full",
        num_layers=3,
        layers_per_stage=[1, 2],
    )
    _assert_matches_reference(result)


def test_pp2_dp2_tp2_interleaved_vp2_matches_reference(tmp_path: Path) -> None:
    # 8 processes; 4 virtual stages; FSDP2 without resharding (zero=1) + SP.
    result = _launch_check(
        tmp_path,
        pp=2,
        dp=2,
        tp=2,
        vp=2,
        zero=1,
        sequence_parallel=True,
        num_layers=4,
    )
    _assert_matches_reference(result)
