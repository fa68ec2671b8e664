"""cost.derive builds what dataclasses.replace builds (equal, same hash, same type), faster, and
refuses what replace refuses: a broken knob with the same ValueError, an unknown name a TypeError."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from paraplan.cost import Axis, Layout, Plan, Recompute
from paraplan.cost.derive import UNCHECKED, derive
from paraplan.cost.plan import LAYOUT_FIELDS, PLAN_FIELDS, CPComm
from paraplan.cost.software import CudaGraphs, MoEDispatcher

BASE = Layout(dp=8, tp=4, pp=4, cp=2, vp=2, micro_batch=2, zero=1)
PLAN = BASE.plan((8, 8, 8, 8), (Recompute.NONE,) * 4)
CHANGES: list[dict[str, object]] = [
    {"zero": 0},
    {"zero": 3},
    {"order": (Axis.CP, Axis.TP, Axis.PP, Axis.DP)},
    {"order": (Axis.TP, Axis.CP, Axis.DP, Axis.PP), "torus_shape": (4, 4, 8)},
    {"sequence_parallel": False},
    {"cp_comm": CPComm.ALL_GATHER},
    {"moe_dispatcher": MoEDispatcher.ALLGATHER, "moe_overlap": True, "cuda_graphs": CudaGraphs.FULL},
    {"tp": 2, "etp": 1},
    {"dp": 16, "micro_batch": 1, "stage_pools": (0, 0, 1, 1)},
]


@pytest.mark.parametrize("base", [BASE, PLAN])
@pytest.mark.parametrize("changes", CHANGES)
def test_derive_builds_what_replace_builds(base: Layout, changes: dict[str, object]) -> None:
    new = derive(base, **changes)
    assert new == replace(base, **changes) and hash(new) == hash(replace(base, **changes))
    assert type(new) is type(base)
    names = PLAN_FIELDS if isinstance(base, Plan) else LAYOUT_FIELDS
    for name in names:
        assert getattr(new, name) == changes.get(name, getattr(base, name))


BROKEN: list[dict[str, object]] = [
    {"zero": 4},
    {"dp": 0},
    {"order": (Axis.TP, Axis.TP, Axis.DP, Axis.PP)},
    {"etp": 3},
    {"pp_schedule": "gpipe"},
]


@pytest.mark.parametrize("changes", BROKEN)
def test_derive_refuses_what_replace_refuses(changes: dict[str, object]) -> None:
    with pytest.raises(ValueError) as theirs:
        replace(BASE, **changes)
    with pytest.raises(ValueError) as ours:
        derive(BASE, **changes)
    assert str(ours.value) == str(theirs.value)


def test_derive_checks_a_plan_s_recompute_layers_and_names_unknown_fields() -> None:
    with pytest.raises(ValueError, match="recompute_layers"):
        derive(PLAN, recompute_layers=(1, 1, 1, 1))  # no stage recomputes full
    with pytest.raises(TypeError, match="not fields of Layout"):
        derive(BASE, recompute=(Recompute.NONE,))  # a Plan's field, not a Layout's


def test_unchecked_knobs_are_the_ones_no_check_reads() -> None:
    rng = random.Random(0)
    assert UNCHECKED <= set(LAYOUT_FIELDS)
    for _ in range(50):  # any value of an unchecked knob passes replace's checks too
        name = rng.choice(sorted(UNCHECKED))
        value = {"sequence_parallel": False, "stage_pools": (1, 0, 1, 0), "torus_shape": (2, 2, 2)}.get(
            name, getattr(BASE, name)
        )
        assert derive(BASE, **{name: value}) == replace(BASE, **{name: value})
