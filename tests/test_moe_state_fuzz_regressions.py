"""Fuzzer finds of 2026-12-02 with the MoE software state searched (issue 22 item 2;
``solver.search_moe_state: true`` on the fuzz driver's MoE cases, seed 22), kept as regressions.

- DeepEP / HybridEP were searched on accelerators the cost model has no SM count for
  (rtx-pro-6000, gh200-96gb: hardware/data/dispatch.yaml): ValueError from sm_count. The search
  now offers only the dispatchers the cost model can cost on every pool (solver/space.py).
- The fuzz checker's tp/pp/dp/cp neighbours kept etp = tp after changing tp (ValueError from
  check_expert_tp while building the neighbour, before it could correct etp).
- Found beside them: a fixed DeepEP with the EP overlap on such an accelerator raised the same
  ValueError from the search (an internal error); it is a ConfigError naming plan.moe_dispatcher
  now (paraplan/instance.py), where the overlap can be on.
"""

from __future__ import annotations

from paraplan.cost import MoEDispatcher
from paraplan.cost.plan import PartialPlan
from paraplan.graph import preset
from paraplan.hardware import build_cluster
from paraplan.solver.space import software_states

from benchmarks.fuzz import make_case
from benchmarks.fuzz_checks import run_case


def test_dispatchers_the_cost_model_cannot_cost_are_not_searched() -> None:
    spec = preset("qwen3-30b-a3b")
    rtx = build_cluster("rtx-pro-6000-8gpu", gpus=16)
    found = {d for d, _, _ in software_states(spec, rtx, 8, PartialPlan())}
    assert found == {MoEDispatcher.ALLTOALL, MoEDispatcher.ALLGATHER}
    h100 = build_cluster("dgx-h100", gpus=16)
    assert {d for d, _, _ in software_states(spec, h100, 8, PartialPlan())} == set(MoEDispatcher)


def test_neighbours_of_an_expert_tp_plan_keep_a_valid_etp(tmp_path) -> None:
    """The fuzzer's own case (seed 22000270: Mixtral 8x7B on 48 H100), with the state searched."""
    case, deep = make_case(22000270, time_limit_s=3.0, deep_share=0.3)
    case.scenario.setdefault("solver", {})["search_moe_state"] = True
    out = run_case(case, tmp_path, deep=True)  # raised ValueError (check_expert_tp) before the fix
    assert out is not None


def test_a_fixed_dispatcher_the_cost_model_cannot_cost_is_a_config_error() -> None:
    """Found beside the fuzz run: DeepEP fixed with the EP overlap on an RTX PRO 6000 cluster
    raised a bare ValueError (sm_count) from the search, an internal error."""
    import pytest

    import paraplan

    scenario = {
        "model": {"preset": "qwen3-30b-a3b"},
        "cluster": {"preset": "rtx-pro-6000-8gpu", "gpus": 16},
        "job": {"seq_len": 4096, "global_batch": 64},
        "plan": {"moe_dispatcher": "deepep", "ep": 8, "moe_overlap": True},
    }
    with pytest.raises(paraplan.ConfigError, match="plan.moe_dispatcher=deepep"):
        paraplan.solve(scenario, time_limit_s=10.0, workers=1)
