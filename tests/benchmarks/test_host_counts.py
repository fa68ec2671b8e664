"""benchmarks/host_counts.py: the counted host launches of docs/moe_physics.md Sec. 5.12 (issue 22,
tried and not kept): the counts per scope, the formula, and that the experiment leaves the cost
model as it found it."""

from __future__ import annotations

import paraplan.cost.block as block_module
import paraplan.cost.host as host
import pytest
from paraplan.cost.host import permute_unfused_kernels, router_unfused_kernels
from paraplan.cost.plan import CudaGraphs, Job, Layout, MoEDispatcher, Precision
from paraplan.graph.presets import preset
from paraplan.graph.spec import ModelSpec

from benchmarks.host_counts import (
    HostCounts,
    Launches,
    attention_launches,
    block_launches,
    counted,
    counted_launch_s,
    rest_launches,
)


def _spec(name: str) -> ModelSpec:
    return preset(name)


def test_mla_with_a_q_latent_calls_seven_te_modules_gqa_with_qk_norm_five() -> None:
    # MLA: input norm, q_down, q_up, kv_down, kv_up, core attention, proj; Qwen3: qkv, q / k norm, core, proj
    assert attention_launches(_spec("deepseek-v3")).te == 7
    assert attention_launches(_spec("qwen3-30b-a3b")).te == 5


def test_partial_graphs_leave_only_what_no_scope_captures_and_full_graphs_nothing() -> None:
    spec, job = _spec("deepseek-v3"), Job(seq_len=4096, global_batch=8)
    args = (spec, job, MoEDispatcher.ALLTOALL)
    none = block_launches(*args, CudaGraphs.NONE, 30, 6)
    partial = block_launches(*args, CudaGraphs.PARTIAL, 30, 6)
    assert partial == rest_launches(job, 6)
    assert none.te == 7 + 1 + 2  # attention, the pre-MLP norm, the shared expert's fc1 / fc2
    assert none.grouped == partial.grouped == 2  # the experts' fc1 / fc2 run outside every partial scope
    assert none.ops > partial.ops
    assert block_launches(*args, CudaGraphs.FULL, 30, 6) == Launches(0, 0)


def test_unfused_router_and_permute_add_their_kernels_as_ops() -> None:
    spec = _spec("deepseek-v3")
    fused = Job(seq_len=4096, global_batch=8, moe_router_fusion=True, moe_permute_fusion=True)
    unfused = Job(seq_len=4096, global_batch=8)
    a = block_launches(spec, fused, MoEDispatcher.DEEPEP, CudaGraphs.NONE, 30, 6)
    b = block_launches(spec, unfused, MoEDispatcher.DEEPEP, CudaGraphs.NONE, 30, 6)
    assert b.ops - a.ops == 30 + 6
    assert a.te == b.te


def test_counted_launch_time_is_the_counts_times_their_costs_times_the_grace_factor() -> None:
    spec = _spec("deepseek-v3")
    job = Job(seq_len=4096, global_batch=8, precision=Precision.MXFP8)
    plan = Layout(tp=1, pp=1, dp=1, ep=1, micro_batch=1, cuda_graphs=CudaGraphs.NONE)
    p = HostCounts(te_call_us=50.0, te_call_fp8_us=300.0, grace_factor=1.5, grouped_call_us=20.0)
    n = block_launches(
        spec,
        job,
        plan.moe_dispatcher,
        CudaGraphs.NONE,
        router_unfused_kernels(spec.router, 8)[0],
        permute_unfused_kernels()[0],
    )
    # x86: 300 us per TE call (MXFP8), 20 us per grouped call, 10 us per op, 8 x the FP8 expert launch
    x86 = 300e-6 * n.te + 20e-6 * n.grouped + host.TORCH_OP_LAUNCH_S * n.ops + 8 * host.EXPERT_LAUNCH_S
    assert counted_launch_s(spec, job, plan, 8, "b200", 8, p) == pytest.approx(x86)
    assert counted_launch_s(spec, job, plan, 8, "gb200", 8, p) == pytest.approx(1.5 * x86)


def _model_state() -> tuple[object, ...]:
    return (block_module.moe_launch_s, block_module.fusion_launch_s, host.EXPERT_LAUNCH_S, host.MOE_SYNC_S)


def test_the_experiment_restores_the_cost_model() -> None:
    saved = _model_state()
    with counted(HostCounts(expert_launch_us=1.0, sync_us=0.0)):
        assert host.EXPERT_LAUNCH_S == pytest.approx(1e-6)
        assert block_module.moe_launch_s is not saved[0]
    assert _model_state() == saved
