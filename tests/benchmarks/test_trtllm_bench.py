"""trtllm-bench's batch limits from the dataset (benchmarks/trtllm_bench.py), a mapping rule of
the TensorRT-LLM performance-overview rows (benchmarks/data/README.md)."""

from __future__ import annotations

import pytest

from benchmarks.serving_set import Skipped, load_rows, map_row
from benchmarks.trtllm_bench import trtllm_bench_limits

LLAMA70_FP8 = dict(
    params=70.6e9, layers=80, kv_heads=8, head_dim=128, weights_precision="fp8", kv_precision="fp8"
)


def test_a_decode_heavy_run_gets_the_2048_token_floor_and_a_batch_rounded_up() -> None:
    # 70B FP8 on one 80 GB GPU at 128/2048: (79.65 - 65.75) GiB x 0.95 / (160 KiB per token) / 2,176
    # tokens = ~39.8 requests -> 64 (a multiple of 32 below 256); 39.8 x (1 + 1/16) tokens -> 2,048
    got = trtllm_bench_limits(tp=1, pp=1, gpu_GiB=79.65, isl=128, osl=2048, **LLAMA70_FP8)
    gb_per_token = 2 * 80 * 8 * 128 / 2**30
    requests = (79.65 - 70.6e9 / 2**30) * 0.95 / gb_per_token / 2176
    assert 32 < requests < 64
    assert (got.max_batch_size, got.max_num_tokens) == (64, 2048)


def test_a_prefill_heavy_run_gets_large_steps_capped_at_32768_tokens() -> None:
    got = trtllm_bench_limits(tp=8, pp=1, gpu_GiB=79.65, isl=2048, osl=128, **LLAMA70_FP8)
    assert got.max_num_tokens == 28672 and got.max_batch_size == 1792  # 1,668 requests x 17 tokens
    short = trtllm_bench_limits(tp=8, pp=1, gpu_GiB=140.4, isl=20000, osl=128, **LLAMA70_FP8)
    assert short.max_num_tokens == 32768


def test_requests_cap_at_4096_and_divide_over_pipeline_stages() -> None:
    eight_b = dict(
        params=8.0e9, layers=32, kv_heads=8, head_dim=128, weights_precision="fp8", kv_precision="fp8"
    )
    one = trtllm_bench_limits(tp=1, pp=1, gpu_GiB=140.4, isl=128, osl=128, **eight_b)
    assert (one.max_batch_size, one.max_num_tokens) == (4096, 8192)
    four = trtllm_bench_limits(tp=1, pp=4, gpu_GiB=140.4, isl=128, osl=128, **eight_b)
    assert four.max_batch_size == 1024 and four.max_num_tokens == 2048


def test_bad_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="isl"):
        trtllm_bench_limits(tp=1, pp=1, gpu_GiB=80, isl=0, osl=128, **LLAMA70_FP8)


def test_the_perf_overview_rows_take_the_bench_limits_and_others_do_not() -> None:
    rows = {r["id"]: r for r in load_rows()}
    table = map_row(rows["srv-0333"])  # v0.17, Llama 3.1 70B FP8, TP1 H100, 128/2048
    assert not isinstance(table, Skipped)
    assert (table.plan.max_batch, table.plan.max_num_tokens) == (64, 2048)
    assert any("trtllm-bench" in a for a in table.assumptions)
    online = map_row(rows["srv-0633"])  # v0.14 online (Triton): the library defaults
    assert not isinstance(online, Skipped)
    assert (online.plan.max_batch, online.plan.max_num_tokens) == (2048, 8192)
