"""Exports of unequal virtual stages (issue 11 item 4): the result JSON carries
plan.layers_per_chunk, `paraplan export` reads it back, and each framework gets the flags that
build those chunks or refuses (the oracle tests run megatron-core on them:
tests/export/test_oracles.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import paraplan
from paraplan.cli import main
from paraplan.errors import ExportError
from paraplan.export import context
from paraplan.export.megatron import megatron_args
from paraplan.export.torchtitan import model_parts
from paraplan.result import Result

EXAMPLE_405B = Path(__file__).parents[2] / "examples" / "llama31-405b-1024xh100.yaml"
SMALL = {
    "model": {"layers": 30, "hidden": 2048, "ffn_hidden": 5632, "heads": 16, "kv_heads": 4, "vocab": 32000},
    "cluster": {"preset": "dgx-h100", "nodes": 2},
    "job": {"seq_len": 4096, "global_batch": 64, "precision": "bf16"},
}


def _flag_values(argv: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for i, tok in enumerate(argv):
        if tok.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            out[tok] = None if nxt is None or nxt.startswith("--") else nxt
    return out


def test_405b_recipe_exports_nvidias_account_for_flags() -> None:
    res = Result.model_validate_json(paraplan.evaluate(EXAMPLE_405B).model_dump_json())
    flags = _flag_values(megatron_args(context(res)))
    assert flags["--num-layers"] == "126"
    assert flags["--pipeline-model-parallel-size"] == "8"
    assert flags["--num-virtual-stages-per-pipeline-rank"] == "8"
    assert "--account-for-embedding-in-pipeline-split" in flags
    assert "--account-for-loss-in-pipeline-split" in flags
    assert "--pipeline-model-parallel-layout" not in flags
    assert "--decoder-first-pipeline-num-layers" not in flags
    nemo = paraplan.export(res, "nemo")
    assert "account_for_embedding_in_pipeline_split" in nemo


def test_cli_export_reads_layers_per_chunk_back(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    chunks = [[2, 5], [4, 4], [3, 4], [4, 4]]
    scenario = {
        **SMALL,
        "plan": {
            "dp": 2,
            "tp": 2,
            "pp": 4,
            "vp": 2,
            "micro_batch": 1,
            "zero": 1,
            "recompute": "none",
            "layers_per_chunk": chunks,
        },
    }
    path = tmp_path / "r.json"
    path.write_text(paraplan.evaluate(scenario).model_dump_json())
    assert json.loads(path.read_text())["plan"]["layers_per_chunk"] == chunks
    assert main(["export", str(path), "--to", "megatron"]) == 0
    out = capsys.readouterr().out
    # virtual stage s = v * pp + r on rank r: v = 0 ranks 0..3, then v = 1
    assert "E,tt|t*4|t*3|t*4|t*5|t*4|t*4|t*4,L" in out
    assert "--num-virtual-stages-per-pipeline-rank" not in out


def test_torchtitan_parts_follow_the_chunks() -> None:
    res = paraplan.evaluate(EXAMPLE_405B)
    parts = model_parts(context(res).plan)
    layers = [sum(name.startswith("layers.") for name in part) for part in parts]
    assert len(parts) == 64
    assert layers[0] == 1 and layers[-1] == 1 and set(layers[1:-1]) == {2}
    assert parts[-1][-2:] == ["norm", "lm_head"]


def test_maxtext_refuses_chunks_vp_does_not_divide() -> None:
    res = paraplan.evaluate(EXAMPLE_405B)
    with pytest.raises(ExportError, match="multiple of the repeats"):
        paraplan.export(res, "maxtext")
