"""The step-time uncertainty band shipped as data (hardware/data/uncertainty.yaml)."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml
from paraplan.hardware import node_type, node_type_names, step_time_band


def _data() -> dict:
    text = resources.files("paraplan.hardware").joinpath("data/uncertainty.yaml").read_text()
    return yaml.safe_load(text)


def test_every_catalog_generation_has_a_band_with_its_row_count_and_source() -> None:
    data = _data()
    generations = {node_type(k).accelerator.generation for k in node_type_names()}
    assert generations <= set(data["generations"])
    assert data["date"] and data["calibration_rows"] == data["pooled"]["rows"]
    for gen, entry in data["generations"].items():
        assert entry["source"] in ("generation", "pooled"), gen
        # a generation with few runs falls back to all runs pooled, and says so
        assert (entry["source"] == "pooled") == (entry["rows"] < data["min_rows"]), gen
        if entry["source"] == "pooled":
            assert (entry["p10"], entry["p90"]) == (data["pooled"]["p10"], data["pooled"]["p90"])


def test_band_is_sane_per_generation_from_data() -> None:
    # the model is unbiased enough that its p10-p90 straddles measured = predicted, and no
    # generation's band is wider than a factor of two
    data = _data()
    for gen, entry in [*data["generations"].items(), ("pooled", data["pooled"])]:
        assert 0.5 < entry["p10"] <= entry["p50"] <= entry["p90"] < 2.0, gen
        assert entry["p10"] <= 1.0 <= entry["p90"], gen


def test_step_time_band_reads_the_generation_and_pools_unknown_ones() -> None:
    data = _data()
    hopper = step_time_band(["hopper"])
    assert hopper.p10_ratio == pytest.approx(data["generations"]["hopper"]["p10"])
    assert hopper.p90_ratio == pytest.approx(data["generations"]["hopper"]["p90"])
    assert "hopper" in hopper.source
    unknown = step_time_band(["no-such-generation"])
    assert unknown.p90_ratio == pytest.approx(data["pooled"]["p90"])
    assert "pooled" in unknown.source


def test_mixed_generations_take_the_widest_band() -> None:
    a, h = step_time_band(["ampere"]), step_time_band(["hopper"])
    both = step_time_band(["hopper", "ampere"])
    assert both.p10_ratio == min(a.p10_ratio, h.p10_ratio)
    assert both.p90_ratio == max(a.p90_ratio, h.p90_ratio)
    assert "hopper" in both.source and "ampere" in both.source
