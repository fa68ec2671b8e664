"""The classes of MoE software states at level 0 of the branch and bound (solver/candidates.py;
issue 22 item 7): each class's compute floor (``class_floors``) and, when a class is popped,
the states of it that the family filter passes and no other state dominates (``class_states``,
solver/states.py)."""

from __future__ import annotations

from typing import Any

from paraplan.cost import Job, Layout
from paraplan.cost.floor import FLOOR_IGNORES, FloorMemo, compute_floor_s, moe_ep_excess_s
from paraplan.cost.plan import PartialPlan, plan_key
from paraplan.cost.software import SOFTWARE_FIELDS
from paraplan.graph import LayerGraph
from paraplan.hardware import Cluster
from paraplan.solver.space import Options, SoftwareState, least_state, software_states, state_of
from paraplan.solver.states import undominated_states, with_state

__all__ = ["class_floors", "class_states"]

_STATE_FIELDS = frozenset(SOFTWARE_FIELDS)
"""The Layout fields of the MoE software state (cost/software.py)."""

_CLASS_PEERS = frozenset({"moe_dispatcher", "cuda_graphs"})
"""A family's MoE state peers (``class_states``) differ from it in these fields alone."""

_FLOOR_STATELESS = FLOOR_IGNORES | _STATE_FIELDS


def class_floors(
    graph: LayerGraph,
    family: Layout,
    job: Job,
    cluster: Cluster,
    states: list[SoftwareState],
    floors: dict[tuple[object, ...], Any],
    floor_memo: FloorMemo,
) -> tuple[float, ...]:
    """Per state of ``states`` (classes of ``family``, which has the first), the compute floor
    of one micro-batch of ``family`` in that state (cost.floor.compute_floor_s; a MoE family's
    at its own ep, cost.floor.moe_ep_excess_s), before the pipeline bound. ``floors``: the
    search's memo, by the family less the fields the floor does not read."""
    base = plan_key(family, _FLOOR_STATELESS)
    key = (base, family.ep, len(states), states[0])
    found = floors.get(key)
    if found is None:
        out = []
        own, moe = state_of(family), graph.spec.is_moe
        for st in states:
            if (base, st) not in floors or (moe and (base, st, "ep") not in floors):
                layout = family if st == own else with_state(family, st)  # built only to be floored
                if (base, st) not in floors:
                    floors[base, st] = compute_floor_s(graph, layout, job, cluster, floor_memo)
                if moe and (base, st, "ep") not in floors:
                    floors[base, st, "ep"] = moe_ep_excess_s(graph, layout, job, cluster, floor_memo)
            # a MoE family's own ep, not the least (cost.floor.moe_ep_excess_s)
            excess = floors[base, st, "ep"][family.ep] if moe else 0.0
            out.append(floors[base, st] + excess)
        found = floors[key] = tuple(out)
    return found


def class_states(
    graph: LayerGraph,
    cluster: Cluster,
    job: Job,
    fixed: PartialPlan,
    options: Options,
    family: Layout,
    memo: dict[Any, Any],
) -> list[Layout]:
    """The states of ``family``'s class (space.states_of) that the layout filter's family rules
    pass and no other state of the family (any dispatcher, the same overlap) dominates
    (solver/states.py). The peers (the family in each state of its overlap) are built once per
    family and overlap, each when first asked, and their survivors found once."""
    key = ("class", plan_key(family, _CLASS_PEERS))
    least = state_of(family)
    peers: dict[SoftwareState, Layout | None] | None = memo.get(key)
    if peers is None:
        states = memo.get(("states", family.ep))
        if states is None:
            states = memo["states", family.ep] = software_states(
                graph.spec, cluster, family.ep, fixed, options.search_moe_state
            )
        peers = memo[key] = {st: None for st in states if st[1] == family.moe_overlap}
    verdicts: dict[SoftwareState, bool] = memo.setdefault(("passes", key), {})  # the family filter's
    passes = options.family_filter

    def peer(st: SoftwareState) -> Layout:
        found = peers[st]
        if found is None:
            found = peers[st] = family if st == least else with_state(family, st)
        return found

    def passed(st: SoftwareState) -> bool:
        found = verdicts.get(st)
        if found is None:
            found = verdicts[st] = passes is None or passes(peer(st))
        return found

    survivors = memo.get(("survivors", key))
    if survivors is None:  # every layout of a family the filter refuses fails it
        if not any(passed(st) for st in peers if least_state(st, fixed) == least):
            return []  # none of the class passes: none survives (the peers are asked when popped)
        kept = [peer(st) for st in peers if passed(st)]
        survivors = undominated_states(graph, cluster, job, fixed, options, kept, memo)
        memo["survivors", key] = survivors
    return [s for s in survivors if least_state(state_of(s), fixed) == least]
