"""Dominance among the MoE software states of a layout family, before any of them is bounded
(solver/candidates.py, level 0; issue 22 item 7).

A family's states (space.py ``software_states``: dispatcher x EP overlap x CUDA graphs) differ in
time and memory only through a few terms of cost/: the blocks' host time (cost/host.py, through
``block_work``), the EP all-to-all (cost/dispatch.py, ``ep_layer_comm``) and the dispatcher's SM
share under the overlap (``dispatcher_sm_fraction``), the dispatcher's buffer and the graphs'
static buffers (cost/moe_memory.py) and, under the overlap, one more in-flight micro-batch
(cost/pp.py). A state B is dropped when another state A of the family is, on every layout of the
family (every rank order), no slower on each of those terms and no larger on each memory term, and
every framework that runs B runs A under per-stage limits that hold B's (``Options.state_holds``,
rules/filter.py; with no layout filter, always): then every plan of B has a plan of A with the
same split and recompute modes that is no slower and no larger, so the optimum is kept. Ties keep
the earlier state (CudaGraphs and MoEDispatcher order: least memory first).

- CUDA graphs: at the same dispatcher and overlap, a wider capture never needs less memory
  (moe_memory.GRAPH_STATIC_TENSORS grows); where its blocks' work equals a narrower capture's
  (the host launches already hide under the GPU time, cost/host.py ``max(gpu, launch)``, and the
  sync is the same), it is no faster either.
- Dispatchers: at the same overlap and graphs, a dispatcher whose all-to-all is no slower forward
  and backward on every EP span the family's rank orders give, with no larger SM share and buffer.
Both are exact within the cost model; tests/solver/test_oracle_moe_state.py checks the search
against enumeration with every state free.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from paraplan.cost import CudaGraphs, Job, Layout, MoEDispatcher
from paraplan.cost.compute import tokens_per_device
from paraplan.cost.derive import derive
from paraplan.cost.dispatch import dispatcher_sm_fraction
from paraplan.cost.ep import ep_layer_comm, ep_span
from paraplan.cost.moe_memory import dispatcher_buffer_bytes
from paraplan.cost.plan import PartialPlan, plan_key
from paraplan.cost.software import SOFTWARE_FIELDS
from paraplan.cost.stage_build import layout_works
from paraplan.graph import LayerGraph
from paraplan.hardware import Cluster
from paraplan.solver.placement import placements
from paraplan.solver.space import Options, SoftwareState

__all__ = ["SHARED", "undominated_states", "with_state"]

StateMemo = dict[Any, Any]
SHARED = "shared"
"""The key of a state memo's stage_terms cache (cost/stage_build.py ``SharedCache``), if it has one."""
_SPAN_IGNORES = frozenset(
    {"zero", "order", "torus_shape", "vp", "recompute", "layers_per_stage", "layers_per_chunk", "micro_batch"}
    | set(SOFTWARE_FIELDS)  # the rank orders (placement.py) and EP spans read no software state
)
_WORK_IGNORES = frozenset(  # what block_work does not read (cost/stage_build.py's work key)
    {"dp", "pp", "vp", "zero", "order", "torus_shape", "recompute", "layers_per_stage", "layers_per_chunk"}
    | {"moe_dispatcher", "stage_pools"}
)


def with_state(family: Layout, state: SoftwareState) -> Layout:
    """``family`` in MoE software state ``state``: ``dataclasses.replace`` of the three fields,
    built by cost/derive.py ``derive``, which skips ``check_structure`` (it reads none of them;
    the search builds one per state of every family it reaches; tests/solver/
    test_oracle_moe_state.py checks it equals ``replace``)."""
    dispatcher, overlap, graphs = state
    return derive(family, moe_dispatcher=dispatcher, moe_overlap=overlap, cuda_graphs=graphs)


def _holds(options: Options) -> Callable[[Layout, Layout], bool]:
    if options.state_holds is not None:
        return options.state_holds
    unfiltered = options.layout_filter is None
    return lambda a, b: unfiltered


def _work(graph: LayerGraph, layout: Layout, job: Job, cluster: Cluster, memo: StateMemo) -> tuple[Any, ...]:
    """Each block kind's host-adjusted pass times (what the state changes in block_work). The
    works come from stage_terms' cache (``memo[SHARED]``, cost/stage_build.py ``layout_works``),
    where the block bounds and terms of the surviving states find them."""
    key = ("work", *plan_key(layout, _WORK_IGNORES))
    found = memo.get(key)
    if found is None:
        works = layout_works(graph, layout, job, cluster, memo.get(SHARED))[0]
        found = memo[key] = tuple(
            (w.forward_s, w.backward_s, tuple(sorted(w.recompute_s.items()))) for w in works
        )
    return found


def _drop_graphs(
    graph: LayerGraph,
    job: Job,
    cluster: Cluster,
    states: list[Layout],
    holds: Callable[[Layout, Layout], bool],
    memo: StateMemo,
) -> list[Layout]:
    """States whose CUDA-graph scope a narrower one of the same dispatcher and overlap matches
    in time (module docstring), dropped."""
    order = list(CudaGraphs)
    kept: list[Layout] = []
    for s in states:
        narrower = [
            t
            for t in states
            if (t.moe_dispatcher, t.moe_overlap) == (s.moe_dispatcher, s.moe_overlap)
            and order.index(t.cuda_graphs) < order.index(s.cuda_graphs)
        ]
        if not any(
            _work(graph, t, job, cluster, memo) == _work(graph, s, job, cluster, memo) and holds(t, s)
            for t in narrower
        ):
            kept.append(s)
    return kept


def _spans(family: Layout, cluster: Cluster, fixed: PartialPlan, memo: StateMemo) -> list[Any]:
    """The EP spans of every rank order of ``family`` (no order pruned, no filter)."""
    key = ("spans", *plan_key(family, _SPAN_IGNORES))
    found = memo.get(key)
    if found is None:
        seen: dict[Any, Any] = {}
        for order, shape in placements(family, cluster, fixed, Options(), prune_dominated=False):
            span = ep_span(cluster, derive(family, order=order, torus_shape=shape))
            seen.setdefault((span.tiers, span.fan_in), span)
        found = memo[key] = list(seen.values())
    return found


def _profile(graph: LayerGraph, layout: Layout, job: Job, cluster: Cluster, spans: list[Any]) -> list[float]:
    """What the dispatcher changes, each smaller is better: per span the all-to-all forward and
    backward and the buffer; the SM share. Reads the dispatcher, the micro-batch, tp, cp and ep
    of ``layout`` (ep.ep_layer_comm, compute.tokens_per_device), so ``_drop_dispatchers`` keeps it
    by those and the EP spans' key: the families of other vp, ZeRO stages, overlaps and graphs
    share it."""
    spec = graph.spec
    out = [dispatcher_sm_fraction(layout.moe_dispatcher, cluster.accelerator)]
    tokens = tokens_per_device(layout, job) / layout.tp
    for span in spans:
        comm = ep_layer_comm(spec.hidden, spec.top_k, layout, job, cluster, span=span)
        out += [
            comm.forward_s,
            comm.backward_s,
            dispatcher_buffer_bytes(
                layout.moe_dispatcher, tokens, spec.hidden, spec.top_k, span, job.precision
            ),
        ]
    return out


def _drop_dispatchers(
    graph: LayerGraph,
    job: Job,
    cluster: Cluster,
    fixed: PartialPlan,
    states: list[Layout],
    holds: Callable[[Layout, Layout], bool],
    memo: StateMemo,
) -> list[Layout]:
    """States whose dispatcher another of the same overlap and graphs dominates (module docstring)."""
    if len({s.moe_dispatcher for s in states}) < 2:
        return states
    spans = _spans(states[0], cluster, fixed, memo)
    # the profile reads the dispatcher alone of the state (ep.ep_layer_comm, the buffer, the SM
    # share): one per dispatcher
    by_dispatcher: dict[MoEDispatcher, list[float]] = {}
    spans_key = plan_key(states[0], _SPAN_IGNORES)
    for s in states:
        if s.moe_dispatcher not in by_dispatcher:
            key = ("profile", s.moe_dispatcher, s.micro_batch, *spans_key)
            found = memo.get(key)
            if found is None:
                found = memo[key] = _profile(graph, s, job, cluster, spans)
            by_dispatcher[s.moe_dispatcher] = found
    profiles = {s: by_dispatcher[s.moe_dispatcher] for s in states}
    order = list(MoEDispatcher)
    kept: list[Layout] = []
    for s in states:
        mine = profiles[s]
        beaten = False
        for t in states:
            if t is s or (t.moe_overlap, t.cuda_graphs) != (s.moe_overlap, s.cuda_graphs):
                continue
            theirs = profiles[t]
            no_worse = all(a <= b for a, b in zip(theirs, mine, strict=True))
            if no_worse and (theirs != mine or order.index(t.moe_dispatcher) < order.index(s.moe_dispatcher)):
                if holds(t, s):
                    beaten = True
                    break
        if not beaten:
            kept.append(s)
    return kept


def undominated_states(
    graph: LayerGraph,
    cluster: Cluster,
    job: Job,
    fixed: PartialPlan,
    options: Options,
    states: list[Layout],
    memo: StateMemo,
) -> list[Layout]:
    """``states`` (one family's, space.states_of) less those another one dominates (module
    docstring). ``memo``: one search's cache (work and EP spans per family class)."""
    if len(states) < 2:
        return states
    holds = _holds(options)
    states = _drop_graphs(graph, job, cluster, states, holds, memo)
    if states[0].ep > 1 and not cluster.pools and cluster.torus is None:
        states = _drop_dispatchers(graph, job, cluster, fixed, states, holds, memo)
    return states
