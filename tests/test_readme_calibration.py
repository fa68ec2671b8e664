"""The README's "Calibrating to your cluster" commands run as written (from the repository root)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SECTION = "### Calibrating to your cluster"


def _blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text[text.index(SECTION) :]
    section = section[: section.index("\n### ", len(SECTION))]
    return re.findall(r"```bash\n(.*?)```", section, flags=re.S)


def _run(block: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_readme_calibration_blocks_exist() -> None:
    blocks = _blocks()
    assert len(blocks) == 2 and "paraplan calibrate" in blocks[0] and "paraplan profile" in blocks[1]


def test_readme_calibrate_and_evaluate_run(tmp_path: Path) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    r = _run(_blocks()[0], tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "h100-bf16.yaml").exists()
    # the numbers the README quotes
    assert "gemm_bf16 0.5752 -> 0.6114, attention 0.5085 -> 0.1755" in r.stdout
    assert "1.077 s" in r.stdout


@pytest.mark.torch
def test_readme_profile_runs(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    r = _run(_blocks()[1], tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "cpu-smoke.yaml").exists()
