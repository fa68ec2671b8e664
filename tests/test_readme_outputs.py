"""The README shows what the program prints (issue 26): every ``text`` block that follows a
``<!-- output of: COMMAND -->`` line is COMMAND's standard output, as it is now.

A block line may hold ``...``: it stands for any text (wall-clock times, layout counts that vary
with the machine). Everything else must match exactly, line for line. When a change moves the
output on purpose, print the new block with

    python -m tests.test_readme_outputs            # prints each command's current output
    python -m tests.test_readme_outputs --write    # rewrites the README blocks, keeping the ``...``

and read the diff before committing it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MARK = re.compile(r"^<!-- output of: (?P<cmd>.+?) -->\s*$")
TIMEOUT_S = 600


class Shown(NamedTuple):
    command: str
    lines: list[str]
    start: int  # index of the block's first body line in the README's lines
    end: int  # index of its closing fence


def shown_outputs(text: str) -> list[Shown]:
    """Each marked output block: its command, its body lines and where they sit."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        m = MARK.match(line)
        if not m:
            continue
        if i + 1 >= len(lines) or lines[i + 1].strip() != "```text":
            raise AssertionError(f"README line {i + 1}: an output mark must be followed by a ```text block")
        end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
        out.append(Shown(m.group("cmd"), lines[i + 2 : end], i + 2, end))
    return out


def line_matches(shown: str, printed: str) -> bool:
    """``printed`` is ``shown`` with each ``...`` standing for any text."""
    pattern = ".*".join(re.escape(part) for part in shown.split("..."))
    return re.fullmatch(pattern, printed) is not None


def mismatches(shown: list[str], printed: list[str]) -> list[str]:
    """Human-readable differences; empty when the block says what the command prints."""
    diffs = [
        f"line {n + 1}:\n  README:  {a}\n  printed: {b}"
        for n, (a, b) in enumerate(zip(shown, printed, strict=False))
        if not line_matches(a.rstrip(), b.rstrip())
    ]
    if len(shown) != len(printed):
        diffs.append(f"README shows {len(shown)} lines, the command prints {len(printed)}")
    return diffs


def run_command(command: str) -> list[str]:
    """The command's standard output, run from the repository root with this interpreter's tools."""
    bindir = Path(sys.executable).parent
    r = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command],
        cwd=ROOT,
        env={"PATH": f"{bindir}:/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(Path.home())},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert r.returncode == 0, f"`{command}` exited {r.returncode}\n{r.stderr[-2000:]}"
    return r.stdout.rstrip("\n").splitlines()


def keep_wildcards(shown: list[str], printed: list[str]) -> list[str]:
    """``printed``, but lines the README already matches keep their ``...`` form."""
    return [
        a if i < len(shown) and line_matches((a := shown[i]).rstrip(), b.rstrip()) else b
        for i, b in enumerate(printed)
    ]


SHOWN = shown_outputs(README.read_text())


def test_readme_marks_its_outputs() -> None:
    assert SHOWN, "the quick start shows what `paraplan plan` prints"
    assert line_matches("OPTIMAL ... wall (2 workers)", "OPTIMAL gap 0% 5.9 s wall (2 workers)")
    assert not line_matches("runs on: megatron", "runs on: torchtitan")
    assert mismatches(["a", "b ... c"], ["a", "b 1.2 s c"]) == []
    assert len(mismatches(["a"], ["a", "b"])) == 1


@pytest.mark.slow
@pytest.mark.parametrize("shown", SHOWN, ids=[s.command for s in SHOWN])
def test_readme_output_is_what_the_command_prints(shown: Shown) -> None:
    diffs = mismatches(shown.lines, run_command(shown.command))
    assert not diffs, (
        f"README's output of `{shown.command}` is stale (python -m tests.test_readme_outputs --write):\n"
        + "\n".join(diffs[:10])
    )


def main(argv: list[str]) -> None:
    text = README.read_text()
    lines = text.splitlines()
    for s in reversed(SHOWN):
        new = keep_wildcards(s.lines, run_command(s.command))
        if "--write" in argv:
            lines[s.start : s.end] = new
        else:
            print(f"$ {s.command}\n" + "\n".join(new) + "\n")
    if "--write" in argv:
        README.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
