"""The memos the MoE software-state dominance (solver/states.py) shares give the values they
stand for (issue 22 item 7, eighth round):

- ``_work`` takes each block kind's work from stage_terms' cache (cost/stage_build.py
  ``layout_works``): equal to ``block_work`` of the layout itself, for layouts that share the
  cache entry (other dp, pp, vp, ZeRO stage, dispatcher);
- ``_drop_dispatchers`` keeps a dispatcher's profile by the dispatcher, the micro-batch and the
  EP spans' key: equal to the profile of each family that finds it there (other vp, ZeRO stages,
  overlaps, CUDA graphs).
"""

from __future__ import annotations

import random

import pytest
from paraplan.cost.block import block_work
from paraplan.cost.plan import plan_key
from paraplan.cost.stage_build import layout_works
from paraplan.solver.space import layouts
from paraplan.solver.states import _SPAN_IGNORES, _profile, _spans

from tests.solver.test_oracle_moe import state_free_moe_instance


def _instance(seed: int):
    rng = random.Random(seed)
    graph, cluster, job, fixed, options = state_free_moe_instance(rng, max_micro_batch=2, max_vp=2)
    space = layouts(graph.spec, cluster, job.seq_len, job.global_batch, fixed, options)
    return graph, cluster, job, fixed, space


@pytest.mark.parametrize("seed", range(4))
def test_shared_works_equal_each_layouts_own(seed: int) -> None:
    graph, cluster, job, _, space = _instance(seed)
    shared: dict[tuple[object, ...], object] = {}
    hits = 0
    for layout in random.Random(seed).sample(space, min(300, len(space))):
        before = len(shared)
        blocks = layout_works(graph, layout, job, cluster, shared)[0]
        hits += len(shared) == before
        assert blocks == tuple(block_work(graph, i, layout, job, cluster) for i in graph.kind_blocks)
    assert hits  # some layouts found their works in the cache (else nothing was checked)


@pytest.mark.parametrize("seed", range(4))
def test_a_dispatcher_profile_is_the_same_for_every_family_of_its_key(seed: int) -> None:
    graph, cluster, job, fixed, space = _instance(seed)
    if cluster.pools or cluster.torus is not None:
        pytest.skip("no dispatcher dominance there")
    memo: dict[object, object] = {}
    by_key: dict[tuple[object, ...], list[float]] = {}
    shared = 0
    for layout in (f for f in space if f.ep > 1):
        key = (layout.moe_dispatcher, layout.micro_batch, *plan_key(layout, _SPAN_IGNORES))
        profile = _profile(graph, layout, job, cluster, _spans(layout, cluster, fixed, memo))
        if key in by_key:
            shared += 1
            assert profile == by_key[key]
        by_key.setdefault(key, profile)
    if by_key:
        assert shared
