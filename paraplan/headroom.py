"""What the next plan with more memory headroom costs (issue 24, item 5), for a plan at the edge.

A solved plan whose peak, grown by the memory band's p90 (hardware/data/uncertainty.yaml: 1 run in
10 needs that much more than predicted), reaches EDGE_NEED_SHARE of its device is "at the edge".
For such a plan one more search runs with ``solver.memory_headroom`` raised to the plan's own free
share of the device plus MORE_HEADROOM_STEP, so the plan itself no longer fits and the answer is
the fastest plan that keeps more memory free; the explanation states its step time against the
plan's and its free memory. A plan with room to spare needs no second search. The second search
runs only when asked (``paraplan plan --more-headroom``, ``paraplan.solve(..., more_headroom=True)``):
it can take as long as the first, so by default the line names the headroom it would keep and how
to ask for it (``more_headroom_hint``). The second search has what is left of the caller's time
limit; it reports no plan when none keeps that much free, and says so when the time ran out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from paraplan.cost import Breakdown, PartialPlan, Plan
from paraplan.cost import evaluate as cost_evaluate
from paraplan.errors import InfeasibleError, SolveTimeout
from paraplan.hardware import memory_band, with_memory_headroom
from paraplan.instance import Instance
from paraplan.planning import search
from paraplan.reports.explain import summary
from paraplan.reports.text import gib
from paraplan.solver import Options, SolverOptions

__all__ = [
    "EDGE_NEED_SHARE",
    "MORE_HEADROOM_STEP",
    "MAX_HEADROOM",
    "at_the_edge",
    "more_headroom_hint",
    "more_headroom_line",
]

EDGE_NEED_SHARE = 0.98
"""A plan is at the edge when its peak x the memory band's p90 is at least this share of the
device (a presentation threshold, not a model number: within 2% of running out 1 run in 10)."""
MORE_HEADROOM_STEP = 0.01
"""The second search keeps this share of the device free beyond the plan's own free share."""
MAX_HEADROOM = 0.49
"""solver.memory_headroom stays below 0.5 (hardware/topology.py with_memory_headroom)."""


def _device_bytes(b: Breakdown, headroom: float) -> list[float]:
    """Each stage's device memory: its capacity before ``headroom`` was kept free."""
    caps = b.stage_capacity_bytes or (b.memory_capacity_bytes,) * len(b.stage_memory)
    return [c / (1.0 - headroom) for c in caps]


def free_share(b: Breakdown, headroom: float) -> float:
    """The least share of its device a stage of the plan leaves free."""
    return min(
        1.0 - m.total_bytes / d for m, d in zip(b.stage_memory, _device_bytes(b, headroom), strict=True)
    )


def at_the_edge(b: Breakdown, headroom: float) -> bool:
    """Whether some stage's peak x the band's p90 reaches EDGE_NEED_SHARE of its device."""
    p90 = memory_band().p90_ratio
    return any(
        m.total_bytes * p90 >= EDGE_NEED_SHARE * d
        for m, d in zip(b.stage_memory, _device_bytes(b, headroom), strict=True)
    )


def _wanted_share(b: Breakdown, headroom: float) -> float | None:
    """The free share the second search keeps: the plan's own plus MORE_HEADROOM_STEP; None when
    the plan is not at the edge or that share is past MAX_HEADROOM."""
    if not at_the_edge(b, headroom):
        return None
    wanted = free_share(b, headroom) + MORE_HEADROOM_STEP
    return wanted if wanted <= MAX_HEADROOM else None


def more_headroom_hint(inst: Instance, b: Breakdown) -> str | None:
    """The explanation's line for a plan at the edge when the second search was not asked for:
    the headroom it would keep and the two ways to ask (no search runs)."""
    wanted = _wanted_share(b, inst.cluster.memory_headroom)
    if wanted is None:
        return None
    return (
        f"more headroom: not searched; `paraplan plan --more-headroom` states the fastest plan keeping "
        f"{wanted:.1%} of device memory free (solver.memory_headroom {wanted:.3f} plans it)"
    )


def more_headroom_line(
    inst: Instance,
    plan: Plan,
    b: Breakdown,
    fixed: PartialPlan,
    base: Options,
    opts: SolverOptions,
    deadline: float,
    clock: Callable[[], float],
) -> str | None:
    """The explanation's line on the next plan with more headroom, or None when ``plan`` is not
    at the edge. ``deadline`` (on ``clock``) bounds the second search."""
    headroom = inst.cluster.memory_headroom
    wanted = _wanted_share(b, headroom)
    if wanted is None:
        return None
    own = free_share(b, headroom)
    lead = (
        f"more headroom: the fastest plan keeping {wanted:.1%} of device memory free "
        f"(solver.memory_headroom {wanted:.3f}"
    )
    left_s = deadline - clock()
    if left_s <= 1.0:
        return f"{lead}) was not searched: the time limit ran out (raise --time-limit)"
    roomier = replace(inst, cluster=with_memory_headroom(inst.cluster, wanted))
    try:
        found = search(
            roomier,
            fixed,
            base,
            replace(opts, time_limit_s=left_s, top=1, runner_up_seen=False),
            None,
            left_s,
            deadline,
        )
    except InfeasibleError:
        return f"{lead}): none; no plan of this search keeps that much free"
    except SolveTimeout:
        return f"{lead}) was not found in the time left (raise --time-limit)"
    other = found.searched.out.solutions[0].plan
    ob = cost_evaluate(roomier.graph, roomier.cluster, roomier.job, other)
    peak = max(m.total_bytes for m in ob.stage_memory)
    device = max(_device_bytes(ob, wanted))
    free = free_share(ob, wanted)
    delta = ob.step_time_s / b.step_time_s - 1.0
    return (
        f"{lead}): {summary(other)}: {ob.step_time_s:.3f} s ({delta:+.1%}), peak {gib(peak)} "
        f"of {gib(device)}, {free:.1%} free against this plan's {own:.1%}"
    )
