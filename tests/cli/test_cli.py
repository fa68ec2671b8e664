"""The command line: readable by default, one JSON object with --json, exit codes, no tracebacks."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from paraplan.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "llama3-70b-h100.yaml"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "paraplan.cli", *args], capture_output=True, text=True, cwd=ROOT, timeout=300
    )


def test_allowed_flags_are_the_documented_ones() -> None:
    # adding a flag means updating this list (STYLE.md Sec. 6)
    parser = build_parser()
    sub = parser._subparsers._group_actions[0].choices  # noqa: SLF001
    flags = {
        name: sorted(o for a in p._actions for o in a.option_strings)  # noqa: SLF001
        for name, p in sub.items()
    }
    assert flags == {
        "evaluate": ["--calibration", "--debug", "--help", "--json", "--report", "-h"],
        "plan": [
            "--calibration",
            "--debug",
            "--export",
            "--help",
            "--json",
            "--more-headroom",
            "--out",
            "--report",
            "--seed",
            "--target",
            "--time-limit",
            "--top",
            "--verbose",
            "--workers",
            "-h",
        ],
        "export": ["--debug", "--help", "--out", "--to", "-h"],
        "calibrate": ["--debug", "--help", "--out", "-h"],
        "profile": ["--debug", "--help", "--out", "--processes", "-h"],
        "presets": ["--debug", "--help", "--json", "-h"],
        "sweep": [
            "--debug",
            "--help",
            "--jobs",
            "--out",
            "--ray",
            "--report",
            "--seed",
            "--time-limit",
            "-h",
        ],
    }


def test_evaluate_json_is_one_object() -> None:
    r = run("evaluate", str(EXAMPLE), "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["plan"]["tp"] == 4 and data["predicted"]["step_time_s"] > 0


def test_evaluate_human_table() -> None:
    r = run("evaluate", str(EXAMPLE))
    assert r.returncode == 0
    assert "step" in r.stdout and "memory" in r.stdout and "stage" in r.stdout


def test_bad_input_exits_one_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "model: {preset: llama9}\ncluster: {preset: dgx-h100, nodes: 1}\n"
        "job: {seq_len: 10, global_batch: 3}\n"
    )
    r = run("evaluate", str(bad))
    assert r.returncode == 1
    assert "llama9" in r.stderr and "Traceback" not in r.stderr
    r = run("plan", str(tmp_path / "missing.yaml"))
    assert r.returncode == 1 and "cannot read scenario file" in r.stderr


def test_plan_prints_plan_explanation_and_proof() -> None:
    r = run("plan", str(ROOT / "examples" / "llama3-8b-h100.yaml"), "--time-limit", "60")
    assert r.returncode == 0, r.stderr
    assert "OPTIMAL" in r.stdout and "why this plan" in r.stdout
    assert r.stderr == ""  # piped: no progress
    r = run("plan", str(ROOT / "examples" / "llama3-8b-h100.yaml"), "--time-limit", "60", "--verbose")
    assert r.returncode == 0, r.stderr
    incumbents = [line for line in r.stderr.splitlines() if " best " in line]
    assert incumbents and all(" bound " in line and " gap " in line for line in incumbents)


def test_plan_on_a_terminal_shows_one_progress_line() -> None:
    """Issue 26: on a TTY the progress is one line rewritten in place (\\r), cleared before the
    plan, not a log of incumbents."""
    import os
    import pty

    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "paraplan.cli", "plan", str(ROOT / "examples" / "llama3-8b-h100.yaml")],
        stdout=secondary,
        stderr=secondary,
        stdin=subprocess.DEVNULL,
        cwd=ROOT,
    )
    os.close(secondary)
    chunks = []
    while True:
        try:
            data = os.read(primary, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(primary)
    assert proc.wait(timeout=300) == 0
    out = b"".join(chunks).decode()
    progress, plan = out.rsplit("\r\x1b[K", 1)  # the last rewrite clears the line
    assert progress.count("\r\x1b[K") >= 2 and " best " in progress and " gap " in progress
    assert "\n" not in progress and "OPTIMAL" in plan
    assert not re.search(r"best [\d.]+ s +bound [\d.]+ s +gap", plan)  # no incumbent log


def test_plan_json_has_solver_section() -> None:
    r = run("plan", str(ROOT / "examples" / "llama3-8b-h100.yaml"), "--json", "--top", "3")
    data = json.loads(r.stdout)
    assert set(data["solver"]) >= {"status", "wall_s", "objective_s", "bound_s", "gap"}
    assert data["solver"]["status"] == "OPTIMAL"
    assert len(data["alternatives"]) == 2
    # the order is the solver's (objective ticks); a re-scored step may differ by the rounding
    steps = [data["solver"]["objective_s"]] + [a["step_time_s"] for a in data["alternatives"]]
    assert steps == sorted(steps)


@pytest.mark.parametrize("nodes", [1])
def test_infeasible_exits_two_with_a_reason(tmp_path: Path, nodes: int) -> None:
    f = tmp_path / "big.yaml"
    f.write_text(
        f"model: {{preset: llama3.1-405b}}\ncluster: {{preset: dgx-a100-40gb, "
        f"nodes: {nodes}}}\njob: {{seq_len: 8192, global_batch: 8}}\n"
    )
    r = run("plan", str(f))
    assert r.returncode == 2
    assert "least any plan needs" in r.stderr and "GiB" in r.stderr
