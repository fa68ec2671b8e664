"""The enumeration oracle scores a layout's shared per-stage work once (solver/enumerate.py
``_LayoutTerms``, the per-stage memory check): on random instances of every kind the oracle tests
draw (dense, MoE, heterogeneous blocks, mixed-GPU pools, uneven virtual pipeline, partial
recompute, a framework's restricted space) it finds the same best plan, the same step time to the
last bit and the same number of plans as scoring every plan from scratch."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from paraplan.solver.enumerate import enumerate_plans

from tests.solver.test_oracle import random_instance
from tests.solver.test_oracle_layers import random_layers_instance
from tests.solver.test_oracle_moe import random_moe_instance
from tests.solver.test_oracle_pools import random_pooled_instance
from tests.solver.test_oracle_recompute_layers import tight_instance
from tests.solver.test_oracle_target import restricted
from tests.solver.test_oracle_uneven_vp import uneven_vp_instance


def _restricted(seed: int) -> Any:
    rng = random.Random(seed)
    graph, cluster, job, fixed, options = random_instance(rng)
    return graph, cluster, job, fixed, restricted(rng, options)[0]


KINDS: dict[str, Callable[[int], Any]] = {
    "dense": lambda seed: random_instance(random.Random(seed)),
    "moe": lambda seed: random_moe_instance(random.Random(seed), small=True),
    "layers": lambda seed: random_layers_instance(random.Random(seed)),
    "pools": lambda seed: random_pooled_instance(random.Random(seed)),
    "uneven_vp": uneven_vp_instance,
    "partial_recompute": lambda seed: tight_instance(random.Random(seed)),
    "restricted": _restricted,
}

# seeds with hundreds to thousands of plans, most with pp > 1 (the memo is hit across recompute
# modes), partial recompute winning in pools 2001 and partial_recompute 1015
CASES = [
    ("dense", 1011),
    ("moe", 1),
    ("layers", 5007),
    ("pools", 2001),
    ("uneven_vp", 0),
    ("partial_recompute", 1015),
    ("restricted", 6002),
]


@pytest.mark.parametrize(("kind", "seed"), CASES)
def test_shared_layout_work_gives_the_same_enumeration(kind: str, seed: int) -> None:
    instance = KINDS[kind](seed)
    shared = enumerate_plans(*instance)
    scratch = enumerate_plans(*instance, share_layout_work=False)
    assert shared.num_plans == scratch.num_plans > 0
    assert shared.best == scratch.best
    assert shared.best_s == scratch.best_s
