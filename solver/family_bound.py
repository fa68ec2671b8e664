"""A layout family's block bound: the level between a family's compute floor and its ZeRO
stages in the branch and bound of solver/candidates.py (issue 22 item 7).

The compute floor (cost.floor.compute_floor_s) is shared by every ep, every MoE software state of
a class and every dp, pp and vp of a (tp, cp, micro-batch, SP) choice, so it is loose where those
matter: a mixture-of-experts family's own all-to-all, its dispatcher, overlap and host time, and
the attention's TP and CP traffic beside the experts. ``family_bound_s`` costs the family's own
blocks on packed spans (every group on consecutive ranks, ``stage_terms(packed=True)``: no rank
order costs less where inner tiers are the fastest, the same relaxation as the level-1 bound) at
ZeRO class 0 (ZeRO 0 and 1 add no per-micro-batch traffic, ZeRO 2/3 only add some,
cost/block.py ``block_costs``), each block in its cheapest recompute mode, plus the ends'
compute (cost/block.py ``end_cost``), through the pipeline bound (cost.pp.pipeline_lower_bound_s:
the total per micro-batch over pp balanced stages, the bubble at the schedule's least weight,
cost/pp_schedule.py ``bubble_weight_floor``). Every ZeRO stage, rank order, split and recompute
choice of the family costs at least that: its blocks run on spans no faster than the packed ones, in some
mode no cheaper than the cheapest, the ends (embedding, LM head, MTP) cost their compute on the
first and last stage, and the stage fixed parts' communication (p2p, ZeRO gathers, the ends'
TP / CP / EP traffic) and the gradient sync are non-negative. The block costs land in ``shared``
(stage_terms' cache), where the family's ZeRO-0/1 terms find them at level 1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from paraplan.cost import CudaGraphs, Job, Layout, MoEDispatcher, Recompute, StageTerms, stage_terms
from paraplan.cost.derive import derive
from paraplan.cost.pp import pipeline_lower_bound_s
from paraplan.cost.pp_schedule import bubble_weight_floor
from paraplan.cost.spans import SharedCache
from paraplan.graph import LayerGraph
from paraplan.hardware import Cluster

__all__ = ["LeastMemory", "family_bound_s", "least_memory_twin"]


def blocks_floor_s(
    graph: LayerGraph, family: Layout, job: Job, cluster: Cluster, modes: list[Recompute], shared: SharedCache
) -> float:
    """Every block of the model forward + backward, one micro-batch, at its kind's cheapest mode
    of ``modes`` on the family's packed spans at ZeRO class 0, plus the ends' compute (module
    docstring). Units: seconds."""
    terms = stage_terms(graph, derive(family, zero=0), job, cluster, shared, packed=True)
    kinds = graph.block_kinds
    costs = terms.kinds or (None,)
    total = terms.first.compute_s + terms.last.compute_s  # the ends' compute, no communication
    for k, kind in enumerate(costs):
        block = terms.block if kind is None else kind.block
        count = len(kinds) if kind is None else kinds.count(k)
        total += count * min(block[r].time_s for r in modes)
    return total


def family_bound_s(
    graph: LayerGraph,
    family: Layout,
    job: Job,
    cluster: Cluster,
    modes: list[Recompute],
    shared: SharedCache,
) -> float:
    """The family's block bound (module docstring): pipeline_lower_bound_s of
    ``blocks_floor_s`` over its pp, vp and micro-batches. Not for pooled clusters (each pool
    its own terms: cost/pools.py). Units: seconds."""
    m = job.global_batch // (family.micro_batch * family.dp)
    per_micro_batch_s = blocks_floor_s(graph, family, job, cluster, modes, shared)
    weight = bubble_weight_floor(family.pp_schedule, family.vp)  # the schedule's (cost/pp_schedule.py)
    return pipeline_lower_bound_s(per_micro_batch_s, family.pp, family.vp, m, weight)


def least_memory_twin(layout: Layout) -> Layout:
    """``layout`` under NCCL's all-to-all and no CUDA graphs, its EP overlap kept: the state of
    least memory among those of its overlap. The all-to-all keeps no buffer outside the
    activations (cost/moe_memory.py ``dispatcher_buffer_bytes``: 0) and no graph keeps no static
    buffers (``GRAPH_STATIC_TENSORS``: 0); nothing else a stage's memory counts reads the
    dispatcher or the graphs (the blocks' stored bytes do not: cost/stage_build.py
    ``_WORK_IGNORES``, block.py ``block_costs``). The overlap is kept: it can need less memory
    than no overlap (cost/pp.py ``in_flight_micro_batches`` caps its micro-batches in flight at
    m, the interleaved count without it is not capped). Without pipelining the overlap holds no
    micro-batch more (``in_flight_micro_batches`` adds one only where pp > 1) and nothing else a
    stage's memory counts reads it, so there the twin is the one without it: the overlap's
    states and the others share one check."""
    overlap = layout.moe_overlap and layout.pp > 1
    return derive(
        layout, moe_dispatcher=MoEDispatcher.ALLTOALL, cuda_graphs=CudaGraphs.NONE, moe_overlap=overlap
    )


class LeastMemory:
    """Whether a MoE layout's least-memory twin (``least_memory_twin``: the same but its state)
    fits no split: then the layout fits none either (every stage needs at least the twin's bytes in
    every mode and at every layer count), so the branch and bound of solver/candidates.py skips
    its terms. One check serves every state of a family and ZeRO stage; the twin is a relaxation,
    in the space or not. ``fits(terms, ks)``: candidates.py's memory check."""

    def __init__(
        self,
        graph: LayerGraph,
        job: Job,
        cluster: Cluster,
        shared: SharedCache,
        packed: bool,
        fits: Callable[[StageTerms, list[int] | None], bool],
    ) -> None:
        self._args = graph, job, cluster
        self._shared, self._packed, self._fits = shared, packed, fits
        self._memo: dict[Layout, bool] = {}

    def unfit(self, layout: Layout, ks: list[int] | None, smaller: Sequence[Layout] = ()) -> bool:
        """The least-memory twin of ``layout`` (a family with a ZeRO stage) fits no split.
        ``smaller``: layouts the same but for fields that make them never larger (its ZeRO-1 /
        SP-on twins, solver/limits.py ``twins``): where the least-memory twin of one was found
        to fit no split, neither does ``layout``'s (every stage needs at least as many bytes in
        every mode), so it is not checked again."""
        twin = least_memory_twin(layout)
        if twin == layout:
            return False  # its own check follows
        found = self._memo.get(twin)
        if found is None and any(self._memo.get(least_memory_twin(t)) for t in smaller):
            found = self._memo[twin] = True
        if found is None:
            graph, job, cluster = self._args
            try:
                terms = stage_terms(graph, twin, job, cluster, self._shared, packed=self._packed)
            except ValueError:  # the cost model cannot cost the twin here: no verdict
                found = self._memo[twin] = False
            else:
                found = self._memo[twin] = not self._fits(terms, ks)
        return found
