"""AIConfigurator side by side (issue 23, item 5): the row mapping, the join and its statistics on
tiny synthetic error files, the committed AIConfigurator results against the calibration file,
and one run of the real driver on two rows when AIConfigurator's venv exists
($PARAPLAN_AIC_PYTHON or .venv-aic; skipped otherwise)."""

from __future__ import annotations

import csv
import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import aiconfigurator_driver, side_by_side
from benchmarks.aiconfigurator_side import (
    DEFAULT_CSV,
    OUT_COLUMNS,
    NotExpressible,
    _read,
    aic_python,
    error_rows,
    map_row,
    map_rows,
    measured_values,
)

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "benchmarks" / "results" / "aiconfigurator_serving.csv"


@pytest.fixture(scope="module")
def rows() -> dict[str, dict[str, str]]:
    return {r["id"]: r for r in _read(DEFAULT_CSV)}


# -- the statistics and the join -------------------------------------------------------------


def test_median_and_p90_are_numpys_definitions() -> None:
    assert side_by_side.median([3.0, 1.0, 2.0]) == 2.0
    assert side_by_side.median([4.0, 1.0, 2.0, 3.0]) == 2.5
    assert side_by_side.p90([float(i) for i in range(11)]) == pytest.approx(9.0)
    assert side_by_side.p90([1.0, 2.0]) == pytest.approx(1.9)  # numpy.percentile([1, 2], 90)
    assert math.isnan(side_by_side.median([])) and math.isnan(side_by_side.p90([]))


def _err(row_id: str, metric: str, measured: float, predicted: float) -> dict[str, str]:
    return {
        "id": row_id,
        "metric": metric,
        "measured": str(measured),
        "predicted": str(predicted),
        "error": str(predicted / measured - 1),
    }


def test_side_by_side_joins_on_id_and_metric_and_scores_only_shared_rows() -> None:
    para = [
        _err("a-1", "tpot_ms", 10.0, 11.0),  # +10%
        _err("a-2", "tpot_ms", 10.0, 8.0),  # -20%
        _err("a-3", "tpot_ms", 10.0, 10.5),  # +5%
        _err("b-1", "ttft_ms", 100.0, 150.0),  # +50%
        _err("b-1", "tpot_ms", 20.0, 20.0),  # only paraplan
        _err("b-2", "ttft_ms", 100.0, 90.0),  # measured differs from AIC's: left out
        _err("b-3", "tpot_ms", 21.334, 21.334),  # the same measured value, rounded: joined
    ]
    aic = [
        _err("a-1", "tpot_ms", 10.0, 14.0),  # +40%
        _err("a-2", "tpot_ms", 10.0, 5.0),  # -50%
        _err("a-3", "tpot_ms", 10.0, 12.0),  # +20%
        _err("b-1", "ttft_ms", 100.0, 30.0),  # -70%
        _err("b-2", "ttft_ms", 120.0, 90.0),
        _err("b-3", "tpot_ms", 21.33395358257017, 21.33395358257017 * 1.3),
        _err("c-1", "output_tok_s_per_gpu", 1000.0, 900.0),  # only AIC
        {"id": "c-2", "metric": "ttft_ms", "measured": "5", "predicted": "", "error": "nan"},  # not scored
    ]
    sources = {"a-1": "A", "a-2": "A", "a-3": "A", "b-1": "B", "b-3": "B"}
    result = side_by_side.side_by_side(para, aic, sources)
    assert (result.joined, result.paraplan_only, result.aic_only) == (5, 1, 1)
    assert result.measured_mismatch == [("b-2", "ttft_ms")]
    a = result.get("A", "tpot_ms")
    assert a is not None and a.n == 3
    assert a.paraplan_median_abs == pytest.approx(0.10) and a.aic_median_abs == pytest.approx(0.40)
    assert a.paraplan_p90_abs == pytest.approx(0.18) and a.aic_p90_abs == pytest.approx(0.48)
    assert a.paraplan_median == pytest.approx(0.05) and a.aic_median == pytest.approx(0.20)
    b = result.get("B", "ttft_ms")
    assert b is not None and (b.n, b.aic_median) == (1, pytest.approx(-0.70))
    overall = result.get(side_by_side.OVERALL, side_by_side.ALL)
    assert overall is not None and overall.n == 5
    assert overall.paraplan_median_abs == pytest.approx(0.10)  # |10, 20, 5, 50, 0| -> 10
    assert overall.aic_median_abs == pytest.approx(0.40)  # |40, 50, 20, 70, 30| -> 40
    # per source first, overall per metric next, all metrics last
    assert [(s.source, s.metric) for s in result.stats] == [
        ("A", "tpot_ms"),
        ("B", "tpot_ms"),
        ("B", "ttft_ms"),
        ("overall", "tpot_ms"),
        ("overall", "ttft_ms"),
        ("overall", "all metrics"),
    ]


def test_side_by_side_cli_prints_the_table_overall_last(tmp_path: Path) -> None:
    for name, pred in (("para.csv", 11.0), ("aic.csv", 15.0)):
        with (tmp_path / name).open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(OUT_COLUMNS))
            w.writeheader()
            w.writerow(_err("srv-0719", "tpot_ms", 10.0, pred))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.side_by_side",
            str(tmp_path / "para.csv"),
            str(tmp_path / "aic.csv"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert (
        lines[1].startswith("aiconfigurator_silicon_sample") and "10.0%" in lines[1] and "50.0%" in lines[1]
    )
    assert lines[-2].startswith("overall") and "all metrics" in lines[-2]
    assert lines[-1].startswith("joined 1 ")


# -- the mapping ------------------------------------------------------------------------------


def test_trtllm_max_load_rows_sweep_their_fixed_layout(rows: dict[str, dict[str, str]]) -> None:
    dense = map_row(rows["srv-0330"])  # Llama 3.1 70B FP8, H100, TP1, TRT-LLM 0.17
    assert dense.case["kind"] == "agg_max" and dense.case["system"] == "h100_sxm"
    assert dense.case["model"] == "meta-llama/Meta-Llama-3.1-70B" and dense.case["backend"] == "trtllm"
    assert (
        dense.case["estimate"]["tp_size"] == 1 and dense.case["estimate"]["gemm_quant_mode"] == "fp8_static"
    )
    assert dense.measured == {"output_tok_s_per_gpu": 3378.0}
    moe = next(
        map_row(r)
        for r in rows.values()
        if r["source_key"] == "trtllm_perf_overview_v1.0"
        and r["model"].endswith("Maverick-17B-128E-Instruct")
    )  # TP4 x PP2 on RTX 6000 Pro or TP8 on H100: attention-DP = TP, EP = TP
    est = moe.case["estimate"]
    assert est["tp_size"] == 1 and est["attention_dp_size"] == est["moe_ep_size"] > 1
    assert moe.assumptions and "attention-DP" in moe.assumptions[0]


def test_online_rows_carry_their_rate_and_mean_latencies(rows: dict[str, dict[str, str]]) -> None:
    m = map_row(rows["srv-0614"])  # Llama 3.1 70B BF16 TP4, QPS 8
    assert m.case["kind"] == "agg_rate" and m.case["rate_qps"] == 8.0
    assert m.measured == {"output_tok_s_per_gpu": 465.0, "ttft_ms": 92.0, "tpot_ms": 32.0}
    assert map_row(rows["srv-0617"]).case["rate_qps"] == "inf"


def test_reference_rows_take_the_exact_layout_from_the_notes(rows: dict[str, dict[str, str]]) -> None:
    agg = map_row(rows["srv-0715"])  # tp1 pp1 adp8 moe_tp1 moe_ep8, batch 16 per rank
    assert agg.case["kind"] == "agg_fixed" and agg.case["backend"] == "trtllm"
    est = agg.case["estimate"]
    assert (est["tp_size"], est["attention_dp_size"], est["moe_ep_size"], est["batch_size"]) == (1, 8, 8, 16)
    assert est["gemm_quant_mode"] == est["moe_quant_mode"] == "nvfp4"
    dis = map_row(rows["srv-0713"])  # P: 1x(tp1 pp1 adp4 moe_tp1 moe_ep4 bs1); D: 2x(... adp8 ... bs32)
    est = dis.case["estimate"]
    assert dis.case["kind"] == "disagg_fixed"
    assert (est["prefill_num_workers"], est["prefill_attention_dp_size"], est["prefill_batch_size"]) == (
        1,
        4,
        1,
    )
    assert (est["decode_num_workers"], est["decode_attention_dp_size"], est["decode_batch_size"]) == (
        2,
        8,
        32,
    )
    assert set(dis.measured) == {"ttft_ms", "tpot_ms"}  # the reference set's unstated statistic
    dense = map_row(rows["srv-0764"])  # Qwen3-32B: empty adp and moe degree 0 are left to AIC
    assert dense.case["estimate"]["attention_dp_size"] == 1 and dense.case["estimate"]["moe_ep_size"] is None


@pytest.mark.parametrize(
    ("row_id", "reason"),
    [
        ("srv-0684", "nextn_accepted"),  # MTP min-latency
        ("srv-0704", "none of"),  # prefill-only total throughput
        ("srv-0697", "batch unit"),  # SGLang GB200 decode side
    ],
)
def test_rows_aic_cannot_express_say_why(rows: dict[str, dict[str, str]], row_id: str, reason: str) -> None:
    with pytest.raises(NotExpressible, match=reason):
        map_row(rows[row_id])


def test_every_row_is_mapped_or_has_a_reason(rows: dict[str, dict[str, str]]) -> None:
    mapped, skipped = map_rows(rows.values())
    assert len(mapped) + len(skipped) == len(rows) == 432
    gh200 = [i for i, r in rows.items() if "GH200" in r["gpu"]]
    assert gh200 and all("GH200" in skipped[i] for i in gh200)
    assert len(mapped) >= 410


def test_error_rows_are_predicted_over_measured_minus_one(rows: dict[str, dict[str, str]]) -> None:
    m = map_row(rows["srv-0614"])
    results = [{"id": "srv-0614", "ok": True, "predicted": {"ttft_ms": 184.0, "tpot_ms": 16.0}}]
    out = {e["metric"]: e for e in error_rows([m], results)}
    assert set(out) == {"ttft_ms", "tpot_ms"}  # AIC gave no tokens/s: not scored
    assert out["ttft_ms"]["error"] == pytest.approx(1.0) and out["tpot_ms"]["error"] == pytest.approx(-0.5)
    assert error_rows([m], [{"id": "srv-0614", "ok": False, "reason": "OOM"}]) == []


def test_driver_picks_the_nearest_version_by_number() -> None:
    key = aiconfigurator_driver._version_key
    assert key("1.3.0rc20") == (1, 3, 0, -1) and key("0.5.8.post1") == (0, 5, 8, 0)
    assert key("0.17") == (0, 17, 0, 0) and key("nightly-dev") is None


# -- the committed results -------------------------------------------------------------------


def test_committed_results_match_the_calibration_rows(rows: dict[str, dict[str, str]]) -> None:
    results = side_by_side.read_error_csv(COMMITTED)
    assert results and list(results[0]) == list(OUT_COLUMNS)
    assert COMMITTED.with_suffix(".md").exists()  # the header note: version, date, how produced
    seen = set()
    for e in results:
        assert e["id"] in rows and e["metric"] in ("output_tok_s_per_gpu", "ttft_ms", "tpot_ms")
        assert (e["id"], e["metric"]) not in seen
        seen.add((e["id"], e["metric"]))
        measured, predicted = float(e["measured"]), float(e["predicted"])
        assert measured == measured_values(rows[e["id"]])[e["metric"]]
        assert float(e["error"]) == pytest.approx(predicted / measured - 1, abs=1e-5)
    sources = {rows[i]["source_key"] for i, _ in seen}
    assert {
        "trtllm_perf_overview_v1.0",
        "trtllm_perf_overview_v0.17",
        "aiconfigurator_silicon_sample",
    } <= sources


# -- the real thing --------------------------------------------------------------------------


@pytest.mark.slow
def test_real_driver_on_two_rows(tmp_path: Path) -> None:
    python = aic_python()
    if python is None:
        pytest.skip("no AIConfigurator venv (set PARAPLAN_AIC_PYTHON or build .venv-aic)")
    out = tmp_path / "aic.csv"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.aiconfigurator_side",
            "--ids",
            "srv-0614,srv-0719",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "AIConfigurator 0.12.0: 2 rows, 2 put to AIC, 2 answered" in done.stdout
    got = {(e["id"], e["metric"]): e for e in side_by_side.read_error_csv(out)}
    assert set(got) == {
        ("srv-0614", "output_tok_s_per_gpu"),
        ("srv-0614", "ttft_ms"),
        ("srv-0614", "tpot_ms"),
        ("srv-0719", "ttft_ms"),
        ("srv-0719", "tpot_ms"),
    }
    # QPS 8 sustained: AIC's throughput is the offered rate, 8 req/s x 255 tokens over 4 GPUs (AIC
    # counts osl - 1 generated tokens per request, base_backend.py run_agg: the first is prefill's)
    assert float(got[("srv-0614", "output_tok_s_per_gpu")]["predicted"]) == pytest.approx(
        8 * 255 / 4, rel=1e-6
    )
    committed = {(e["id"], e["metric"]): e for e in side_by_side.read_error_csv(COMMITTED)}
    for key, e in got.items():  # the committed file came from the same driver and version
        assert float(e["predicted"]) == pytest.approx(float(committed[key]["predicted"]), rel=1e-6)
