"""The grouped serving residuals (benchmarks/serving_residuals.py, issue 23): every scored row in
one group of every feature, each group's figures those of its rows."""

from __future__ import annotations

import statistics

import pytest
from paraplan.cost.serving import evaluate_serving

from benchmarks.serving_fidelity import score_cases
from benchmarks.serving_residuals import FEATURES, features, grouped, main
from benchmarks.serving_set import serving_cases


@pytest.fixture(scope="module")
def scored():
    cases = [c for c in serving_cases()[0] if c.source == "trtllm_perf_overview_v0.14_online"]
    values = {}
    for c in cases:
        values[c.id] = features(c, evaluate_serving(c.spec, c.cluster, c.plan, c.workload, c.engine).batch)
    return score_cases(cases), values


def test_every_row_is_in_one_group_of_every_feature(scored) -> None:
    scores, values = scored
    tpot = [s for s in scores if s.metric == "tpot_ms"]
    table = grouped(tpot, values)
    assert tuple(table) == FEATURES
    for feature, groups in table.items():
        assert sum(n for n, *_ in groups.values()) == len(tpot), feature


def test_group_figures_are_those_of_their_rows(scored) -> None:
    scores, values = scored
    tpot = [s for s in scores if s.metric == "tpot_ms"]
    table = grouped(tpot, values)
    h200 = [s.error for s in tpot if values[s.id]["gpu"] == "dgx-h200"]
    n, signed, med, _ = table["gpu"]["dgx-h200"]
    # 18 H200 rows, less the osl-16 burst whose TPOT is not scored (serving_set burst_tpot_is_prefill)
    assert n == len(h200) == 17
    assert signed == pytest.approx(statistics.median(h200))
    assert med == pytest.approx(statistics.median(abs(e) for e in h200))
    assert set(table["loop"]) == {"open (rate)", "all at once"}  # the rate-inf rows: all at once
    assert table["model"]["llama3.1-70b"][0] == 17


def test_the_command_prints_a_table_per_metric_and_feature(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--metric", "ttft_ms", "--source", "trtllm_perf_overview_v0.14_online"]) == 0
    out = capsys.readouterr().out
    for feature in FEATURES:
        assert f"ttft_ms by {feature}" in out
    assert "tpot_ms by" not in out
