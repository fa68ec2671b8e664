"""The Python 3.12 interpreter with megatron-core 0.19.2 (Megatron-LM's own ``megatron.training``)
that .ci/run builds, and one JSON round trip through a check script run in it: the oracle tests
of the Megatron-LM export, its layer layout and Megatron's FLOP count share it.

The interpreter: $PARAPLAN_MEGATRON_LM_PYTHON, else ``.venv-megatron-lm/bin/python`` in the
repository; a test that needs it is skipped without it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]

__all__ = ["megatron_lm_python", "run_in_megatron_lm"]


def megatron_lm_python() -> str | None:
    """The interpreter's path, or None when there is none."""
    path = os.environ.get("PARAPLAN_MEGATRON_LM_PYTHON") or str(ROOT / ".venv-megatron-lm" / "bin" / "python")
    return path if Path(path).exists() else None


def run_in_megatron_lm(script: Path, cases: Any, timeout_s: int) -> Any:
    """Run ``script`` in the interpreter with ``cases`` as JSON on stdin; the JSON of its last
    stdout line. Skips the calling test when there is no interpreter; fails on a non-zero exit."""
    python = megatron_lm_python()
    if python is None:
        pytest.skip(
            "no Python 3.12 with megatron-core 0.19.2 (set PARAPLAN_MEGATRON_LM_PYTHON "
            "or build .venv-megatron-lm as .ci/run does)"
        )
    done = subprocess.run(
        [python, str(script)],
        input=json.dumps(cases),
        text=True,
        capture_output=True,
        timeout=timeout_s,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
