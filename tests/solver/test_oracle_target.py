"""A restricted search is still exact: with one recompute mode for every stage, a subset of
modes, and a layout filter of the kind a framework's rules make (solver.target), the solver's
optimum equals exhaustive enumeration of the same restricted space, and its plan obeys them.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from paraplan.cost import DEFAULT_ORDER, Axis, PartialPlan, Plan, Recompute, evaluate
from paraplan.cost.split import chunk_layers
from paraplan.rules import SearchLimits
from paraplan.solver import Options
from paraplan.solver.enumerate import enumerate_plans
from paraplan.solver.limits import narrowed

from tests.seeds import seeds
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


# ----------------------------------------------------------------------------- several frameworks


def _frameworks(rng: random.Random) -> list[tuple[object, SearchLimits]]:
    """Two to four made-up frameworks: each a layout filter (some of FILTERS) and per-stage
    limits (even stages, a framework split, a subset of modes, partial recompute)."""
    out: list[tuple[object, SearchLimits]] = []
    for _ in range(rng.randint(2, 4)):
        chosen = [FILTERS[n] for n in rng.sample(sorted(FILTERS), rng.randint(0, 2))]
        limits = SearchLimits(
            uniform_recompute=rng.random() < 0.7,
            even_stages=rng.random() < 0.3,
            recompute_modes=rng.choice([None, (Recompute.NONE, Recompute.FULL), (Recompute.SELECTIVE,)]),
            stage_split=front_heavy_split if rng.random() < 0.3 else None,
            partial_recompute=rng.random() < 0.5,
        )
        out.append(((lambda fs: lambda p: all(f(p) for f in fs))(chosen), limits))
    return out


def union_options(options: Options, frameworks: list[tuple[object, SearchLimits]]) -> Options:
    """One search over the union of the frameworks' searches (as targets.runnable_options builds
    it): a layout passes when some framework's filter does, and is searched under the limits of
    each framework that accepts it; the options' own per-stage fields hold all of them."""

    def limits(layout: object) -> tuple[SearchLimits, ...]:
        return tuple(dict.fromkeys(lim for f, lim in frameworks if f(layout)))  # type: ignore[operator]

    lims = [lim for _, lim in frameworks]
    return replace(
        options,
        uniform_recompute=options.uniform_recompute and all(lim.uniform_recompute for lim in lims),
        allow_uneven_stages=options.allow_uneven_stages and not all(lim.even_stages for lim in lims),
        recompute_modes=None,
        stage_split=None,
        partial_recompute=options.partial_recompute and any(lim.partial_recompute for lim in lims),
        layout_filter=lambda p: bool(limits(p)),
        layout_limits=limits,
    )


@pytest.mark.parametrize("seed", seeds(16, fast=(0, 2, 3, 4, 5)))
def test_union_search_is_the_best_of_each_frameworks_own(seed: int) -> None:
    """The runnable default's one search (Options.layout_limits): the solver equals enumeration
    of the union space, and that is the least of each framework's own search (enumerated)."""
    rng = random.Random(7000 + seed)
    graph, cluster, job, fixed, options = random_instance(rng)
    frameworks = _frameworks(rng)
    union = union_options(options, frameworks)
    plan = check_against_enumeration(seed, (graph, cluster, job, fixed, union))
    own = []
    for f, lim in frameworks:
        narrow = replace(narrowed(options, lim), layout_filter=f)
        try:
            best = enumerate_plans(graph, cluster, job, fixed, narrow)
        except ValueError:  # a fixed recompute_layers this framework cannot run
            continue
        own.append((best.best_s, best.best, f, lim))
    found = [o for o in own if o[1] is not None]
    if plan is None:
        assert not found, seed
        return
    best_s = min(o[0] for o in found)
    step = evaluate(graph, cluster, job, plan).step_time_s
    assert step == pytest.approx(best_s, rel=1e-6), seed
    # the plan is one some framework's own search allows
    assert any(f(plan) and _within(plan, lim, options, fixed, graph.spec.num_layers) for f, lim in frameworks)


def _within(plan: Plan, lim: SearchLimits, options: Options, fixed: PartialPlan, num_layers: int) -> bool:
    """``plan``'s per-stage choices are ones ``lim`` (narrowing ``options``) allows."""
    o = narrowed(options, lim)
    if o.uniform_recompute and len(set(plan.recompute)) > 1:
        return False
    if o.recompute_modes is not None and not set(plan.recompute) <= set(o.recompute_modes):
        return False
    if (
        not o.partial_recompute
        and plan.recompute_layers
        and any(
            n < max(row)
            for n, row, r in zip(plan.recompute_layers, chunk_layers(plan), plan.recompute, strict=True)
            if r is Recompute.FULL
        )
    ):
        return False
    if fixed.layers_per_stage is not None:
        return True
    if o.stage_split is not None:
        return plan.layers_per_stage == o.stage_split(num_layers, plan.pp, plan.vp)
    return o.allow_uneven_stages or len(set(plan.layers_per_stage)) == 1
