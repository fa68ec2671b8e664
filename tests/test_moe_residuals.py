"""The grouped MoE residuals (benchmarks/moe_residuals.py): every scored MoE row in every
feature's groups, each group's figures those of its rows, each row's features those of the plan
and job it maps to."""

from __future__ import annotations

import statistics

import pytest

from benchmarks.fidelity import per_source, scored_rows, summary
from benchmarks.moe_residuals import FEATURES, features, grouped, main


@pytest.fixture(scope="module")
def rows():
    return scored_rows(kind="moe")[0]


@pytest.fixture(scope="module")
def values(rows):
    return [features(r) for r in rows]


def test_every_row_is_in_one_group_of_every_feature(rows, values) -> None:
    table = grouped(rows, values)
    assert tuple(table) == FEATURES
    for feature, groups in table.items():
        assert sum(n for n, *_ in groups.values()) == len(rows), feature


def test_group_figures_are_those_of_their_rows(rows, values) -> None:
    table = grouped(rows, values)
    for key, (n, med, p90, signed) in per_source(rows).items():
        assert table["source"][key] == pytest.approx((n, signed, med, p90))
    ladder = [r.error for r, v in zip(rows, values, strict=True) if v["source"] == "mcore_dsv3_gb200_guide"]
    assert table["source"]["mcore_dsv3_gb200_guide"][1] == pytest.approx(statistics.median(ladder))
    assert table["source"]["mcore_dsv3_gb200_guide"][2:] == pytest.approx(summary(ladder))


def test_features_are_read_from_the_mapped_plan(rows, values) -> None:
    by_row = {r.case.row_id: v for r, v in zip(rows, values, strict=True)}
    # DeepSeek-V3 GB200 ladder, first step: NCCL alltoall, no graphs, EP32 (256 / 32 = 8 local)
    assert {k: by_row[2061][k] for k in ("generation", "host", "dispatcher", "cuda_graphs")} == {
        "generation": "blackwell",
        "host": "grace",
        "dispatcher": "alltoall",
        "cuda_graphs": "none",
    }
    assert (by_row[2061]["ep"], by_row[2061]["local_experts"], by_row[2061]["precision"]) == (
        "32",
        "8",
        "mxfp8",
    )
    # 16 H100 Qwen3-30B-A3B, HybridEP with the EP overlap on; ModelZoo 128K on 256 H100
    assert (by_row[2076]["dispatcher"], by_row[2076]["overlap"], by_row[2076]["host"]) == (
        "hybridep",
        "on",
        "x86",
    )
    assert (by_row[2055]["seq_len"], by_row[2055]["generation"]) == ("64K-128K", "hopper")


def test_main_prints_every_feature(capsys) -> None:
    assert main([]) == 0
    out = capsys.readouterr().out
    assert all(f"\n{f}" in out for f in FEATURES)
    assert "MoE runs: median |err|" in out.splitlines()[-1]
