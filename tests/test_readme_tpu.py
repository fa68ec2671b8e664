"""The README's "TPU slices" command runs as written, plans to proven optimality and exports a
maxtext.yml for a TPU slice (issue 14)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SECTION = "### TPU slices"


def _block() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index(SECTION) :]
    section = section[: section.index("\n## ", len(SECTION))]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1
    return blocks[0]


def test_readme_tpu_block_plans_and_exports(tmp_path: Path) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    run = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", _block()],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    result = json.loads((tmp_path / "tpu.json").read_text())
    assert result["solver"]["status"] == "OPTIMAL"
    assert result["plan"]["num_devices"] == 512
    config = yaml.safe_load(run.stdout)
    assert config["hardware"] == "tpu" and config["num_slices"] == 1
    assert "--tpu-type=v5p-1024" in run.stdout
