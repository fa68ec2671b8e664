"""Fit AIConfigurator's measured GEMM tables: the serving GEMM rates (hardware/data/serving.yaml).

    python -m benchmarks.serving_kernels AIC_DATA [--backend trtllm]

``AIC_DATA`` is the ``systems/data`` folder of an unpacked ``aiconfigurator-core==0.12.0`` wheel
(``pip download --no-deps aiconfigurator-core==0.12.0`` and unzip it; no GPU, nothing installed).
Each ``<gpu>/gemm/<backend>/<version>/gemm_perf.parquet`` holds the measured latency of the
framework's own linear layer for m 1-16384 and n, k 1024-65536 (AIConfigurator's SILICON
database). For each part and precision four numbers are fitted by least mean |log error| over
every GEMM with n, k >= 1024 (Nelder-Mead in log space):

    t = fixed + max(2 m n k / (peak compute), (k n w_B + (m k + m n) 2) / (HBM stream))
        + act_bytes m k / HBM

with the part's peaks and bandwidth from hardware/data/catalog.yaml. Its ``compute`` column is
hardware/data/serving.yaml ``gemm_kernel_rates`` (2026-12-02, fifth session; the other three
numbers are not used: docs/serving_model.md Sec. 6.0, and Sec. 6 for the earlier try). Prints
one line per part and precision with the rows and the median |log error| of the fit. Needs
pyarrow and scipy (not paraplan dependencies: ``pip install pyarrow scipy``). Kernel
measurements: no serving calibration row enters the fit.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import yaml

__all__ = ["PARTS", "DTYPES", "WEIGHT_BYTES", "fit_kernel", "main"]

PARTS = {
    "b200_sxm": "b200",
    "gb200": "gb200",
    "b300_sxm": "b300",
    "gb300": "gb300",
    "h100_sxm": "h100",
    "h200_sxm": "h200",
    "a100_sxm": "a100-80gb",
    "l40s": "l40s",
    "rtx_pro_6000_server": "rtx-pro-6000",
}
"""AIConfigurator system folder -> catalog key."""

DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8_blockwise", "nvfp4": "nvfp4"}
"""AIConfigurator gemm_dtype -> paraplan precision."""

WEIGHT_BYTES = {"bf16": 2.0, "fp8": 1.0, "fp8_blockwise": 1.0 + 4.0 / 128 / 128, "nvfp4": 0.5 + 1.0 / 16}
"""Stored bytes per weight with the format's scales (cost/kv.py WEIGHT_BYTES)."""


def fit_kernel(
    m: np.ndarray, n: np.ndarray, k: np.ndarray, t_s: np.ndarray, peak: float, hbm: float, w_b: float
) -> tuple[dict[str, float], float]:
    """The four kernel numbers minimising the mean |log(predicted / measured)|, and the median
    |log error| of the fit."""
    from scipy.optimize import minimize

    def predict(x: np.ndarray) -> np.ndarray:
        compute, stream, fixed_us, act = np.exp(x)
        flops = 2.0 * m * n * k / (peak * compute)
        moved = (n * k * w_b + (m * k + m * n) * 2.0) / (hbm * stream)
        return np.asarray(fixed_us * 1e-6 + np.maximum(flops, moved) + act * m * k / hbm)

    def objective(x: np.ndarray) -> float:
        return float(np.mean(np.abs(np.log(predict(x) / t_s))))

    x0 = np.log([0.6, 0.8, 5.0, 0.5])
    options = {"maxiter": 3000, "xatol": 1e-4, "fatol": 1e-6}
    res = minimize(objective, x0, method="Nelder-Mead", options=options)
    compute, stream, fixed_us, act = (float(v) for v in np.exp(res.x))
    err = float(np.median(np.abs(np.log(predict(res.x) / t_s))))
    return {"compute": compute, "stream": stream, "fixed_us": fixed_us, "act_bytes": act}, err


def _catalog() -> dict[str, Any]:
    path = Path(__file__).resolve().parents[1] / "hardware" / "data" / "catalog.yaml"
    return dict(yaml.safe_load(path.read_text())["accelerators"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Fit AIConfigurator's measured GEMM tables")
    ap.add_argument("aic_data", type=Path, help="aiconfigurator_core/systems/data of the 0.12.0 wheel")
    ap.add_argument("--backend", default="trtllm")
    args = ap.parse_args(argv)
    import pyarrow.parquet as pq

    parts = _catalog()
    for folder, key in PARTS.items():
        tables = sorted((args.aic_data / folder / "gemm" / args.backend).glob("*/gemm_perf.parquet"))
        if not tables:
            continue
        table = pq.read_table(tables[-1]).to_pydict()
        part = parts[key]
        for dtype in dict.fromkeys(table["gemm_dtype"]):
            prec = DTYPES.get(dtype)
            if prec is None or prec not in part["peak_tflops"]:
                continue
            rows = [
                i
                for i, d in enumerate(table["gemm_dtype"])
                if d == dtype and table["n"][i] >= 1024 and table["k"][i] >= 1024 and table["m"][i] <= 16384
            ]
            m, n, k = (np.array([float(table[c][i]) for i in rows]) for c in ("m", "n", "k"))
            t_s = np.array([table["latency"][i] * 1e-3 for i in rows])  # ms in the table
            peak = float(part["peak_tflops"][prec]) * 1e12
            hbm = float(part["hbm_TBps"]) * 1e12
            got, err = fit_kernel(m, n, k, t_s, peak, hbm, WEIGHT_BYTES[prec])
            print(
                f"{key:13s} {prec:14s} {tables[-1].parent.name}: compute {got['compute']:.3f}, "
                f"stream {got['stream']:.3f}, fixed_us {got['fixed_us']:.1f}, act_bytes "
                f"{got['act_bytes']:.2f} ({len(rows)} GEMMs, median |log err| {err:.3f})"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
