"""``python -m benchmarks.fidelity [CSV] [--kind moe|dense] [--out FILE.csv]`` (issue 22, item 3).

A small file of rows copied from the calibration file (in its order): a dense run with a step
time (316, Megatron-Bridge Llama 3 8B on 8 GB300), a MoE run published only as TFLOP/s per GPU
under Megatron-LM's count (2061, DeepSeek-V3 on 256 GB200), a MoE run with a step time (2074,
Qwen3-30B-A3B on 16 H100) and a row without a global batch (2081, skipped).
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.calibration_set import CSV_PATH
from benchmarks.fidelity import OUT_HEADER, main

ROOT = Path(__file__).resolve().parents[2]
ROWS = ("316", "2074", "2061", "2081")


@pytest.fixture(scope="module")
def runs_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    with CSV_PATH.open() as f:
        reader = csv.DictReader(f)
        fields = reader.fieldnames
        rows = [r for r in reader if r["row_id"] in ROWS]
    assert fields is not None and len(rows) == len(ROWS)
    path = tmp_path_factory.mktemp("runs") / "new_runs.csv"
    with path.open("w", newline="") as f:
        out = csv.DictWriter(f, fieldnames=fields)
        out.writeheader()
        out.writerows(rows)
    return path


def _read(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open() as f:
        lines = list(csv.reader(f))
    return lines[0], [dict(zip(lines[0], line, strict=True)) for line in lines[1:]]


def test_the_cli_scores_any_file_and_writes_one_line_per_scored_row(runs_csv: Path, tmp_path: Path) -> None:
    out = tmp_path / "scored.csv"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.fidelity", str(runs_csv), "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    header, rows = _read(out)
    assert header == list(OUT_HEADER) == "row,source,label,published_s,predicted_s,err,fits".split(",")
    assert [r["row"] for r in rows] == ["316", "2061", "2074"]  # file order; 2081: no global batch
    by_row = {r["row"]: r for r in rows}
    assert by_row["2074"]["source"] == "mbridge_skill_qwen3_30b_h100"
    assert by_row["2074"]["label"] == "mbridge_skill_qwen3_30b_h100:Qwen3-30B-A3B"
    assert float(by_row["2074"]["published_s"]) == pytest.approx(24.7138)
    # the TFLOP/s row: Megatron-LM's count of DeepSeek-V3 (61 layers, no MTP in its layout) at
    # gbs 2048 x 4096 tokens over 494.46 TFLOP/s x 256 GPUs (about 16.6 s)
    assert float(by_row["2061"]["published_s"]) == pytest.approx(16.55, rel=2e-3)
    for r in rows:
        assert float(r["err"]) == pytest.approx(
            float(r["predicted_s"]) / float(r["published_s"]) - 1, abs=1e-5
        )
        assert r["fits"] in ("yes", "no")
    lines = done.stdout.strip().splitlines()
    assert lines[-1].startswith("paraplan:      3 runs, median |err|")
    per_source = [
        line.split()[0]
        for line in lines
        if line.split()[:1] and line.split()[0] in {r["source"] for r in rows}
    ]
    assert per_source == ["megatron_bridge_perf", "mcore_dsv3_gb200_guide", "mbridge_skill_qwen3_30b_h100"]
    assert "1 global batch not published" in done.stdout


def test_kind_keeps_the_moe_or_the_dense_rows(
    runs_csv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    moe, dense = tmp_path / "moe.csv", tmp_path / "dense.csv"
    assert main([str(runs_csv), "--kind", "moe", "--out", str(moe)]) == 0
    assert [r["row"] for r in _read(moe)[1]] == ["2061", "2074"]
    assert main([str(runs_csv), "--kind", "dense", "--out", str(dense)]) == 0
    assert [r["row"] for r in _read(dense)[1]] == ["316"]
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("paraplan:      1 runs")
