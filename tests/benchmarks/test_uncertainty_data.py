"""hardware/data/uncertainty.yaml is what `python -m benchmarks.uncertainty` computes today: after
any change to the cost model or the calibration rows, regenerate it (that command)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
import yaml

from benchmarks.fidelity import fidelity_rows
from benchmarks.memory_fidelity import memory_rows
from benchmarks.uncertainty import band_table, main, memory_band

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_band_matches_the_calibration_residuals() -> None:
    fresh = band_table(fidelity_rows())
    text = resources.files("paraplan.hardware").joinpath("data/uncertainty.yaml").read_text()
    shipped = yaml.safe_load(text)
    assert shipped["generations"] == fresh["generations"], (
        "hardware/data/uncertainty.yaml is stale: run `python -m benchmarks.uncertainty`"
    )
    assert shipped["pooled"] == fresh["pooled"]


def test_shipped_memory_band_matches_the_memory_residuals() -> None:
    """The memory band (solver.memory_headroom's default) is today's memory_fidelity readings'."""
    text = resources.files("paraplan.hardware").joinpath("data/uncertainty.yaml").read_text()
    assert yaml.safe_load(text)["memory"] == memory_band(memory_rows()[0]), (
        "hardware/data/uncertainty.yaml's memory band is stale: run `python -m benchmarks.uncertainty`"
    )


def test_uncertainty_script_writes_a_loadable_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "uncertainty.yaml"
    assert main(["--out", str(out)]) == 0
    data = yaml.safe_load(out.read_text())
    assert set(data) >= {"date", "calibration_rows", "min_rows", "pooled", "generations", "memory"}
    assert "hopper" in capsys.readouterr().out


def test_the_package_does_not_import_benchmarks() -> None:
    for folder in ("paraplan", "hardware", "cost", "solver", "graph"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text()
            assert "import benchmarks" not in text and "from benchmarks" not in text, path
