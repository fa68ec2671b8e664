"""Lower bounds on a layout's compute: the least time one micro-batch needs over all stages,
used by the solver to prune layouts before CP-SAT (solver/solve.py, cost/pools.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

from paraplan.cost.block import block_costs, block_work, layer_exchange, layer_time
from paraplan.cost.comm import packed_span
from paraplan.cost.compute import layer_forward
from paraplan.cost.cp import cp_layer_comm
from paraplan.cost.derive import derive
from paraplan.cost.ep import (
    OVERLAP_EFFICIENCY,
    ep_comm_overlapped,
    ep_layer_comm,
    expert_forward,
    moe_tp_collectives,
)
from paraplan.cost.host import moe_sync_s
from paraplan.cost.plan import Job, Layout, Recompute, plan_key
from paraplan.cost.spans import Spans
from paraplan.cost.tp import tp_block_comm
from paraplan.graph import LayerGraph
from paraplan.hardware import Cluster

FloorMemo = dict[tuple[object, ...], Any]
"""One solve's cache of floor parts (one graph, job and cluster): ``compute_floor_s``'s ``memo``."""

__all__ = [
    "FLOOR_IGNORES",
    "FloorMemo",
    "compute_floor_s",
    "ends_floor_s",
    "inner_tiers_fastest",
    "moe_ep_excess_s",
]


def inner_tiers_fastest(cluster: Cluster) -> bool:
    """Each tier at least as fast as the next one out (latency and bandwidth): then a group whose
    members are consecutive ranks (stride 1) is its own cheapest placement. A pooled cluster:
    on every pool (its groups stay inside a pool)."""
    if cluster.pools:
        return all(inner_tiers_fastest(p) for p in cluster.pools)
    if cluster.torus is not None:
        return False  # torus axes: a strided group can span more axes than a packed one
    return all(
        a.alpha_s <= b.alpha_s and a.effective_bytes_per_s >= b.effective_bytes_per_s
        for a, b in zip(cluster.tiers, cluster.tiers[1:], strict=False)
    )


def _memo(memo: FloorMemo | None, key: tuple[object, ...], make: Callable[[], Any]) -> Any:
    """``make()``, kept in ``memo`` under ``key`` (None: no memo)."""
    if memo is None:
        return make()
    found = memo.get(key)
    if found is None:
        found = memo[key] = make()
    return found


def _eps(graph: LayerGraph) -> list[int]:
    return [e for e in range(1, graph.spec.num_experts + 1) if graph.spec.num_experts % e == 0]


def _moe_ep_s(
    graph: LayerGraph, index: int, plan: Layout, job: Job, cluster: Cluster, memo: FloorMemo | None = None
) -> dict[int, float]:
    """Each ep | experts: one MoE block's expert compute (ep local kernels, imbalance for ep > 1)
    plus its dispatch/combine all-to-all on ep consecutive ranks (under the EP overlap the share
    1 - OVERLAP_EFFICIENCY of it that no overlap hides, ep.ep_exposed_s), one micro-batch.
    ``memo``: one solve's cache (the expert compute reads no software-state field, the
    all-to-all only the dispatcher). Units: seconds."""
    accel = cluster.accelerator
    eff = cluster.efficiency
    spec = graph.spec
    layer = next(ly for ly in graph.block_layers(index) if ly.experts)
    experts = layer.experts
    assert experts is not None

    def compute() -> dict[int, float]:
        return {
            ep: expert_forward(experts, derive(plan, ep=ep), job, accel, eff).forward_backward_s
            for ep in _eps(graph)
        }

    def a2a() -> dict[int, float]:
        out: dict[int, float] = {}
        for ep in _eps(graph):
            span = _memo(memo, ("packed", ep), partial(packed_span, cluster, ep))  # one per ep
            comm = ep_layer_comm(spec.hidden, spec.top_k, derive(plan, ep=ep), job, cluster, span=span)
            out[ep] = comm.forward_s + comm.backward_s
        return out

    overlapped = ep_comm_overlapped(plan)

    def total() -> dict[int, float]:
        times = _memo(memo, ("experts", index, *plan_key(plan, _COMPUTE_IGNORES)), compute)
        exposed = _memo(memo, ("a2a", index, *plan_key(plan, _A2A_IGNORES)), a2a)
        scale = 1.0 - OVERLAP_EFFICIENCY if overlapped else 1.0  # at most that hides
        return {ep: times[ep] + exposed[ep] * scale for ep in times}

    # of the EP overlap, the graphs and the schedule it reads only whether the all-to-all overlaps
    key = ("moe_ep", index, overlapped, *plan_key(plan, _STATE_IGNORES))
    found: dict[int, float] = _memo(memo, key, total)
    return found


def _moe_comm_floor_s(
    graph: LayerGraph, index: int, plan: Layout, job: Job, cluster: Cluster, memo: FloorMemo | None = None
) -> float:
    """Least routed-expert time of one MoE block, one micro-batch, over every ep and placement:
    min over ep | experts of ``_moe_ep_s``; plus the MoE layer's TP traffic at
    perfect balance on tp consecutive ranks (the plan's expert TP: etp = 1 has no routed TP
    collectives). Units: seconds."""
    spec = graph.spec
    best = min(_moe_ep_s(graph, index, plan, job, cluster, memo).values())

    def tp_s() -> float:  # reads no software-state field (the imbalance at 1: no ep either)
        balanced = replace(job, expert_imbalance=1.0)
        collectives = moe_tp_collectives(spec.top_k, spec.shared_ffn_hidden > 0, plan, balanced)
        tp = tp_block_comm(spec.hidden, plan, job, cluster, collectives, span=packed_span(cluster, plan.tp))
        return tp.forward_s + tp.backward_s

    found: float = _memo(memo, ("moe_tp", index, *plan_key(plan, _COMPUTE_IGNORES)), tp_s)
    return best + found


def _cp_floor_s(graph: LayerGraph, index: int, plan: Layout, job: Job, cluster: Cluster) -> float:
    """The exposed CP K/V exchange of a block's attention layers, one micro-batch without
    recompute, the CP group on consecutive ranks: what cost/block.py ``block_costs`` adds for
    their exchanges (``layer_exchange``, cost/cp.py ``cp_layer_comm``) on ``Spans.packed``, which
    no placement undercuts when inner tiers are the fastest; recompute only adds to it (FULL sends
    the forward again). Units: seconds."""
    if plan.cp == 1:
        return 0.0
    accel, eff = cluster.accelerator, cluster.efficiency
    span = packed_span(cluster, plan.cp)
    total = 0.0
    for ly in graph.block_layers(index):
        e = layer_exchange(ly, graph, layer_time(ly, plan, job, accel, eff), plan, job)
        if e.kv_dim and e.attention is not None:
            cp = cp_layer_comm(e.kv_dim, e.attention, plan, job, cluster, span=span)
            total += cp.exposed_forward_s + cp.exposed_backward_s
    return total


def moe_ep_excess_s(
    graph: LayerGraph, plan: Layout, job: Job, cluster: Cluster, memo: FloorMemo | None = None
) -> dict[int, float]:
    """Each ep | experts: how much more than ``compute_floor_s`` (which takes the least ep) a
    plan of that ep needs at least, one micro-batch: over the MoE block kinds, count x
    (``_moe_ep_s`` at that ep - its least over ep), so compute_floor_s + this is a floor of the
    plans of that ep (solver/candidates.py). Zero for every ep where compute_floor_s does not
    floor the experts that way (inner tiers not the fastest). ``memo``: as compute_floor_s's.
    Units: seconds."""
    eps = _eps(graph)
    out = dict.fromkeys(eps, 0.0)
    if not inner_tiers_fastest(cluster):
        return out
    kinds = graph.block_kinds
    for k, i in enumerate(graph.kind_blocks):
        if any(ly.experts for ly in graph.block_layers(i)):
            times = _moe_ep_s(graph, i, plan, job, cluster, memo)
            least = min(times.values())
            for e in eps:
                out[e] += kinds.count(k) * (times[e] - least)
    return out


def ends_floor_s(graph: LayerGraph, plan: Layout, job: Job, cluster: Cluster) -> float:
    """Forward + backward compute of the first stage's head (embedding, a vision encoder) and
    the last stage's tail (final norm, LM head, MTP) of one micro-batch
    (the part of compute_floor_s that is not blocks). Units: seconds."""
    accel = cluster.accelerator
    eff = cluster.efficiency
    return sum(
        layer_forward(graph.layer(n), plan, job, accel, eff).forward_backward_s
        for n in graph.head_names + graph.tail_names
    )


FLOOR_IGNORES = frozenset(
    {"dp", "pp", "ep", "vp", "zero", "recompute", "layers_per_stage", "layers_per_chunk", "order"}
)
"""What ``compute_floor_s`` does not depend on (a cache key for it is ``plan_key`` without these)."""
_STATE_IGNORES = FLOOR_IGNORES | {"moe_overlap", "cuda_graphs", "pp_schedule"}
"""FLOOR_IGNORES and what the all-to-all on packed spans does not read either (ep.ep_layer_comm
reads the dispatcher alone of the software state)."""
_COMPUTE_IGNORES = _STATE_IGNORES | {"moe_dispatcher"}
"""FLOOR_IGNORES and every field a layer's compute (cost/compute.py, ep.expert_forward), the ends
and the CP exchange do not read: the software state and the pipeline schedule."""
_A2A_IGNORES = _STATE_IGNORES | {"sequence_parallel", "cp_comm", "etp"}
"""What the all-to-all on packed spans (``_moe_ep_s``) does not read either: ep.ep_layer_comm reads
the tokens per device (micro-batch, cp), tp, the dispatcher and ep (set per entry)."""


def compute_floor_s(
    graph: LayerGraph, plan: Layout, job: Job, cluster: Cluster, memo: FloorMemo | None = None
) -> float:
    """Least time one micro-batch needs summed over all stages: every block forward + backward
    without recompute, plus the embedding and LM head. Depends on tp, cp, micro_batch, SP,
    cp_comm and (MoE) expert TP only.
    Dense models: compute plus the block's TP and exposed CP traffic with both groups on
    consecutive ranks (``Spans.packed``; compute only when inner tiers are not the fastest).
    MoE models: a MoE block is floored at its non-expert compute plus
    ``_moe_comm_floor_s`` (least expert compute + all-to-all + TP traffic over every ep and
    placement, when inner tiers are the fastest, plus ``_cp_floor_s``: the attention's exposed
    CP traffic; else one kernel per expert GEMM at perfect balance and no
    communication). Each block kind is floored by its own block, times its count
    (LayerGraph.block_kinds). ``memo``: a dict one solve keeps (one graph, job and cluster), where
    the parts no software-state field changes are found once for every state. Units: seconds."""
    accel = cluster.accelerator
    eff = cluster.efficiency
    spec = graph.spec
    free = plan_key(plan, _COMPUTE_IGNORES)  # the key of what reads no software state

    def layers_s(index: int, p: Layout, j: Job, experts: bool = True) -> float:
        """The block's layers forward + backward (``experts`` False: without the routed experts)."""
        return sum(
            (
                layer_time(ly, p, j, accel, eff) if experts else layer_forward(ly, p, j, accel, eff)
            ).forward_backward_s
            for ly in graph.block_layers(index)
        )

    def host_s(index: int, p: Layout) -> float:
        """The MoE layer's syncs (launches may hide), 0 for a block without routed experts."""
        return 2 * moe_sync_s(p) if any(ly.experts for ly in graph.block_layers(index)) else 0.0

    def block_floor(index: int, p: Layout, j: Job) -> float:
        return host_s(index, p) + layers_s(index, p, j)

    ends: float = _memo(memo, ("ends", *free), lambda: ends_floor_s(graph, plan, job, cluster))
    fastest = inner_tiers_fastest(cluster)

    def kind_floor(index: int) -> float:
        if not any(ly.experts for ly in graph.block_layers(index)):
            if not fastest:
                return block_floor(index, plan, job)

            def dense() -> float:  # no routed experts: reads no software-state field
                p = derive(plan, zero=min(plan.zero, 1))  # no per-micro-batch ZeRO traffic
                work = block_work(graph, index, p, job, cluster)
                costs = block_costs(work, graph, p, job, cluster, Spans.packed(p, cluster))
                return costs[Recompute.NONE].time_s

            found: float = _memo(memo, ("dense", index, *free), dense)
            return found
        if fastest:
            mixer: float = _memo(  # the other layers' compute and CP exchange
                memo,
                ("mixer", index, *free),
                lambda: (
                    layers_s(index, plan, job, experts=False) + _cp_floor_s(graph, index, plan, job, cluster)
                ),
            )
            return host_s(index, plan) + mixer + _moe_comm_floor_s(graph, index, plan, job, cluster, memo)
        return block_floor(index, replace(plan, ep=spec.num_experts), replace(job, expert_imbalance=1.0))

    kinds = graph.block_kinds
    return ends + sum(kinds.count(k) * kind_floor(i) for k, i in enumerate(graph.kind_blocks))
