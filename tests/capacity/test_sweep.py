"""``paraplan sweep``: the grid's scenarios, rows streamed and resumed, the same rows from local
worker processes and from Ray (issue 25; Ray is the [ray] extra, installed in CI)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml

from paraplan.capacity.sweep import RESULT_COLUMNS, load_sweep, run_sweep
from paraplan.cli import main
from paraplan.errors import ConfigError

FIXED = {"dp": 2, "tp": 4, "pp": 1, "micro_batch": 1, "zero": 1, "recompute": "none"}
GRID = {
    "base": {
        "model": {"preset": "llama3-8b"},
        "cluster": {"preset": "dgx-h100", "nodes": 1},
        "job": {"seq_len": 4096, "global_batch": 64, "tokens": 1e11},
        "plan": FIXED,
    },
    "grid": {
        "job.global_batch": [32, 64, 128],
        "plan.micro_batch": [1, 2, 4, 3],  # 3 divides no batch: an invalid row, not a failed sweep
        "reliability.restart_s": [60, 600],
    },
}


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return sorted(csv.DictReader(f), key=lambda r: int(r["index"]))


def test_grid_is_the_product(tmp_path: Path) -> None:
    sweep = load_sweep(_write(tmp_path, GRID))
    assert len(sweep) == 3 * 4 * 2
    assert sweep.paths == ["job.global_batch", "plan.micro_batch", "reliability.restart_s"]
    assert sweep.scenarios[0]["job"]["global_batch"] == 32 and sweep.scenarios[0]["plan"]["micro_batch"] == 1
    assert len({sweep.scenario_id(i) for i in range(len(sweep))}) == len(sweep)


def test_a_size_replaces_the_other(tmp_path: Path) -> None:
    sweep = load_sweep(_write(tmp_path, {"base": GRID["base"], "grid": {"cluster.gpus": [8, 16]}}))
    assert sweep.scenarios[1]["cluster"] == {"preset": "dgx-h100", "gpus": 16}


def test_scenarios_list_merged_over_base(tmp_path: Path) -> None:
    data = {"base": GRID["base"], "scenarios": [{"job": {"global_batch": 32}}, {"plan": {"tp": 8}}]}
    sweep = load_sweep(_write(tmp_path, data))
    assert [s["job"]["global_batch"] for s in sweep.scenarios] == [32, 64]
    assert sweep.scenarios[1]["plan"] == {**FIXED, "tp": 8}


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"base": GRID["base"], "grid": {"modle.preset": ["x"]}}, "grid.modle.preset"),
        ({"base": GRID["base"], "grid": {"job.seq_len": []}}, "non-empty list"),
        ({"grid": {"job.seq_len": [1]}}, "give base"),
        ({"base": GRID["base"], "extra": 1}, "unknown key"),
    ],
)
def test_bad_grid(tmp_path: Path, data: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_sweep(_write(tmp_path, data))


def test_rows_and_resume(tmp_path: Path) -> None:
    sweep = load_sweep(_write(tmp_path, GRID))
    out = tmp_path / "out.csv"
    ran, kept, _ = run_sweep(sweep, out, jobs=2, progress=False)
    assert (ran, kept) == (24, 0)
    rows = _rows(out)
    assert [r["status"] for r in rows].count("invalid") == 6  # micro-batch 3
    ok = [r for r in rows if r["status"] == "ok"]
    assert all(float(r["time_to_train_days"]) > 0 and r["dp"] == "2" for r in ok)
    slower = {
        (r["job.global_batch"], r["plan.micro_batch"]): r for r in ok if r["reliability.restart_s"] == "600"
    }
    faster = {
        (r["job.global_batch"], r["plan.micro_batch"]): r for r in ok if r["reliability.restart_s"] == "60"
    }
    assert all(
        float(slower[k]["effective_training_time_ratio"]) < float(faster[k]["effective_training_time_ratio"])
        for k in slower
    )
    # cut the file after 10 rows: the rerun runs only the rest, and the rows are the same
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:11]))
    ran, kept, _ = run_sweep(sweep, out, jobs=2, progress=False)
    assert (ran, kept) == (14, 10)
    assert _rows(out) == rows


def test_cli_sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = {"base": GRID["base"], "grid": {"plan.micro_batch": [1, 2]}}
    out = tmp_path / "r.csv"
    page = tmp_path / "front.html"
    grid = str(_write(tmp_path, data))
    assert main(["sweep", grid, "--out", str(out), "--jobs", "1", "--report", str(page)]) == 0
    assert "2 scenarios run" in capsys.readouterr().out
    html = page.read_text()
    assert "Pareto front" in html and "2 of 2 rows" in html and html.count("<circle") == 2
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({"base": GRID["base"], "grid": {"job.global_batch": [32]}}))
    assert main(["sweep", str(other), "--out", str(out)]) == 1  # another sweep's columns


@pytest.mark.slow
def test_ray_gives_the_same_rows(tmp_path: Path) -> None:
    ray = pytest.importorskip("ray")
    base = {k: v for k, v in GRID["base"].items() if k != "plan"}
    data = {
        "base": base,
        # the second scenario leaves the degrees open: its rows are solved (one CP-SAT worker, a seed)
        "scenarios": [{"plan": FIXED}, {"plan": {"zero": 1, "recompute": "none"}}],
        "grid": {  # 2 x 5 x 5 x 4 = 200 scenarios (issue 25: a 200-scenario sweep in CI)
            "job.global_batch": [32, 64, 128, 256, 512],
            "reliability.restart_s": [60, 300, 600, 900, 1200],
            "reliability.failure_rate_per_gpu_hour": [1e-5, 2e-5, 4e-5, 8e-5],
        },
    }
    sweep = load_sweep(_write(tmp_path, data))
    local, remote = tmp_path / "local.csv", tmp_path / "ray.csv"
    run_sweep(sweep, local, jobs=2, progress=False, time_limit_s=60)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        run_sweep(sweep, remote, ray="local", progress=False, time_limit_s=60)
    finally:
        ray.shutdown()
    a, b = _rows(local), _rows(remote)
    assert len(a) == len(sweep) == 200 and a == b
    assert {r["solver_status"] for r in a if r["status"] == "ok"} >= {"EVALUATED", "OPTIMAL"}
    assert set(RESULT_COLUMNS) <= set(a[0])
