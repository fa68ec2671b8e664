"""Optimal with Megatron's fine-grained activation offloading (job.offload_modules, issue 22): on
random small mixture-of-experts instances whose job offloads some modules' inputs, the solver's
optimum equals exhaustive enumeration (the offloaded bytes change each layout's memory rows and,
over a short host link, its time)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from paraplan.cost.plan import OffloadModule

from tests.seeds import seeds
from tests.solver.test_oracle import check_against_enumeration
from tests.solver.test_oracle_moe import random_moe_instance


def _offload_instance(seed: int):
    rng = random.Random(seed)
    graph, cluster, job, fixed, options = random_moe_instance(rng, small=True)
    modules = rng.sample(sorted(OffloadModule), rng.randint(1, 4))
    if OffloadModule.ATTN_PROJ in modules and OffloadModule.CORE_ATTN not in modules:
        modules.append(OffloadModule.CORE_ATTN)  # Megatron's rule (schema check_offload_modules)
    return graph, cluster, replace(job, offload_modules=frozenset(modules)), fixed, options


@pytest.mark.parametrize("seed", seeds(12, fast=(0, 1, 2, 3)))
def test_solver_matches_enumeration_with_offloading(seed: int) -> None:
    check_against_enumeration(7000 + seed, _offload_instance(7000 + seed))
