"""The Python interpreters with the serving engines' own argument parsers (vLLM 0.33.0, SGLang
0.5.23) that .ci/run builds, and one JSON round trip through a check script run in one of them.

The interpreters: $PARAPLAN_VLLM_PYTHON / $PARAPLAN_SGLANG_PYTHON, else ``.venv-vllm/bin/python`` /
``.venv-sglang/bin/python`` in the repository. A test that needs one is skipped without it, unless
PARAPLAN_REQUIRE_SERVING_PARSERS=1 (CI sets it), where a missing interpreter fails the test.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]

__all__ = ["engine_python", "run_in_engine"]

_ENV = {"vllm": "PARAPLAN_VLLM_PYTHON", "sglang": "PARAPLAN_SGLANG_PYTHON"}
_VENV = {"vllm": ".venv-vllm", "sglang": ".venv-sglang"}


def engine_python(engine: str) -> str | None:
    """The interpreter's path for ``engine``, or None when there is none."""
    path = os.environ.get(_ENV[engine]) or str(ROOT / _VENV[engine] / "bin" / "python")
    return path if Path(path).exists() else None


def run_in_engine(engine: str, script: Path, cases: Any, timeout_s: int) -> Any:
    """Run ``script`` in ``engine``'s interpreter with ``cases`` as JSON on stdin; the JSON of its
    last stdout line. Skips (fails under PARAPLAN_REQUIRE_SERVING_PARSERS=1) without the
    interpreter; fails on a non-zero exit."""
    python = engine_python(engine)
    if python is None:
        why = (
            f"no interpreter with {engine}'s parser (set {_ENV[engine]} or build {_VENV[engine]} "
            "as .ci/run does)"
        )
        if os.environ.get("PARAPLAN_REQUIRE_SERVING_PARSERS") == "1":
            pytest.fail(f"PARAPLAN_REQUIRE_SERVING_PARSERS=1 but {why}")
        pytest.skip(why)
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [python, str(script)],
        input=json.dumps(cases),
        text=True,
        capture_output=True,
        timeout=timeout_s,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
