"""cost/stage_build.py keeps block and end costs in one ``shared`` cache per solve: under the EP
overlap a MoE block's key holds dp, pp, vp and the schedule, and the blocks without an
all-to-all and the ends are kept under the key without them (``_plain_costs``). On random small
mixture-of-experts instances with every software state, the terms built through one cache over
many layouts (packed spans and the layouts' own) equal the terms each layout builds alone."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from paraplan.cost import CudaGraphs, MoEDispatcher, stage_terms
from paraplan.solver.space import layouts

from tests.solver.test_oracle_moe import state_free_moe_instance


@pytest.mark.parametrize("seed", range(4))
def test_terms_through_one_cache_equal_each_layouts_own(seed: int) -> None:
    rng = random.Random(9400 + seed)
    graph, cluster, job, fixed, options = state_free_moe_instance(rng, max_micro_batch=2, max_vp=2)
    space = layouts(graph.spec, cluster, job.seq_len, job.global_batch, fixed, options)
    sample = rng.sample(space, min(30, len(space)))
    shared: dict = {}
    checked = 0
    for layout in sample:
        for d, o, g in [
            (MoEDispatcher.ALLTOALL, True, CudaGraphs.NONE),
            (MoEDispatcher.DEEPEP, False, CudaGraphs.FULL),
        ]:
            plan = replace(layout, moe_dispatcher=d, moe_overlap=o, cuda_graphs=g)
            for packed in (False, True):
                try:
                    alone = stage_terms(graph, plan, job, cluster, packed=packed)
                except ValueError:
                    continue
                assert stage_terms(graph, plan, job, cluster, shared, packed=packed) == alone
                checked += 1
    assert checked
