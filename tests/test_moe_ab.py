"""Published one-setting MoE pairs: the predicted step-time ratio within 7 points of the measured one
(issue 22, "A/B tests"; benchmarks/moe_pairs.py lists the pairs and their sources).

The DeepSeek-V3 GB200 ladder steps whose change is no plan knob (kernel fusions, CPU binding,
PDL, DeepEP tuning) are predicted as ratio 1 (dropping the MLA up-projection recompute is
``job.recompute_modules``, cost/recompute_modules.py, the router and permute fusion
``job.moe_router_fusion`` / ``job.moe_permute_fusion``, cost/host.py); those that miss by more than 7 points
are listed in KNOWN_MISSES with the reason, and strict xfail makes the test fail when one starts
to pass (the list is then updated rather than forgotten).
"""

from __future__ import annotations

import pytest

from benchmarks.moe_pairs import PAIRS, RATIO_POINTS, pair_ratios

_NO_KNOB = "the step changes no plan knob paraplan has"
KNOWN_MISSES: dict[tuple[int, int], str] = {
    (2061, 2062): "fused torch.zeros and the permute kernel (+7.1%): the permute fusion is "
    "job.moe_permute_fusion, but its launches hide under DeepSeek-V3's GPU time at micro-batch 1 "
    "in the model, whose pass is GPU-bound where the ladder's is host-bound (docs/moe_physics.md "
    "Sec. 5.9); the zeros fusion is no setting a framework exposes",
    (2067, 2068): f"{_NO_KNOB}: CPU-side NUMA binding (bindpcie; +10.2%), a host setting with no "
    "per-launch cost in any source",
    (2063, 2064): "DeepEP on GB200 costed slower than NCCL inside the NVL72 domain (its measured "
    "~190 GB/s combine there and the DeepEP B200 table's 390 us fixed time), where the ladder "
    "measured +4.8%: the step also brought DeepEP's fused router and preprocess (17 kernels), "
    "host time in a host-bound pass (docs/moe_physics.md Sec. 5.9: every published DeepEP "
    "figure on Blackwell is below NCCL's in-rack all-to-all)",
    (2065, 2066): "partial CUDA graphs: the launches the model counts hide under DeepSeek-V3's "
    "GPU time at micro-batch 1 on GB200; the ladder measured +8.6% (attention and post-sync "
    "launches are not counted; docs/moe_physics.md Sec. 5.9; counting them puts most of the host "
    "time inside the partial scopes and overshoots, +31 points, Sec. 5.12)",
}


@pytest.fixture(scope="module")
def ratios():
    return {(p.a, p.b): p for p in pair_ratios()}


def test_every_pair_is_scored(ratios) -> None:
    assert {(a, b) for a, b, _ in PAIRS} == set(ratios)


@pytest.mark.parametrize("pair", [(a, b) for a, b, _ in PAIRS], ids=lambda p: f"{p[0]}/{p[1]}")
def test_pair_ratio_within_7_points(ratios, pair, request) -> None:
    if pair in KNOWN_MISSES:
        request.applymarker(pytest.mark.xfail(reason=KNOWN_MISSES[pair], strict=True))
    p = ratios[pair]
    assert abs(p.points) <= RATIO_POINTS, (
        f"{p.what}: published {p.published:.3f}, predicted {p.predicted:.3f}"
    )
