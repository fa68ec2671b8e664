"""``python -m benchmarks --quick`` writes to a git-ignored scratch folder unless --out is given,
so a smoke run never overwrites the committed results (issue 15)."""

import subprocess
from pathlib import Path

from benchmarks.__main__ import DEFAULT_OUT, QUICK_OUT, _args

ROOT = Path(__file__).resolve().parents[2]


def test_quick_defaults_to_the_scratch_folder_and_full_runs_to_the_results() -> None:
    assert _args(["--quick"]).out == QUICK_OUT
    assert _args([]).out == DEFAULT_OUT
    assert _args(["--quick", "--out", "elsewhere"]).out == Path("elsewhere")


def test_the_scratch_folder_is_ignored_by_git() -> None:
    r = subprocess.run(["git", "check-ignore", "-q", str(QUICK_OUT / "report.md")], cwd=ROOT)
    assert r.returncode == 0
