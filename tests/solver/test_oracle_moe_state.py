"""Optimal over the MoE software state too (issue 22 item 2): on random small mixture-of-experts
instances with the dispatcher, the EP overlap and the CUDA graphs left free, the solver's optimum
equals exhaustive enumeration of the same space (every state of every layout, no dominance), with
and without a layout filter that reads the state (then no state is dropped as dominated,
solver/states.py)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from paraplan.cost import CudaGraphs, Layout, MoEDispatcher, MoERouting
from paraplan.cost.plan import PartialPlan
from paraplan.graph import preset
from paraplan.hardware import build_cluster
from paraplan.solver import NoFitError, NoLayoutError, Options, SolverOptions, solve_instance
from paraplan.solver.space import layouts, software_states

from tests.seeds import seeds
from tests.solver.test_oracle import check_against_enumeration
from tests.solver.test_oracle_moe import state_free_moe_instance

SEARCH = Options(search_moe_state=True)
ORACLE_SOLVER = SolverOptions(time_limit_s=60, num_workers=1, random_seed=0)  # check_against_enumeration's
STATE_FILTERS = {
    # torchtitan-like: the standard all-to-all, no EP overlap, graphs only without pp and ep
    "alltoall_only": lambda p: p.moe_dispatcher is MoEDispatcher.ALLTOALL and not p.moe_overlap,
    # Megatron's overlap needs virtual pipeline stages under pp > 1
    "overlap_needs_vp": lambda p: not p.moe_overlap or p.pp == 1 or p.vp > 1,
    "no_partial_graphs": lambda p: p.cuda_graphs is not CudaGraphs.PARTIAL,
    # whole-iteration graphs win every unfiltered instance (their buffers never bind at these
    # sizes): without them the optimum is a partial or no-graph state, which the oracle must see
    "no_full_graphs": lambda p: p.cuda_graphs is not CudaGraphs.FULL,
}


def _state_free_instance(seed: int, filtered: bool):
    rng = random.Random(seed)
    graph, cluster, job, fixed, options = state_free_moe_instance(rng)
    if rng.random() < 0.3:
        job = replace(job, moe_routing=MoERouting.FORCE_BALANCED, expert_imbalance=None)
    if filtered:
        chosen = [STATE_FILTERS[n] for n in rng.sample(sorted(STATE_FILTERS), rng.randint(1, 2))]
        options = replace(options, layout_filter=lambda p: all(f(p) for f in chosen))
    return graph, cluster, job, fixed, options


def _check(seed: int, filtered: bool) -> Layout | None:
    instance = _state_free_instance(seed, filtered)
    plan = check_against_enumeration(seed, instance)
    if plan is not None and filtered:
        assert instance[4].layout_filter(plan)
    return plan


STATE_FREE_SEEDS = 24
"""Seeds 6000 + 0..23 of the state-free check: 0-11 here, 12-23 in
test_oracle_moe_state_more_seeds.py, the filtered checks in test_oracle_moe_state_filtered.py (CI
runs the slow tests file by file, pytest-xdist --dist loadfile: one file of all three was its
longest, about 12 minutes on two loaded cores)."""


@pytest.mark.parametrize("seed", seeds(STATE_FREE_SEEDS // 2, fast=(2,)))  # seeds 3, 10: 40-100 s loaded
def test_solver_matches_enumeration_with_the_moe_state_free(seed: int) -> None:
    _check(6000 + seed, filtered=False)


def test_the_generator_reaches_states_other_than_the_default() -> None:
    """The instances the state-free checks compare with enumeration (STATE_FREE_SEEDS, here and in
    test_oracle_moe_state_more_seeds.py) have optima in several software states, so that test's equality
    covers the state search and not only the default state: the solver alone on the same seeds
    (enumeration there confirms each optimum) reaches a dispatcher other than the all-to-all and
    the EP overlap. Before 2026-12-02 (thirteenth session) this ran enumeration on 30 instances
    of its own: about nine minutes of CI's slowest file for the same question."""
    states = set()
    for seed in range(STATE_FREE_SEEDS):
        graph, cluster, job, fixed, options = _state_free_instance(6000 + seed, filtered=False)
        try:
            out = solve_instance(graph, cluster, job, fixed, options, ORACLE_SOLVER)
        except (NoFitError, NoLayoutError):
            continue
        states.add(_state(out.solutions[0].plan))
    assert any(d is not MoEDispatcher.ALLTOALL for d, _, _ in states), states
    assert any(o for _, o, _ in states), states
    assert len(states) >= 3, states
    # whole-iteration graphs win those; the filtered checks (seeds 7000 + 0..15, some without full
    # graphs: STATE_FILTERS) reach the partial and the no-graph optima
    graphs = set()
    for seed in range(16):
        graph, cluster, job, fixed, options = _state_free_instance(7000 + seed, filtered=True)
        try:
            out = solve_instance(graph, cluster, job, fixed, options, ORACLE_SOLVER)
        except (NoFitError, NoLayoutError):
            continue
        graphs.add(out.solutions[0].plan.cuda_graphs)
    assert {CudaGraphs.NONE, CudaGraphs.PARTIAL} <= graphs, graphs


def _state(p: Layout) -> tuple[MoEDispatcher, bool, CudaGraphs]:
    return p.moe_dispatcher, p.moe_overlap, p.cuda_graphs


def test_the_space_holds_every_state_on_moe_models_only() -> None:
    node = build_cluster("dgx-h100", gpus=8)
    moe = preset("qwen3-30b-a3b")
    free = PartialPlan(tp=1, pp=1, cp=1, micro_batch=1, zero=1)
    found = {
        (p.moe_dispatcher, p.moe_overlap, p.cuda_graphs)
        for p in layouts(moe, node, 4096, 64, replace(free, ep=8), SEARCH, prune_dominated=False)
    }
    assert found == {(d, o, g) for d in MoEDispatcher for o in (False, True) for g in CudaGraphs}
    # ep = 1: nothing to dispatch, nothing to overlap; the graphs still change host time
    one = {
        (p.moe_dispatcher, p.moe_overlap, p.cuda_graphs)
        for p in layouts(moe, node, 4096, 64, replace(free, ep=1), SEARCH)
    }
    assert one == {(MoEDispatcher.ALLTOALL, False, g) for g in CudaGraphs}
    dense = {
        (p.moe_dispatcher, p.moe_overlap, p.cuda_graphs)
        for p in layouts(preset("llama3-8b"), node, 4096, 64, free, SEARCH)
    }
    assert dense == {(MoEDispatcher.ALLTOALL, False, CudaGraphs.NONE)}
    # off (the scenario's default), the unset fields take their defaults
    off = {_state(p) for p in layouts(moe, node, 4096, 64, replace(free, ep=8), Options())}
    assert off == {(MoEDispatcher.ALLTOALL, False, CudaGraphs.NONE)}
    # a user's value fixes the field
    fixed = replace(free, ep=8, moe_dispatcher=MoEDispatcher.DEEPEP, moe_overlap=True)
    assert {s[:2] for s in software_states(moe, node, 8, fixed)} == {(MoEDispatcher.DEEPEP, True)}


def test_with_state_builds_what_replace_builds() -> None:
    """solver/states.py ``with_state`` copies a Layout into another MoE software state without
    re-running check_structure (it reads no state field): the same value, hash and type as
    ``dataclasses.replace``; a Plan goes through replace."""
    from paraplan.cost import Plan, Recompute
    from paraplan.solver.states import with_state

    family = Layout(dp=4, tp=2, pp=2, cp=1, ep=4, etp=1, vp=2, micro_batch=2, zero=0, sequence_parallel=True)
    plan = Plan(dp=4, tp=2, pp=2, ep=4, layers_per_stage=(8, 8), recompute=(Recompute.FULL,) * 2)
    for d, o, g in [(d, o, g) for d in MoEDispatcher for o in (False, True) for g in CudaGraphs]:
        for layout in (family, plan):
            built = with_state(layout, (d, o, g))
            expected = replace(layout, moe_dispatcher=d, moe_overlap=o, cuda_graphs=g)
            assert built == expected and hash(built) == hash(expected) and type(built) is type(expected)
