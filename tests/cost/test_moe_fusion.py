"""Issue 22: Megatron's router and permute fusion (job.moe_router_fusion, job.moe_permute_fusion):
the launches an unfused router and permute add to a MoE layer (cost/host.py fusion_launch_s), the
Megatron-LM flags and Bridge fields the exports write, the frameworks that refuse them by name
(rules/moe_fusion.py), and bad values refused naming the field."""

from __future__ import annotations

from functools import cache

import pytest
from paraplan.cost import CudaGraphs, Job
from paraplan.cost.host import (
    TORCH_OP_LAUNCH_S,
    fusion_launch_s,
    permute_unfused_kernels,
    router_unfused_kernels,
)
from paraplan.graph import preset

import paraplan
from paraplan.errors import ConfigError, ExportError
from paraplan.export import export_text
from paraplan.result import Result

DSV3 = preset("deepseek-v3").router
QWEN3 = preset("qwen3-30b-a3b").router
JOB = Job(seq_len=4096, global_batch=64)


def test_deepseek_v3s_unfused_router_counts_its_group_limited_sigmoid_top_k_and_aux_loss() -> None:
    # forward: sigmoid 2 + bias 2 + group top-k 10 + normalise 3 + scale 1 + cast 1 + maps 6 = 25,
    # aux-loss scores 5 + 1 + 4 and loss 4 = 14, less the 3 fused kernels; backward 8 + 6 - 3
    assert router_unfused_kernels(DSV3, 8) == (25 + 14 - 3, 8 + 6 - 3)
    # Qwen3: softmax 1, top-k 1, cast 1, maps 6 = 9; aux-loss softmax 1, top-k 1, map 4, loss 4 = 10
    assert router_unfused_kernels(QWEN3, 8) == (9 + 10 - 3, 8 + 6 - 3)


def test_unfused_launches_are_kernels_times_the_op_launch_and_graphs_capture_them() -> None:
    router, permute = router_unfused_kernels(DSV3, 8), permute_unfused_kernels()
    none = fusion_launch_s(JOB, DSV3, 8, CudaGraphs.NONE)
    assert none.forward_s == pytest.approx((router[0] + permute[0]) * TORCH_OP_LAUNCH_S)
    assert none.backward_s == pytest.approx((router[1] + permute[1]) * TORCH_OP_LAUNCH_S)
    # partial graphs capture the moe_router scope, not the unpermute after the experts
    assert fusion_launch_s(JOB, DSV3, 8, CudaGraphs.PARTIAL).forward_s == pytest.approx(
        permute[0] * TORCH_OP_LAUNCH_S
    )
    assert fusion_launch_s(JOB, DSV3, 8, CudaGraphs.FULL) == (0.0, 0.0)
    fused = Job(seq_len=4096, global_batch=64, moe_router_fusion=True, moe_permute_fusion=True)
    assert fusion_launch_s(fused, DSV3, 8, CudaGraphs.NONE) == (0.0, 0.0)


def _scenario(target: str = "megatron", **job: object) -> dict:
    return {
        "model": {"preset": "qwen3-30b-a3b"},
        "cluster": {"preset": "dgx-h100", "nodes": 2},
        "job": {"seq_len": 4096, "global_batch": 256, **job},
        "plan": {"dp": 16, "tp": 1, "pp": 1, "ep": 8, "micro_batch": 1, "zero": 1, "recompute": "selective"},
        "solver": {"target": target, "memory_headroom": 0},  # plans at the edge (round trip)
    }


@cache
def _result(router: bool, permute: bool, target: str = "megatron") -> Result:
    return paraplan.evaluate(_scenario(target, moe_router_fusion=router, moe_permute_fusion=permute))


def test_a_launch_bound_moe_step_is_slower_unfused() -> None:
    """Qwen3-30B-A3B at micro-batch 1 on 16 H100 (128 experts, 16 local): its MoE passes are
    launch-bound in the model, so each unfused kernel's launch lengthens the step."""
    fused = _result(True, True).predicted.step_time_s
    assert _result(True, False).predicted.step_time_s > fused
    assert _result(False, True).predicted.step_time_s > fused
    assert _result(False, False).predicted.step_time_s > _result(True, False).predicted.step_time_s


def test_megatron_writes_the_fusion_flags_and_nemo_the_fields() -> None:
    lines = export_text(_result(True, True), "megatron")
    assert "--moe-router-fusion" in lines and "--moe-permute-fusion" in lines
    plain = export_text(_result(False, False), "megatron")
    assert "--moe-router-fusion" not in plain and "--moe-permute-fusion" not in plain
    nemo = export_text(_result(True, False, "nemo"), "nemo")
    assert "'model.moe_router_fusion': True," in nemo and "'model.moe_permute_fusion': False," in nemo


@pytest.mark.parametrize("target", ["torchtitan"])
def test_frameworks_without_the_fused_kernels_refuse_them_by_name(target: str) -> None:
    assert export_text(_result(False, False, target), target)
    with pytest.raises(ExportError, match=r"job\.moe_permute_fusion=true: .*\(run by: megatron, nemo"):
        export_text(_result(False, True, target), target)


def test_a_bad_value_is_refused_naming_the_field() -> None:
    with pytest.raises(ConfigError, match="moe_router_fusion"):
        paraplan.evaluate(_scenario(moe_router_fusion="sometimes"))


def test_a_result_with_the_fusion_fields_round_trips() -> None:
    """The result's plan, fixed as the scenario's plan: beside the fields, evaluates and solves to
    the same plan and step (tests/test_plan_round_trip.py); the fields stay the job's."""
    from tests.test_plan_round_trip import assert_round_trips

    r = _result(True, False)
    assert r.scenario["job"]["moe_router_fusion"] is True
    assert_round_trips(r)
