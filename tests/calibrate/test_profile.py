"""``paraplan profile`` microbenchmarks and how ``paraplan calibrate`` fits them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from paraplan.hardware import accelerator

from paraplan.calibration.calibrate import calibrate
from paraplan.calibration.microfit import line_fit
from paraplan.calibration.profile import accelerator_for_device

ROOT = Path(__file__).resolve().parents[2]


def test_device_names_map_to_catalog_accelerators() -> None:
    assert accelerator_for_device("NVIDIA H100 80GB HBM3") == "h100"
    assert accelerator_for_device("NVIDIA A100-SXM4-80GB") == "a100-80gb"
    assert accelerator_for_device("NVIDIA A100-SXM4-40GB") == "a100-40gb"
    assert accelerator_for_device("NVIDIA GB200") == "gb200"
    assert accelerator_for_device("NVIDIA B200") == "b200"
    assert accelerator_for_device("NVIDIA GeForce RTX 4090") is None


def test_line_fit_recovers_slope_and_intercept() -> None:
    # t = 2e-12 * x + 5e-6
    xs = [1e9, 4e9, 1.6e10]
    slope, intercept = line_fit(xs, [2e-12 * x + 5e-6 for x in xs])
    assert slope == pytest.approx(2e-12) and intercept == pytest.approx(5e-6)


def test_gpu_microbenchmarks_give_efficiencies_against_the_catalog_peaks() -> None:
    # synthetic H100 records: GEMMs at 0.7 of the BF16 peak plus 10 us per kernel, attention at
    # 0.45 in the cost model's form (0.45 * L / (L + 512) over L keys: cost/compute.py), copies at
    # 0.85 of HBM bandwidth (t = flops / (peak * eff) + overhead)
    h100 = accelerator("h100")
    base = {"device": "NVIDIA H100 80GB HBM3", "accelerator": "h100", "smoke_test": False}
    records = []
    for n in (1024, 2048, 4096, 8192):
        flops = 2.0 * n**3
        records.append(
            {
                **base,
                "kind": "gemm",
                "precision": "bf16",
                "m": n,
                "n": n,
                "k": n,
                "flops": flops,
                "time_s": flops / (h100.peak_for("bf16") * 0.7) + 10e-6,
            }
        )
        att = 4.0 * 16 * n * n * 128 / 2
        records.append(
            {
                **base,
                "kind": "attention",
                "precision": "bf16",
                "seq_len": n,
                "flops": att,
                "time_s": att / (h100.peak_for("bf16") * 0.45 * n / (n + 512)),
            }
        )
    records.append({**base, "kind": "hbm_copy", "bytes": 2e9, "time_s": 2e9 / (h100.hbm_bytes_per_s * 0.85)})
    entry = calibrate(records).accelerators["h100"]
    assert entry.parameters == pytest.approx(
        {"gemm_bf16": 0.7, "kernel_overhead_us": 10.0, "attention": 0.45, "hbm": 0.85}, rel=1e-3
    )
    assert not entry.is_smoke_test and "gemm_fp8" in entry.not_determined


@pytest.mark.torch
def test_profile_on_cpu_gloo_feeds_calibrate(tmp_path: Path) -> None:
    pytest.importorskip("torch")

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "paraplan.cli", *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300,
        )

    r = cli("profile", "--out", str(tmp_path / "prof"))
    assert r.returncode == 0, r.stderr
    assert "only a smoke test" in r.stderr and "CPU smoke test" in r.stdout
    lines = [json.loads(x) for x in (tmp_path / "prof" / "records.jsonl").read_text().splitlines()]
    kinds = {x["kind"] for x in lines}
    assert {"gemm", "attention", "hbm_copy", "collective"} <= kinds
    ops = {x["op"] for x in lines if x["kind"] == "collective"}
    assert {"all_reduce", "all_gather", "send_recv"} <= ops
    assert all(x["smoke_test"] and x["time_s"] > 0 for x in lines)

    r = cli("calibrate", str(tmp_path / "prof" / "records.jsonl"), "--out", str(tmp_path / "p.yaml"))
    assert r.returncode == 0, r.stderr
    assert "CPU smoke test, never applied" in r.stdout
    profile = yaml.safe_load((tmp_path / "p.yaml").read_text())
    cpu = profile["accelerators"]["cpu"]
    assert cpu["smoke_test"] and cpu["parameters"] == {}
    assert cpu["microbenchmarks"]["gemm_bf16"]["flops_per_s"] > 0
    r = cli("evaluate", "examples/llama3-70b-h100.yaml", "--calibration", str(tmp_path / "p.yaml"))
    assert r.returncode == 1 and "never applied" in r.stderr
