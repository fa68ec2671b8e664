"""The serving fidelity benchmark (benchmarks/serving_fidelity.py): the mapping, the CLI on a subset,
and the error bounds on the calibration rows as measured (regressions fail)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from benchmarks.serving_fidelity import BOUNDS as FIT_BOUNDS
from benchmarks.serving_fidelity import main, score_cases, summary
from benchmarks.serving_set import (
    DEFAULT_CSV,
    Skipped,
    burst_tpot_is_prefill,
    load_rows,
    map_row,
    serving_cases,
)

# Reached 2026-12-02 (eleventh session) with hardware/data/serving.yaml (in-sample medians over the
# 413 scored rows: 9.4% tokens/s/GPU, 12.5% TPOT, 15.6% TTFT with the front end measured and vLLM's
# MoE tiles; docs/serving_model.md Sec. 6.0f; 9.5 / 13.3 / 18.0% before). The bounds are those
# figures plus a margin; tokens/s/GPU's and TTFT's are inside the 10% and 20% targets,
# TPOT's (12%) is not reached.
BOUNDS = {"output_tok_s_per_gpu": 0.100, "tpot_ms": 0.130, "ttft_ms": 0.170}


def test_every_row_is_mapped_or_skipped_with_a_reason() -> None:
    rows = load_rows(DEFAULT_CSV)
    cases, skipped = serving_cases()
    assert len(rows) == 432
    assert len({c.id for c in cases}) + len({s.id for s in skipped}) == len({r["id"] for r in rows})
    assert len(cases) >= 400
    assert all(s.reason for s in skipped)
    for case in cases:  # every case scores something and its plan passes the plan check
        assert case.measured and case.cluster.num_devices >= case.plan.replicas


def test_a_row_maps_as_the_rules_say() -> None:
    row = next(r for r in load_rows() if r["id"] == "srv-0713")  # AIC 1P2D, adp4 prefill, 2x adp8 decode
    case = map_row(row)
    assert not isinstance(case, Skipped)
    assert case.plan.mode == "disaggregated" and case.plan.prefill and case.plan.decode
    assert (case.plan.prefill.tp, case.plan.prefill.dp_attention, case.plan.prefill.workers) == (4, True, 1)
    assert (case.plan.decode.tp, case.plan.decode.ep, case.plan.decode.workers) == (8, 8, 2)
    assert case.plan.max_batch == 32 * 8 and case.workload.concurrency == 512
    assert case.workload.weights_precision == "nvfp4" and case.workload.kv_precision == "fp8"
    mtp = next(r for r in load_rows() if r["id"] == "srv-0684")
    assert isinstance(map_row(mtp), Skipped) and "MTP" in map_row(mtp).reason  # type: ignore[union-attr]


def test_cli_on_one_source_writes_the_csv_and_prints_overall_last(tmp_path: Path, capsys) -> None:
    out = tmp_path / "scores.csv"
    # --aic none: the side-by-side table (printed after the overall line) is left out here
    assert main(["--source", "trtllm_dsr1_best_perf", "--aic", "none", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1].startswith("overall")
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows and list(rows[0]) == ["id", "metric", "measured", "predicted", "error"]
    for r in rows:
        assert r["metric"] in ("output_tok_s_per_gpu", "ttft_ms", "tpot_ms")
        assert float(r["error"]) == pytest.approx(float(r["predicted"]) / float(r["measured"]) - 1, abs=1e-3)


@pytest.mark.slow
def test_error_bounds_on_the_calibration_rows() -> None:
    cases, _ = serving_cases()
    table = summary(score_cases(cases))
    for metric, bound in BOUNDS.items():
        rows, median, _p90, _signed = table[("overall", metric)]
        assert rows >= {"output_tok_s_per_gpu": 300, "tpot_ms": 90, "ttft_ms": 80}[metric]
        assert median <= bound, (metric, median)


def test_a_burst_whose_output_falls_in_its_prompt_phase_scores_no_tpot() -> None:
    # 500 prompts of 467 tokens over 8,192-token steps take 28.5 steps: an osl of 16 lies inside
    # them (TPOT dropped), an osl of 256 does not (scored); throughput and TTFT are scored in both
    rows = {r["id"]: r for r in load_rows()}
    short, long = map_row(rows["srv-0623"]), map_row(rows["srv-0617"])
    assert not isinstance(short, Skipped) and not isinstance(long, Skipped)
    assert (short.workload.osl, long.workload.osl) == (16, 256)
    assert "tpot_ms" not in short.measured and {"ttft_ms", "output_tok_s_per_gpu"} <= set(short.measured)
    assert "tpot_ms" in long.measured
    assert any("prompt phase" in a for a in short.assumptions)
    assert burst_tpot_is_prefill(math.inf, 500, 467, 28, 8192)
    assert not burst_tpot_is_prefill(math.inf, 500, 467, 29, 8192)
    assert not burst_tpot_is_prefill(12.0, 500, 467, 16, 8192)  # Poisson arrivals: step times
    assert not burst_tpot_is_prefill(math.inf, None, 467, 16, 8192)


def test_the_fit_weights_a_source_by_the_root_of_its_rows() -> None:
    from benchmarks.serving_fidelity import Score, _objective, group_weight

    assert group_weight(4) == 2.0 and group_weight(0) == 0.0
    # a 1-row source 100% off and a 4-row source exact: (1 x log 2 + 2 x 0) / 3
    exact = [Score(f"b{i}", "s2", "tpot_ms", 1.0, 1.0) for i in range(4)]
    scores = [Score("a", "s1", "tpot_ms", 1.0, 2.0), *exact]
    assert _objective(scores) == pytest.approx(math.log(2.0) / 3.0)


def test_the_fitted_values_and_priors_lie_inside_the_fit_bounds() -> None:
    """hardware/data/serving.yaml's ``fitted:`` and ``priors:`` inside the fit's physical bounds
    (the per-kernel time of a CUDA graph 2-5 us: docs/serving_model.md Sec. 6.0a; the front end
    measured, its bounds the one value: Sec. 6.0f), every fitted parameter bounded."""
    from paraplan.hardware.serving import FIT_NAMES, serving_fit, serving_priors

    assert set(FIT_BOUNDS) == set(FIT_NAMES)
    for values in (serving_fit().values(), serving_priors().values()):
        for name, (lo, hi) in FIT_BOUNDS.items():
            assert lo <= values[name] <= hi, (name, values[name])
    assert FIT_BOUNDS["graph_kernel_overhead_us"] == (2.0, 5.0)
    front = serving_priors().values()["ttft_overhead_ms"]
    assert FIT_BOUNDS["ttft_overhead_ms"] == (front, front) == (7.0, 7.0)
    assert serving_fit().values()["ttft_overhead_ms"] == front


def test_the_front_end_is_the_lowest_load_rows_measured_ttft_beyond_the_model() -> None:
    # issue 23 (eleventh session): the front end is read from TensorRT-LLM 0.14's online rows
    # at QPS 2, Llama 3.1 8B on one GPU, at the priors (no fit), not fitted per fold
    from paraplan.hardware.serving import serving_priors

    from benchmarks.serving_frontend import front_end_ms, front_end_rows

    cases, _ = serving_cases()
    rows = front_end_rows(cases)
    assert len(rows) == 6 and {r.isl for r in rows} == {202.0, 467.0}
    for r in rows:  # the model's service is the larger part, the front end a few ms
        assert r.service_ms > 8.0 and 5.0 < r.front_ms < 11.0, r
    assert front_end_ms(rows) == serving_priors().values()["ttft_overhead_ms"]


def test_a_whole_millisecond_value_is_scored_against_the_interval_it_stands_for() -> None:
    # issue 23: TensorRT-LLM 0.14's online table prints ITL in whole ms; 6 ms is 5.5-6.5 ms
    from benchmarks.serving_precision import interval_error

    assert interval_error(6.0, 6.3, 1.0) == 0.0
    assert interval_error(6.0, 7.1, 1.0) == pytest.approx(7.1 / 6.5 - 1.0)  # above: to the upper edge
    assert interval_error(6.0, 5.0, 1.0) == pytest.approx(5.0 / 5.5 - 1.0)  # below: to the lower edge
    assert interval_error(6.0, 7.1, 0.0) == pytest.approx(7.1 / 6.0 - 1.0)  # no resolution: the point


def test_the_published_precision_figure_is_printed_beside_the_point_error(capsys) -> None:
    from benchmarks.serving_fidelity import Score
    from benchmarks.serving_precision import precision_lines, precision_summary

    src = "trtllm_perf_overview_v0.14_online"
    scores = [
        Score("a", src, "tpot_ms", 6.0, 7.1),  # point +18.3%, interval +9.2%
        Score("b", src, "tpot_ms", 20.0, 20.2),  # inside the interval
        Score("c", "aiconfigurator_silicon_sample", "tpot_ms", 10.0, 11.5),  # no resolution: point
        Score("d", src, "output_tok_s_per_gpu", 30.0, 33.0),  # not a latency: left out
    ]
    table = precision_summary(scores)
    assert table[(src, "tpot_ms")][0] == 2
    assert table[(src, "tpot_ms")][1] == pytest.approx((7.1 / 6.5 - 1.0) / 2.0)
    assert table[(src, "tpot_ms")][2] == pytest.approx((7.1 / 6.0 - 1.0 + 0.01) / 2.0)
    rows, interval, point = table[("overall", "tpot_ms")]
    assert rows == 3 and interval == pytest.approx(7.1 / 6.5 - 1.0) and point == pytest.approx(0.15)
    assert ("overall", "output_tok_s_per_gpu") not in table
    lines = precision_lines(scores)
    assert lines[-1].startswith("overall") and "interval" in lines[1] and "point" in lines[1]
    # the CLI keeps the point figures' overall line last
    assert main(["--source", src, "--rows", "6", "--aic", "none"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("overall") and any(
        line.startswith("at the published precision") for line in out
    )


def test_the_pattern_search_finds_the_bottom_of_a_valley_inside_the_bounds() -> None:
    # a valley along log(step) + log(kernel) = log 8 (two per-step times that trade), its bottom at
    # step / kernel = 0.6: step 2.19 ms, kernel 3.65 us; the other parameters stay where they are
    from paraplan.hardware.serving import serving_priors

    from benchmarks.serving_pattern import pattern_search

    start = serving_priors().values()

    def cost(v: dict[str, float]) -> float:
        a, b = math.log(v["step_overhead_ms"]), math.log(v["graph_kernel_overhead_us"])
        return 10.0 * (a + b - math.log(8.0)) ** 2 + (a - b - math.log(0.6)) ** 2

    values, best = pattern_search(start, cost(start), cost, FIT_BOUNDS)
    assert best == pytest.approx(cost(values)) and best < 0.01 * cost(start)
    assert values["step_overhead_ms"] == pytest.approx(math.sqrt(4.8), rel=0.03)
    assert values["graph_kernel_overhead_us"] == pytest.approx(math.sqrt(8.0 / 0.6), rel=0.03)
    for name, (lo, hi) in FIT_BOUNDS.items():
        assert lo <= values[name] <= hi
        if name not in ("step_overhead_ms", "graph_kernel_overhead_us"):
            assert values[name] == start[name]
    # a bound holds: with the bottom beyond 5 us the kernel time stops at its bound
    far = lambda v: (math.log(v["graph_kernel_overhead_us"]) - math.log(9.0)) ** 2  # noqa: E731
    assert pattern_search(start, far(start), far, FIT_BOUNDS)[0]["graph_kernel_overhead_us"] == 5.0


def test_the_fit_keeps_the_start_of_the_lowest_objective(monkeypatch) -> None:
    from paraplan.hardware.serving import ServingFit, serving_priors

    import benchmarks.serving_fidelity as sf

    worse = ServingFit.from_values({**serving_priors().values(), "step_overhead_ms": 3.0})
    monkeypatch.setattr(
        sf,
        "fit_parameters",
        lambda cases, start=None, log=None, polish=False, tiles=None: start or serving_priors(),
    )
    monkeypatch.setattr(sf, "fit_objective", lambda cases, fit, tiles=None: fit.values()["step_overhead_ms"])
    assert sf.fit_from_starts([], (worse, None)).values() == serving_priors().values()
    assert sf.fit_from_starts([], (worse,)) is worse
    with pytest.raises(ValueError):
        sf.fit_from_starts([], ())
