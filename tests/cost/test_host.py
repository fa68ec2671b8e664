"""The MoE host term (cost/host.py): per-expert launches by precision, and graph scopes."""

from __future__ import annotations

import pytest
from paraplan.cost import host
from paraplan.cost.plan import CudaGraphs, Layout, Precision
from paraplan.hardware.efficiency import efficiency

FP8_FAMILY = (Precision.FP8, Precision.FP8_BLOCKWISE, Precision.MXFP8, Precision.NVFP4)


def _plan(graphs: CudaGraphs) -> Layout:
    return Layout(tp=1, pp=1, dp=8, cp=1, ep=8, micro_batch=1, cuda_graphs=graphs)


def test_bf16_expert_launches_are_a_subset_of_the_fp8_recipes():
    """BF16 runs each expert's GEMMs unquantised: fewer launches than any FP8 / FP4 recipe, whose
    per-expert casts add their own (the fitted value keeps the bound calibrate_moe imposes)."""
    assert 0 < host.EXPERT_LAUNCH_BF16_S < host.EXPERT_LAUNCH_S
    assert host.expert_launch_s(Precision.BF16) == host.expert_launch_s(Precision.FP16)
    for p in FP8_FAMILY:
        assert host.expert_launch_s(p) == host.EXPERT_LAUNCH_S


@pytest.mark.parametrize("graphs", [CudaGraphs.NONE, CudaGraphs.PARTIAL])
def test_launch_time_grows_with_local_experts_by_the_precision_s_cost(graphs: CudaGraphs):
    eff = efficiency("hopper")
    plan = _plan(graphs)
    for p in (Precision.BF16, Precision.MXFP8):
        step = host.moe_launch_s(plan, 17, eff, p) - host.moe_launch_s(plan, 16, eff, p)
        assert step == pytest.approx(host.expert_launch_s(p))
    none = host.moe_launch_s(_plan(CudaGraphs.NONE), 0, eff, Precision.BF16)
    partial = host.moe_launch_s(_plan(CudaGraphs.PARTIAL), 0, eff, Precision.BF16)
    assert partial == pytest.approx(none * host.PARTIAL_UNCAPTURED)


def test_full_graphs_launch_nothing_from_the_host():
    eff = efficiency("hopper")
    for p in (Precision.BF16, Precision.FP8):
        assert host.moe_launch_s(_plan(CudaGraphs.FULL), 16, eff, p) == 0.0
