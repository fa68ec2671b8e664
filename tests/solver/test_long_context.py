"""Long context: million-token jobs plan with large cp or say which resource binds; the solver
searches the context-parallel K/V exchange (p2p ring or all-gather) when free, keeps it when fixed."""

from __future__ import annotations

import pytest

import paraplan
from paraplan.errors import InfeasibleError


def _scenario(seq_len: int, gpus: int, global_batch: int, **plan: object) -> dict:
    return {
        "model": {"preset": "llama3-8b"},
        "cluster": {"preset": "dgx-h100", "gpus": gpus},
        "job": {"seq_len": seq_len, "global_batch": global_batch},
        "plan": plan,
    }


def test_million_token_job_plans_on_64_h100_with_large_cp() -> None:
    res = paraplan.solve(_scenario(1_048_576, 64, 64), time_limit_s=60, workers=2)
    assert res.solver is not None and res.solver.status == "OPTIMAL"
    assert res.plan.cp * res.plan.tp >= 16  # the sequence must be split across many ranks
    assert res.predicted.fits_memory


def test_million_token_job_on_one_node_says_memory_binds() -> None:
    with pytest.raises(InfeasibleError, match="no plan fits memory.*shorten job.seq_len"):
        paraplan.solve(_scenario(1_048_576, 8, 8), time_limit_s=30, workers=2)


@pytest.fixture(scope="module")
def cp_solves() -> dict[str | None, paraplan.Result]:
    out = {}
    for mode in (None, "p2p", "all_gather"):
        knobs = {"cp": 8} | ({"cp_comm": mode} if mode else {})
        out[mode] = paraplan.solve(_scenario(131_072, 16, 16, **knobs), time_limit_s=30, workers=2)
    return out


def test_fixed_cp_comm_is_respected(cp_solves) -> None:
    assert cp_solves["p2p"].plan.cp_comm == "p2p"
    assert cp_solves["all_gather"].plan.cp_comm == "all_gather"


def test_free_cp_comm_takes_the_faster_exchange(cp_solves) -> None:
    best = min(cp_solves[m].predicted.step_time_s for m in ("p2p", "all_gather"))
    assert cp_solves[None].predicted.step_time_s == pytest.approx(best, rel=1e-3)


@pytest.mark.parametrize("cp", [4, 16])
def test_cp_exchange_across_nodes_matches_enumeration(cp: int) -> None:
    """cp spanning two nodes, where the all-gather exchange is searched (not dominated)."""
    from paraplan.cost import Job
    from paraplan.cost.plan import PartialPlan
    from paraplan.graph import ModelSpec, build_graph
    from paraplan.hardware import build_cluster
    from paraplan.solver import Options

    from tests.solver.test_oracle import check_against_enumeration

    spec = ModelSpec(
        name="small", num_layers=4, hidden=1024, ffn_hidden=4096, num_heads=8, num_kv_heads=2, vocab=32000
    )
    instance = (
        build_graph(spec),
        build_cluster("dgx-h100", nodes=2),
        Job(seq_len=65536, global_batch=16),
        PartialPlan(cp=cp, order=None),
        Options(max_micro_batch=1, max_vp=1),
    )
    plan = check_against_enumeration(cp, instance)
    assert plan is not None and plan.cp == cp
