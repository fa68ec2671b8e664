"""``paraplan calibrate``'s fit: recovers known parameters, stays plausible on few runs, and a
profile fitted on part of a family's published runs lowers the error on the rest."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest
from paraplan.hardware.calibration import PLAUSIBLE_RANGE
from paraplan.hardware.efficiency import catalog_parameters

import paraplan
from benchmarks.calibration_set import load_cases
from benchmarks.fidelity import evaluate_case
from paraplan.calibration.calibrate import FitCase, calibrate, fit_cases, fit_generation, predict_s
from paraplan.instance import build_instance, fixed_plan

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_RECORDS = ROOT / "examples" / "calibration" / "mosaic-h100-bf16.yaml"
HELDOUT_RECORDS = ROOT / "tests" / "data" / "mosaic-h100-bf16-heldout.yaml"


def _case(scenario: dict, measured_s: float = 1.0, name: str = "case") -> FitCase:
    inst = build_instance(paraplan.load_scenario(scenario))
    return FitCase(name=name, instance=inst, plan=fixed_plan(inst), measured_s=measured_s)


def _scenario(preset: str, seq_len: int, global_batch: int, plan: dict) -> dict:
    return {
        "model": {"preset": preset},
        "cluster": {"preset": "dgx-h100", "nodes": 1},
        "job": {"seq_len": seq_len, "global_batch": global_batch, "precision": "bf16"},
        "plan": {"pp": 1, "zero": 1, "recompute": "full", **plan},
    }


SYNTHETIC = [  # 8 H100, BF16: short to long sequences so GEMM and attention both show
    _scenario("llama3-8b", 2048, 64, {"dp": 8, "tp": 1, "micro_batch": 2}),
    _scenario("llama3-8b", 8192, 32, {"dp": 4, "tp": 2, "micro_batch": 1}),
    _scenario("llama3-8b", 32768, 8, {"dp": 2, "tp": 4, "micro_batch": 1}),
    _scenario("llama3-8b", 16384, 16, {"dp": 8, "tp": 1, "micro_batch": 1}),
    _scenario("llama3-70b", 4096, 32, {"dp": 1, "tp": 8, "micro_batch": 1}),
    _scenario("llama3-70b", 16384, 8, {"dp": 1, "tp": 8, "micro_batch": 1}),
    _scenario("llama3-8b", 65536, 8, {"dp": 1, "tp": 8, "micro_batch": 1}),
    _scenario("llama3-8b", 4096, 128, {"dp": 8, "tp": 1, "micro_batch": 4}),
    _scenario("llama3-8b", 131072, 8, {"dp": 1, "tp": 8, "micro_batch": 1}),
    _scenario("llama3-70b", 32768, 4, {"dp": 1, "tp": 8, "micro_batch": 1}),
    _scenario("llama3-8b", 32768, 16, {"dp": 8, "tp": 1, "micro_batch": 1}),
]


def test_fit_recovers_known_parameters_from_synthetic_steps() -> None:
    truth = {**catalog_parameters("hopper"), "gemm_bf16": 0.50, "attention": 0.55}
    cases = [_case(sc) for sc in SYNTHETIC]
    noise = [0.01, -0.01, 0.005, -0.005, 0.01, -0.01, 0.0, 0.005, -0.01, 0.01, 0.0]  # +-1%
    measured = [
        FitCase(
            name=f"synthetic {i}", instance=c.instance, plan=c.plan, measured_s=predict_s(c, truth) * (1 + n)
        )
        for i, (c, n) in enumerate(zip(cases, noise, strict=True))
    ]
    fit = fit_generation(measured)
    assert {"gemm_bf16", "attention"} <= set(fit.parameters)
    for name in ("gemm_bf16", "attention"):
        assert fit.parameters[name] == pytest.approx(truth[name], rel=0.05), name
    assert "gemm_fp8" in fit.not_determined  # no FP8 record sees it
    # +-1% noise; the prior toward the catalog values leaves up to ~3% (2026-12-01: 3.0%)
    assert max(abs(e) for e in fit.errors_after) < 0.035


def test_three_runs_give_plausible_efficiencies_and_name_the_undetermined() -> None:
    # three runs measured 3x slower than the catalog predicts: the fit moves to the bound at most,
    # never to an absurd value, and says what three short-sequence runs cannot determine
    cases = [_case(sc) for sc in SYNTHETIC[:2] + SYNTHETIC[4:5]]
    slow = [
        FitCase(
            name=c.name,
            instance=c.instance,
            plan=c.plan,
            measured_s=3.0 * predict_s(c, catalog_parameters("hopper")),
        )
        for c in cases
    ]
    fit = fit_generation(slow)
    for name, value in fit.parameters.items():
        lo, hi = PLAUSIBLE_RANGE[name]
        assert lo <= value <= hi, (name, value)
    assert {"gemm_fp8", "moe_layer_overhead_us"} <= set(fit.not_determined)
    assert fit.loss_after < fit.loss_before


def _calibration_case(case) -> FitCase:
    """A calibration-set row with its recompute fixed as benchmarks/fidelity.py chooses it."""
    row = evaluate_case(case)
    scenario = {**case.scenario, "plan": {**case.scenario["plan"], "recompute": row.recompute}}
    return _case(scenario, case.published_step_s, f"row {case.row_id}")


def _median_abs_error(cases: list[FitCase], params: dict) -> float:
    return statistics.median(abs(predict_s(c, params) / c.measured_s - 1) for c in cases)


def test_half_of_one_source_lowers_the_error_on_its_other_half() -> None:
    # Narayanan et al. 2021 Table 1 (10 A100 runs of the project's calibration set): fit on every
    # other run, score the rest; both ways round
    cases = [_calibration_case(c) for c in load_cases()[0] if c.source_key == "narayanan2021_t1"]
    assert len(cases) == 10
    catalog = catalog_parameters("ampere")
    for fit_half, check_half in ((cases[0::2], cases[1::2]), (cases[1::2], cases[0::2])):
        fit = fit_cases(fit_half)["ampere"]
        fitted = {**catalog, **fit.parameters}
        before = _median_abs_error(check_half, catalog)
        after = _median_abs_error(check_half, fitted)
        assert after < before, (fit.parameters, before, after)


def test_example_records_cut_the_error_on_the_family_other_runs() -> None:
    # examples/calibration/mosaic-h100-bf16.yaml: 8 MosaicML H100 BF16 runs; the other 15 of the
    # family (tests/data) are predicted 20.4% off (median) by the catalog: the records keep the fused
    # attention default, the runs used FlashAttention-1 (16.4% before the catalog's Hopper attention
    # was refitted to the fused kernel's runs alone, 2026-12-02; 10.2% before it became the fused
    # kernel's, 2026-12-01)
    profile = calibrate(EXAMPLE_RECORDS)
    entry = profile.accelerators["hopper"]
    assert set(entry.parameters) == {"gemm_bf16", "attention"}
    heldout = paraplan.calibration.calibrate.cases_from_records(
        paraplan.calibration.records.load_records(HELDOUT_RECORDS)
    )
    assert len(heldout) == 15
    catalog = catalog_parameters("hopper")
    fitted = {**catalog, **entry.parameters}
    errors_before = sorted(abs(predict_s(c, catalog) / c.measured_s - 1) for c in heldout)
    errors_after = sorted(abs(predict_s(c, fitted) / c.measured_s - 1) for c in heldout)
    assert statistics.median(errors_before) > 0.10
    assert statistics.median(errors_after) < 0.08
    assert errors_after[math.ceil(0.9 * 15) - 1] < errors_before[math.ceil(0.9 * 15) - 1]
