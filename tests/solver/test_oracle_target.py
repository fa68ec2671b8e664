"""A restricted search is still exact: with one recompute mode for every stage, a subset of
modes, and a layout filter of the kind a framework's rules make (solver.target), the solver's
optimum equals exhaustive enumeration of the same restricted space, and its plan obeys them.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from paraplan.cost import DEFAULT_ORDER, Axis, Plan, Recompute
from paraplan.solver import Options

from tests.solver.test_oracle import check_against_enumeration, random_instance


def _effective(order: tuple[Axis, ...], plan: Plan) -> tuple[Axis, ...]:
    return tuple(a for a in order if plan.degree(a) > 1)


FILTERS = {
    # Megatron-FSDP builds a DP x TP mesh over the whole world: no ZeRO-2/3 with pp > 1
    "fsdp_without_pp": lambda p: p.zero < 2 or p.pp == 1,
    # frameworks without Megatron's sequence parallelism
    "no_sp": lambda p: not p.sequence_parallel,
    # the two rank orders Megatron's RankGenerator builds
    "megatron_orders": lambda p: (
        _effective(p.order, p)
        in (_effective(DEFAULT_ORDER, p), _effective((Axis.TP, Axis.CP, Axis.PP, Axis.DP), p))
    ),
    # plain DDP or full sharding only: ZeRO-0 must not be dropped as dominated
    "ddp_or_fsdp": lambda p: p.zero in (0, 3),
    "no_interleaving": lambda p: p.vp == 1,
}


def front_heavy_split(num_layers: int, pp: int, vp: int) -> tuple[int, ...] | None:
    """A framework-built split (DeepSpeed-like): blocks of vp layers, the remainder up front."""
    if num_layers % vp or num_layers // vp < pp:
        return None
    base, extra = divmod(num_layers // vp, pp)
    return tuple(vp * (base + (s < extra)) for s in range(pp))


def restricted(rng: random.Random, options: Options) -> tuple[Options, list[str]]:
    names = rng.sample(sorted(FILTERS), rng.randint(1, 3))
    chosen = [FILTERS[n] for n in names]
    modes = rng.choice([None, None, (Recompute.NONE, Recompute.FULL), (Recompute.SELECTIVE,)])
    split = front_heavy_split if rng.random() < 0.3 else None
    return replace(
        options,
        uniform_recompute=rng.random() < 0.8,
        recompute_modes=modes,
        layout_filter=lambda p: all(f(p) for f in chosen),
        stage_split=split,
    ), names


@pytest.mark.parametrize("seed", range(20))
def test_restricted_search_matches_enumeration(seed: int) -> None:
    rng = random.Random(5000 + seed)
    graph, cluster, job, fixed, options = random_instance(rng)
    options, names = restricted(rng, options)
    plan = check_against_enumeration(seed, (graph, cluster, job, fixed, options))
    if plan is None:
        return
    assert options.layout_filter(plan), (names, plan)
    if options.uniform_recompute:
        assert len(set(plan.recompute)) == 1
    if options.recompute_modes is not None:
        assert set(plan.recompute) <= set(options.recompute_modes)
    if options.stage_split is not None and fixed.layers_per_stage is None:
        assert plan.layers_per_stage == front_heavy_split(graph.spec.num_layers, plan.pp, plan.vp)


@pytest.mark.slow
def test_restricted_search_matches_enumeration_on_200_instances() -> None:
    outcomes = []
    for seed in range(6000, 6200):
        rng = random.Random(seed)
        graph, cluster, job, fixed, options = random_instance(rng)
        options, _ = restricted(rng, options)
        plan = check_against_enumeration(seed, (graph, cluster, job, fixed, options))
        outcomes.append("infeasible" if plan is None else "optimal")
    assert outcomes.count("optimal") > 100 and outcomes.count("infeasible") >= 1
