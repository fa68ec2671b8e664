"""The README's "Train vs serve" section prints what the program prints (issue 23 item 6): its
two commands run, every line of its output block is a line of their output, and the Python
block's comment is what it prints."""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## Train vs serve"


def _section() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index(SECTION) :]
    return section[: section.index("\n## ", len(SECTION))]


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", _section(), flags=re.S)


@pytest.mark.slow
def test_train_vs_serve_output_is_what_the_commands_print() -> None:
    (commands,) = _blocks("bash")
    (shown,) = _blocks("text")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    printed = []
    for line in commands.strip().splitlines():
        run = subprocess.run(line.split(), cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr
        printed += run.stdout.splitlines()
    for line in shown.splitlines():
        if line.strip():
            assert line in printed, f"README shows a line the program does not print: {line!r}"


def test_train_vs_serve_python_prints_its_comment(monkeypatch: pytest.MonkeyPatch) -> None:
    (code,) = _blocks("python")
    want = [ln.removeprefix("# ") for ln in code.splitlines() if ln.startswith("# ")]
    monkeypatch.chdir(ROOT)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md:train-vs-serve", "exec"), {"__name__": "readme"})  # noqa: S102
    assert out.getvalue().splitlines() == want
