"""Building a layout's StageTerms (cost/stage.py) from the block, end, gradient-sync and p2p costs.

A solve asks for the terms of thousands of layouts that differ only in pp, vp, dp or the placement
of other axes, and block and end costs depend on none of these: ``stage_terms`` computes them once
per distinct ``_shared_key`` (tp, cp, ep, micro-batch, SP, the ZeRO class and the tiers the groups
span) in a ``shared`` dict the caller keeps. Every key is ``plan_key`` of the layout less the
fields its value is declared not to depend on (``_WORK_IGNORES``, ``_SHARED_IGNORES``,
``_SYNC_IGNORES``), so a new Plan knob enters every key. Gradient sync is alpha-beta, so affine
in the parameters: one line for the dense-parallel group and one for the expert-data-parallel
group (``_sync_lines``). On a pooled cluster each pool hosting a stage gets the layout's terms on
its own devices (``StageTerms.at``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from paraplan.cost.block import (
    EndCost,
    ExchangeComm,
    Work,
    block_costs,
    block_params_per_device,
    block_work,
    end_cost,
    end_work,
    exchange_comm,
)
from paraplan.cost.dp import grad_sync_s, reduces_across_micro_batches
from paraplan.cost.ep import ep_comm_overlapped
from paraplan.cost.moe_memory import SoftwareMemory, software_memory
from paraplan.cost.plan import Job, Layout, plan_key
from paraplan.cost.pp import p2p_per_micro_batch_s, stage_p2p_s
from paraplan.cost.software import SOFTWARE_FIELDS
from paraplan.cost.spans import SharedCache, Spans
from paraplan.cost.stage import Affine, KindCost, StageTerms
from paraplan.graph import LayerGraph
from paraplan.hardware import Cluster

__all__ = [
    "base_kind",
    "layout_works",
    "stage_terms",
]


# recompute and rank order never enter a per-layer cost (the order acts through the spans).
_PER_STAGE = frozenset({"recompute", "layers_per_stage", "layers_per_chunk", "order", "stage_pools"})
# cp_comm sets the attention kernels; the dispatcher acts through the communication only (a
# block's work reads the EP overlap and CUDA graphs through its host time, cost/host.py)
_WORK_IGNORES = _PER_STAGE | {"dp", "pp", "vp", "zero", "moe_dispatcher", "pp_schedule"}
_SHARED_IGNORES = _PER_STAGE | {"dp", "pp", "vp", "zero", "pp_schedule"}  # zero enters as its class
# a block's TP, CP and EP traffic (cost/block.py exchange_comm): the work's key and the dispatcher
_EXCHANGE_IGNORES = _WORK_IGNORES - {"moe_dispatcher"}
_SYNC_IGNORES = _PER_STAGE | {
    "pp",
    "vp",
    "cp_comm",
    "micro_batch",
    "sequence_parallel",
    "pp_schedule",
    *SOFTWARE_FIELDS,
}
# under the 1F1B EP overlap (or DualPipe's) a block's exposed all-to-all depends on the
# steady-state share of its passes (cost/ep.py steady_fraction: micro-batches per dp rank, pp, vp;
# cost/pp_schedule.py paired_share)
_OVERLAP_SHARED_IGNORES = _SHARED_IGNORES - {"dp", "pp", "vp", "pp_schedule"}


def _shared_key(plan: Layout, spans: Spans, plain: bool = False) -> tuple[object, ...]:
    """What block and end costs depend on: tp, cp, ep, micro-batch, SP, the ZeRO class and the
    tiers the TP, CP, EP and (for ZeRO-2/3 traffic) DP x CP and expert-DP groups span.
    ``plain``: without what the EP overlap adds (``_plain_costs``)."""
    zero_class = plan.zero if plan.zero >= 2 else 0
    overlap = not plain and plan.ep > 1 and ep_comm_overlapped(plan)
    ignores = _OVERLAP_SHARED_IGNORES if overlap else _SHARED_IGNORES
    return (plan_key(plan, ignores), zero_class, reduces_across_micro_batches(plan), spans.key())


@dataclass(frozen=True, slots=True)
class _Shared:
    kinds: tuple[KindCost, ...]
    first: EndCost
    last: EndCost
    software: SoftwareMemory
    shares: tuple[float, float]  # the base block's B / (F + B), W / (F + B) (_shares)


def _shares(work: Work) -> tuple[float, float]:
    """B / (F + B) and W / (F + B) of one block without recompute, W its weight-gradient GEMMs
    (compute.LayerTime: wgrad x the forward GEMMs)."""
    total = work.forward_s + work.backward_s
    if total <= 0:
        return 2.0 / 3.0, 1.0 / 3.0
    wgrad = sum(t.wgrad * t.gemm_s for t in work.times)
    return work.backward_s / total, wgrad / total


def _works(
    graph: LayerGraph, plan: Layout, job: Job, cluster: Cluster
) -> tuple[tuple[Work, ...], Work, Work]:
    """(one block of each kind, first end, last end) work of the plan's tp, cp, ep, mb, SP."""
    return (
        tuple(block_work(graph, i, plan, job, cluster) for i in graph.kind_blocks),
        end_work(graph, graph.head_names, plan, job, cluster),
        end_work(graph, graph.tail_names, plan, job, cluster),
    )


def _kind_cost(
    w: Work,
    graph: LayerGraph,
    plan: Layout,
    job: Job,
    cluster: Cluster,
    spans: Spans,
    comm: ExchangeComm | None = None,
) -> KindCost:
    return KindCost(block_costs(w, graph, plan, job, cluster, spans, comm), w.params, w.expert_params)


def _ep_kind_cost(
    index: int,
    w: Work,
    graph: LayerGraph,
    plan: Layout,
    job: Job,
    cluster: Cluster,
    spans: Spans,
    shared: SharedCache | None,
) -> KindCost:
    """``_kind_cost`` of block kind ``index`` (one with an all-to-all), its traffic
    (cost/block.py ``exchange_comm``) kept in ``shared`` by what it reads (``_EXCHANGE_IGNORES``
    and the TP, CP and EP spans): under the EP overlap the kind's costs are built once per dp,
    pp, vp and schedule (``_shared_key``), its traffic once for all of them."""
    comm = None
    if shared is not None:
        key = ("exchange", index, *plan_key(plan, _EXCHANGE_IGNORES), spans.tp, spans.cp, spans.ep)
        comm = shared.get(key)
        if comm is None:
            comm = shared[key] = exchange_comm(w, plan, job, cluster, spans)
    return _kind_cost(w, graph, plan, job, cluster, spans, comm)


_Plain = tuple[dict[int, KindCost], EndCost, EndCost]


def _plain_costs(
    works: tuple[tuple[Work, ...], Work, Work],
    graph: LayerGraph,
    plan: Layout,
    job: Job,
    cluster: Cluster,
    spans: Spans,
    shared: SharedCache | None,
) -> _Plain:
    """The costs the EP overlap leaves as they are: each block kind without an all-to-all (its
    ``block_costs`` reach the overlap's exposed share only where the block has EP traffic) and
    the ends (``end_cost`` exposes their all-to-all whole). Under the overlap ``_shared_key``
    holds dp, pp, vp and the schedule (the steady share of the passes); these are kept in
    ``shared`` under the key without them (``_shared_key(plain=True)``), one for every such
    layout."""
    key = ("plain", _shared_key(plan, spans, plain=True))
    if shared is not None and key in shared:
        found: _Plain = shared[key]
        return found
    blocks, first, last = works
    out = (
        {
            i: _kind_cost(w, graph, plan, job, cluster, spans)
            for i, w in enumerate(blocks)
            if not any(e.top_k for e in w.exchanges)
        },
        end_cost(first, plan, job, cluster, spans),
        end_cost(last, plan, job, cluster, spans),
    )
    if shared is not None:
        shared[key] = out
    return out


def layout_works(
    graph: LayerGraph, plan: Layout, job: Job, cluster: Cluster, shared: SharedCache | None
) -> tuple[tuple[Work, ...], Work, Work]:
    """The work of one block of each kind and of the first and last end (cost/block.py
    ``block_work``, ``end_work``): what the plan's tp, cp, ep, micro-batch, SP and MoE overlap and
    graphs (the host time) set; kept in ``shared`` (stage_terms' cache) once per ``_WORK_IGNORES``
    key, where the dominance of MoE software states (solver/states.py) finds it too."""
    if shared is None:
        return _works(graph, plan, job, cluster)
    key = ("work", *plan_key(plan, _WORK_IGNORES))
    found: tuple[tuple[Work, ...], Work, Work] | None = shared.get(key)
    if found is None:
        found = shared[key] = _works(graph, plan, job, cluster)
    return found


def _shared_costs(
    graph: LayerGraph, plan: Layout, job: Job, cluster: Cluster, spans: Spans, shared: SharedCache | None
) -> _Shared:
    works = layout_works(graph, plan, job, cluster, shared)
    blocks = works[0]
    plain, first, last = _plain_costs(works, graph, plan, job, cluster, spans, shared)
    return _Shared(
        tuple(
            plain[i] if i in plain else _ep_kind_cost(i, w, graph, plan, job, cluster, spans, shared)
            for i, w in enumerate(blocks)
        ),
        first,
        last,
        software_memory(graph.spec, plan, job, cluster, spans.ep),
        _shares(blocks[base_kind(graph.block_kinds)]),
    )


def _sync_lines(
    plan: Layout,
    job: Job,
    cluster: Cluster,
    block_params: float,
    block_expert_params: float,
    spans: Spans,
    shared: SharedCache | None,
) -> tuple[Affine, Affine]:
    """grad_sync_s is alpha-beta: latency + bytes / bandwidth, affine in the parameters; one line
    for the dense-parallel group, one for the expert-data-parallel group."""
    key = (
        "sync",
        *plan_key(plan, _SYNC_IGNORES),
        spans.sync.fan_in,
        spans.esync.fan_in,
        spans.sync.latency_floor,
        spans.sync.torus,
        spans.esync.torus,
    )
    if shared is not None and key in shared:
        return shared[key]

    def line(params: float, expert: bool) -> Affine:
        span = spans.esync if expert else spans.sync
        none = grad_sync_s(0.0, plan, job, cluster, expert, span=span)
        block = grad_sync_s(params, plan, job, cluster, expert, span=span)
        return Affine(none, (block - none) / params if params else 0.0)

    lines = (
        line(block_params, False),
        line(block_expert_params, True) if block_expert_params else Affine(0.0, 0.0),
    )
    if shared is not None:
        shared[key] = lines
    return lines


def _tied_last(
    graph: LayerGraph, plan: Layout, last: EndCost, shared: SharedCache | None, key: tuple[object, ...] | None
) -> EndCost:
    """The last stage's end when the model ties its embeddings and pp > 1: it keeps its own copy
    of the tied embedding for the LM head (the embedding only, not the rest of the first stage's
    head, e.g. a vision encoder). The copy's weights per device read tp, ep and etp, which the
    block costs' ``key`` (``_shared_key``) holds, so it is kept in ``shared`` beside them."""
    if shared is not None and ("tied", key) in shared:
        return shared["tied", key]
    embedding, _ = block_params_per_device([graph.layer("embedding")], plan)
    out = replace(last, params=last.params + embedding)
    if shared is not None:
        shared["tied", key] = out
    return out


def base_kind(block_kinds: tuple[int, ...]) -> int:
    """The most common block kind (the first of equals): the one a stage's line is written in."""
    counts = [block_kinds.count(k) for k in range(max(block_kinds) + 1)]
    return counts.index(max(counts))


def stage_terms(
    graph: LayerGraph,
    plan: Layout,
    job: Job,
    cluster: Cluster,
    shared: SharedCache | None = None,
    *,
    packed: bool = False,
) -> StageTerms:
    """All per-stage cost terms of the plan's layout (recompute and layer split left open).

    ``shared``: a dict the caller keeps across plans of one graph, job and cluster; block and end
    costs are computed once per distinct ``_shared_key`` (a solve evaluates thousands of layouts
    that differ only in pp, vp, dp or the placement of other axes).
    ``packed``: cost every group on consecutive ranks whatever the plan's order (``Spans.packed``):
    a bound on the terms of every order of the layout, valid when ``inner_tiers_fastest``; on a
    TPU torus each group's terms at their least over every order and slice shape.

    Pooled cluster: each pool hosting a stage gets the layout's terms on its own devices
    (``StageTerms.at``), and each stage its p2p on the links to its neighbours (pp.stage_p2p_s,
    the same for every order: stages are the outermost rank axis there)."""
    if cluster.pools:
        return _pooled_terms(graph, plan, job, cluster, shared, packed)
    spans = Spans.packed(plan, cluster, shared) if packed else Spans.of(plan, cluster)
    key: tuple[object, ...] | None = None
    if shared is None:
        costs = _shared_costs(graph, plan, job, cluster, spans, shared)
    else:
        key = _shared_key(plan, spans)
        if key not in shared:
            shared[key] = _shared_costs(graph, plan, job, cluster, spans, shared)
        costs = shared[key]
    first, last = costs.first, costs.last
    if graph.spec.tied_embeddings and plan.pp > 1:
        last = _tied_last(graph, plan, last, shared, key)
    kinds = graph.block_kinds
    base = base_kind(kinds)
    b = costs.kinds[base]
    return StageTerms(
        plan=plan,
        job=job,
        cluster=cluster,
        num_micro_batches=plan.num_micro_batches(job),
        block=b.block,
        block_params=b.params,
        first=first,
        last=last,
        p2p_s=p2p_per_micro_batch_s(graph.spec.hidden, plan, job, cluster, spans.pp),
        block_expert_params=b.expert_params,
        sync_lines=_sync_lines(
            plan,
            job,
            cluster,
            max(k.params for k in costs.kinds),
            max(k.expert_params for k in costs.kinds),
            spans,
            shared,
        ),
        kinds=costs.kinds if len(costs.kinds) > 1 else (),
        block_kinds=kinds if len(costs.kinds) > 1 else (),
        base_kind=base if len(costs.kinds) > 1 else 0,
        software=costs.software,
        backward_share=costs.shares[0],
        wgrad_share=costs.shares[1],
    )


def _pooled_terms(
    graph: LayerGraph, plan: Layout, job: Job, cluster: Cluster, shared: SharedCache | None, packed: bool
) -> StageTerms:
    """stage_terms on a pooled cluster (its docstring); ``plan.stage_pools`` must be set."""
    if len(plan.stage_pools) != plan.pp:
        raise ValueError(
            f"plan.stage_pools={list(plan.stage_pools)} needs one pool per stage "
            f"(pp={plan.pp}) on the pooled cluster {cluster.name}"
        )
    local = replace(plan, stage_pools=())
    by_pool = {
        p: stage_terms(
            graph,
            local,
            job,
            cluster.pools[p],
            None if shared is None else shared.setdefault(("pool", p), {}),
            packed=packed,
        )
        for p in sorted(set(plan.stage_pools))
    }
    return replace(
        by_pool[plan.stage_pools[0]],
        plan=plan,
        cluster=cluster,
        pool_terms=tuple(by_pool[p] for p in plan.stage_pools),
        stage_p2p=stage_p2p_s(graph.spec.hidden, plan, job, cluster),
    )
