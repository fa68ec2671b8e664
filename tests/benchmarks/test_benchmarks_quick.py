"""Smoke test of the benchmark suite: ``python -m benchmarks --quick`` completes and writes its files.

It asserts what the run produces (files, columns, report sections), never its timings.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TABLES = ("scenarios.csv", "calibration.csv", "sweeps.csv")
PLOTS = (
    "scaling_gpus.png",
    "scaling_layers.png",
    "scaling_space.png",
    "fidelity.png",
    "memory.png",
    "baselines.png",
)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    pytest.importorskip("matplotlib", reason="the [bench] extra provides matplotlib")
    out = tmp_path_factory.mktemp("bench")
    r = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    return out, r.stdout


@pytest.mark.slow
def test_quick_suite_writes_every_file(quick_run: tuple[Path, str]) -> None:
    out, _ = quick_run
    for name in (*TABLES, "results.json", "report.md", *PLOTS):
        path = out / name
        assert path.is_file() and path.stat().st_size > 0, f"{name} missing or empty"
    for name in PLOTS:
        assert (out / name).read_bytes()[:8] == PNG_MAGIC, f"{name} is not a PNG"


@pytest.mark.slow
def test_quick_suite_tables_have_rows_for_every_method(quick_run: tuple[Path, str]) -> None:
    out, _ = quick_run
    with (out / "scenarios.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {r["method"] for r in rows} == {
        "paraplan",
        "uniform",
        "fixed_placement",
        "rule_of_thumb",
        "exhaustive",
    }
    with (out / "calibration.csv").open() as f:
        calibration = list(csv.DictReader(f))
    assert len(calibration) >= 100  # every supported published run gets a fidelity row
    compared = [r for r in calibration if r["published_over_paraplan_target"]]
    assert compared and all(r["target"] for r in compared)  # same-framework comparison ran
    with (out / "sweeps.csv").open() as f:
        assert {r["sweep"] for r in csv.DictReader(f)} == {"gpus", "layers", "space"}
    data = json.loads((out / "results.json").read_text())
    assert {"config", "machine", "scenarios", "calibration", "sweeps", "findings"} <= data.keys()


@pytest.mark.slow
def test_quick_report_names_date_machine_and_sections(quick_run: tuple[Path, str]) -> None:
    out, stdout = quick_run
    report = (out / "report.md").read_text()
    assert "**Run**: 20" in report and "**Machine**:" in report
    for section in (
        "## Headline",
        "## 1. Scenarios and baselines",
        "## 2. Published expert configurations",
        "## 3. Scaling of planning time",
        "## 4. Fidelity",
        "## 5. Memory",
        "## 6. Findings",
    ):
        assert section in report
    for name in PLOTS:
        assert f"]({name})" in report
    assert "scenario" in stdout and "paraplan" in report
