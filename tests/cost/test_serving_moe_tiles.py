"""The MoE row tile read in the engines' kernels (cost/serving_gemm.py moe_tile_rows,
is_tiled_moe; docs/serving_model.md Sec. 6.0e-f): on for vLLM by default, a tile near the tokens
per expert, DeepGEMM's padding kept under an SGLang attention-DP + EP layout."""

from __future__ import annotations

import pytest
from paraplan.cost.kv import WorkerShape
from paraplan.cost.serving_gemm import (
    GROUPED_GEMM_M_HALF,
    TILED_MOE_ENGINES_DEFAULT,
    check_tiled_moe_engines,
    is_deepep_moe,
    is_tiled_moe,
    moe_tile_rows,
)
from paraplan.cost.serving_step import StepInput, step_time
from paraplan.graph import build_graph, preset
from paraplan.hardware import build_cluster
from paraplan.hardware.serving import serving_fit


def test_the_tile_is_the_next_power_of_two_of_the_mean_tokens_clamped_16_to_128() -> None:
    # triton_kernels opt_flags.py: block_m = max(16, min(next_power_of_2(tokens_per_expt), 128))
    assert moe_tile_rows(2.0, 0.5) == 16.0  # a decode expert: one 16-row tile
    assert moe_tile_rows(40.0, 33.0) == 64.0  # 33 tokens a mean expert: tile 64
    assert moe_tile_rows(70.0, 33.0) == 128.0  # the busiest group's 70 rows: two 64-row tiles
    assert moe_tile_rows(500.0, 500.0) == 512.0  # prefill: whole 128-row tiles
    assert moe_tile_rows(128.0, 128.0) == 128.0
    assert moe_tile_rows(0.0, 0.0) == 16.0  # an expert without tokens: one tile, no division by 0


def test_vllm_tiles_by_default_and_only_the_read_engines_can() -> None:
    # issue 23 (Sec. 6.0f): rule A kept, vLLM alone; SGLang and TensorRT-LLM keep m + 128 rows
    assert TILED_MOE_ENGINES_DEFAULT == frozenset({"vllm"})
    assert is_tiled_moe("vllm") and not is_tiled_moe("sglang") and not is_tiled_moe("trtllm")
    assert is_deepep_moe("sglang") and not is_deepep_moe("vllm")
    assert is_tiled_moe("sglang", frozenset({"vllm", "sglang"})) and not is_tiled_moe("vllm", frozenset())
    with pytest.raises(ValueError, match="trtllm"):
        check_tiled_moe_engines(frozenset({"trtllm"}))  # TensorRT-LLM's kernels were not read


def _experts_decode_s(tiled: bool, deepep: bool, shape: WorkerShape) -> float:
    graph = build_graph(preset("gpt-oss-120b"))
    cluster = build_cluster("dgx-h200", nodes=1)
    t = step_time(
        graph,
        cluster,
        shape,
        StepInput(64.0, 1536.0),
        w_bytes=0.5 + 1.0 / 32.0,
        weights_precision="mxfp4",
        kv_bytes=2.0,
        fit=serving_fit(),
        tiled_moe=tiled,
        deepep_moe=deepep,
    )
    return t.gemm_s


def test_a_tiled_decode_expert_streams_its_weights_instead_of_computing_128_padded_rows() -> None:
    # gpt-oss-120b at 64 sequences: 256 copies over 128 experts, ~2 rows an expert; with
    # m + 128 rows the padded compute exceeds the MXFP4 weight stream (Sec. 6.0c), a 16-row tile
    # does not
    assert GROUPED_GEMM_M_HALF == 128.0
    padded = _experts_decode_s(False, False, WorkerShape())
    tiled = _experts_decode_s(True, False, WorkerShape())
    assert tiled < 0.5 * padded  # 15.0 against 33.6 ms on an H200


def test_an_sglang_attention_dp_ep_layout_keeps_deepgemm_padding() -> None:
    shape = WorkerShape(tp=8, ep=8, dp_attention=True)
    assert _experts_decode_s(True, True, shape) == pytest.approx(_experts_decode_s(False, False, shape))
    assert _experts_decode_s(True, False, shape) < _experts_decode_s(False, False, shape)


def test_the_benchmark_flag_passes_the_tiled_engines_down_and_leaves_no_state() -> None:
    from benchmarks.serving_fidelity import main, score_cases
    from benchmarks.serving_set import serving_cases

    vllm = [c for c in serving_cases()[0] if c.engine.name == "vllm"]
    tiled = score_cases(vllm)
    untiled = score_cases(vllm, tiles=frozenset())
    assert [s.id for s in tiled] == [s.id for s in untiled]
    assert any(a.predicted != b.predicted for a, b in zip(tiled, untiled, strict=True))  # MoE rows move
    assert main(["--source", "trtllm_dsr1_best_perf", "--aic", "none", "--moe-tiles", "none"]) == 0
    assert is_tiled_moe("vllm")  # the flag set no module state: the default is what it was
    assert [s.predicted for s in score_cases(vllm)] == [s.predicted for s in tiled]
    with pytest.raises(ValueError, match="trtllm"):
        main(["--source", "trtllm_dsr1_best_perf", "--aic", "none", "--moe-tiles", "vllm,trtllm"])
