"""Every code block in README.md runs, so the README cannot rot (issue 15).

Blocks are discovered, not listed: each fenced block is a test named after its section.
- ``bash``: each line (``\\`` continuations joined) runs in bash, in a fresh folder holding links
  to the repository's top-level entries, the lines of one block in the same folder. A line must
  exit 0, or the code its comment documents (``exit 4``). ``pip install`` commands are dropped
  from a line: the test runs inside the environment they would build, and installing from a
  test would change it. ``python -m pytest`` is dropped too: it is this test suite.
- ``python``: exec'd in such a folder.
- ``yaml``: parsed; a document with model, cluster and job is loaded as a scenario (and
  evaluated when its plan is fully fixed; with workload instead of job: a serving scenario, loaded
  and built), any other document's sections each validate against
  their scenario schema (e.g. a ``cluster:`` fragment).
- ``text`` blocks of ``paraplan ...`` usage lines: every subcommand and flag they name exists.
Others fail the test: give a block a language this test knows.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SKIPPED_COMMANDS = (
    "pip install",  # the test runs inside the environment these build; never install from a test
    "python -m pytest",  # the test suite itself
)
TIMEOUT_S = 600


class Block(NamedTuple):
    section: str
    lang: str
    text: str
    line: int


def readme_blocks(text: str) -> list[Block]:
    """Every fenced code block with its language, the heading above it and its line number."""
    blocks, section, fence, start, body = [], "top", None, 0, []
    for n, line in enumerate(text.splitlines(), 1):
        if fence is None:
            if line.startswith("#"):
                section = line.lstrip("#").strip()
            m = re.match(r"^```(\w*)\s*$", line)
            if m:
                fence, start, body = m.group(1), n, []
        elif line.startswith("```"):
            blocks.append(Block(section, fence, "\n".join(body), start))
            fence = None
        else:
            body.append(line)
    return blocks


BLOCKS = readme_blocks(README.read_text())


def _id(block: Block) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", block.section.lower()).strip("-")
    return f"{block.lang}-L{block.line}-{slug[:40]}"


def commands(block: str) -> list[str]:
    """The block's command lines, continuations joined, comment-only lines left out."""
    joined = re.sub(r"\\\n\s*", " ", block)
    return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def runnable(line: str) -> str:
    """``line`` without its SKIPPED_COMMANDS (segments of an ``&&`` chain); "" if nothing is left."""
    code = line.split(" #", 1)[0] if " #" in line else line
    parts = [p.strip() for p in code.split("&&")]
    return " && ".join(p for p in parts if p and not p.startswith(SKIPPED_COMMANDS))


def expected_exit(line: str) -> int:
    """The exit code a line's comment documents (``exit 4``), else 0."""
    comment = line.split(" #", 1)[1] if " #" in line else ""
    m = re.search(r"\bexit (\d+)\b", comment)
    return int(m.group(1)) if m else 0


def _workdir(tmp_path: Path) -> Path:
    """A folder that looks like the repository root but keeps what commands write."""
    for entry in ROOT.iterdir():
        if not entry.name.startswith("."):
            (tmp_path / entry.name).symlink_to(entry)
    return tmp_path


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
    }


def test_readme_has_blocks_of_each_kind() -> None:
    kinds = {b.lang for b in BLOCKS}
    assert {"bash", "python", "yaml"} <= kinds
    assert not kinds - {"bash", "python", "yaml", "text"}, "give each README block a known language"


def test_skipping_keeps_the_rest_of_a_chain() -> None:
    assert runnable("pip install -e . && paraplan plan x.yaml") == "paraplan plan x.yaml"
    assert runnable('pip install torch && pip install -e ".[test]" && python -m pytest -q') == ""
    assert expected_exit("paraplan export r.json --to torch  # refuses (exit 4): no cp") == 4


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang == "bash"], ids=_id)
def test_bash_block_runs(block: Block, tmp_path: Path) -> None:
    work = _workdir(tmp_path)
    for line in commands(block.text):
        code = runnable(line)
        if not code:
            continue
        if "paraplan profile" in code:
            pytest.importorskip("torch")
        r = subprocess.run(
            ["bash", "-o", "pipefail", "-c", code],
            cwd=work,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        want = expected_exit(line)
        assert r.returncode == want, (
            f"README line {block.line}: `{code}` exited {r.returncode}, documented {want}\n{r.stderr[-2000:]}"
        )
        if want == 0:
            assert "Traceback" not in r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang == "python"], ids=_id)
def test_python_block_runs(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(_workdir(tmp_path))
    exec(compile(block.text, f"README.md:{block.line}", "exec"), {"__name__": "readme"})  # noqa: S102
    assert capsys.readouterr().out


SCENARIO_SECTIONS = ("model", "cluster", "job")


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang == "yaml"], ids=_id)
def test_yaml_block_loads(block: Block) -> None:
    import paraplan
    from paraplan.instance import REQUIRED_KNOBS, build_instance
    from paraplan.scenario.schema import Scenario

    data = yaml.safe_load(block.text)
    assert isinstance(data, dict) and data, f"README line {block.line}: not a YAML mapping"
    if all(k in data for k in ("model", "cluster", "workload")):  # a serving scenario (issue 23)
        from paraplan.serving import build_serving_instance, load_serving_scenario

        build_serving_instance(load_serving_scenario(data))
        return
    if all(k in data for k in SCENARIO_SECTIONS):
        scenario = paraplan.load_scenario(data)
        build_instance(scenario)
        if all(getattr(scenario.plan, k) is not None for k in REQUIRED_KNOBS):
            assert paraplan.evaluate(scenario).predicted.step_time_s > 0
        return
    fields = Scenario.model_fields
    for key, value in data.items():  # a fragment: each section against its schema
        assert key in fields, f"README line {block.line}: {key!r} is no scenario section"
        fields[key].annotation.model_validate(value)  # type: ignore[union-attr]


def _is_usage(block: Block) -> bool:
    """A ``text`` block whose first line is a paraplan command is a usage synopsis; other text
    blocks are diagrams (README "Architecture") with nothing to run."""
    return block.text.lstrip().startswith("paraplan ")


def test_the_commands_synopsis_is_checked() -> None:
    assert any(_is_usage(b) for b in BLOCKS if b.lang == "text"), "no usage block found"


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang == "text" and _is_usage(b)], ids=_id)
def test_usage_block_names_real_commands_and_flags(block: Block) -> None:
    from paraplan.cli import build_parser

    sub = build_parser()._subparsers._group_actions[0].choices  # noqa: SLF001
    usage = [line for line in block.text.splitlines() if line.strip()]
    command = None
    for line in usage:
        code = line.split("#", 1)[0]
        if code.startswith("paraplan "):
            command = code.split()[1]
            assert command in sub, f"README line {block.line}: no command `paraplan {command}`"
        assert command is not None, f"README line {block.line}: a usage block starts with paraplan"
        options = {o for a in sub[command]._actions for o in a.option_strings}  # noqa: SLF001
        for flag in re.findall(r"(?<![\w-])--[a-z][a-z-]*", code):
            assert flag in options, f"README line {block.line}: `paraplan {command}` has no {flag}"
