"""The cluster as part of the search: a proven lower bound on the step time of any plan on a
cluster of ``n`` devices of one node type, and the branch and bound over candidate clusters
(node type x device count) that uses it (paraplan/capacity/solve.py builds the candidates and
the objective: time to train or cost, cost/reliability.py).

Bound. The 1F1B step is at least ``m x T / pp`` (cost/pp.py pipeline_lower_bound_s), T the sum
over stages of one micro-batch's stage time, and T is at least ``compute_floor_s`` (cost/floor.py:
every block forward + backward without recompute, with its TP / CP / EP traffic on consecutive
ranks, the embedding and LM head), which depends on tp, cp, micro-batch, SP, cp_comm and the
expert TP only. With ``m = B / (dp x mb)`` and ``n = dp x tp x pp x cp``:

    step >= B x tp x cp x floor(tp, cp, mb, ...) / (mb x n) = B x G(n) / n,

``G(n)`` the least device-seconds per sequence, ``tp x cp x floor / mb``, over every tp (splits
the heads), cp (splits the sequence), micro-batch up to ``max_micro_batch``, SP, cp_comm and
expert TP that some layout of ``n`` devices has (tp x cp divides n, dp divides B / mb, pp at most
the layers; MoE: the all-to-all taken as hidden and full CUDA graphs, the least the floor allows).
Memory, the bubble, data-parallel traffic and the optimizer are left out, so it is a relaxation:
proven, and computed once per node type; a device count no layout has is proven infeasible
without a solve.

Branch and bound (``branch_and_bound``): candidates in order of their lower bound key (a tuple
compared lexicographically, e.g. (time, cost)); each one popped is solved (the planner's own
branch and bound and CP-SAT, proven per cluster) unless its bound already exceeds the K-th best
solved key, which proves it and every later one worse. Stopping at the deadline leaves the least
bound not examined as the proven bound, so the gap is reported.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

from paraplan.cost import Job, Layout
from paraplan.cost.floor import compute_floor_s
from paraplan.cost.plan import CPComm, PartialPlan
from paraplan.cost.software import CudaGraphs
from paraplan.cost.validity import (
    cp_splits_layer_kinds,
    cp_splits_sequence,
    tp_splits_heads,
    tp_splits_layer_kinds,
)
from paraplan.graph import LayerGraph
from paraplan.hardware import Cluster
from paraplan.solver.space import software_states

__all__ = [
    "DeviceSeconds",
    "least_device_seconds",
    "Candidate",
    "Solved",
    "Examined",
    "CapacityOutcome",
    "branch_and_bound",
]

GAP_REL = 1e-3
"""OPTIMAL when the proven bound is within this of the best: a solved cluster's bound sits a
little below its plan's objective because goodput's checkpoint interval is rounded to whole
steps (cost/reliability.py goodput_upper_bound), so a slower plan could gain at most that."""
MAX_DEGREE = 64  # tp and cp searched up to this (solver/space.py searches cp up to 64)


@dataclass(frozen=True, slots=True)
class DeviceSeconds:
    """``G``: device-seconds per sequence of each (tp, cp, micro-batch), least first (the least
    over SP, cp_comm and expert TP), and the model's layers (pp is at most that)."""

    entries: tuple[tuple[float, int, int, int], ...]  # (value, tp, cp, micro_batch)
    num_layers: int

    def per_sequence_s(self, devices: int, global_batch: int) -> float:
        """Least device-seconds per sequence over the (tp, cp, micro-batch) some layout of
        ``devices`` has: tp x cp divides them, and dp = the largest divisor of both the rest and
        global_batch / micro_batch leaves pp = rest / dp <= layers (any other dp leaves a larger
        pp); inf when none has (no layout: proven infeasible)."""
        for value, tp, cp, mb in self.entries:
            if devices % (tp * cp) or global_batch % mb:
                continue
            rest = devices // (tp * cp)
            if rest // math.gcd(rest, global_batch // mb) <= self.num_layers:
                return value
        return float("inf")

    def step_lower_bound_s(self, devices: int, global_batch: int) -> float:
        """Formula: B x G(n) / n (module docstring); inf: no layout of ``devices`` at all."""
        return global_batch * self.per_sequence_s(devices, global_batch) / devices


def _powers(limit: int) -> list[int]:
    out, d = [], 1
    while d <= limit:
        out.append(d)
        d *= 2
    return out


def least_device_seconds(
    graph: LayerGraph, cluster: Cluster, job: Job, max_micro_batch: int, max_devices: int
) -> DeviceSeconds:
    """``G`` of the module docstring for the node type of ``cluster`` (its tiers; built at the
    largest device count searched), over tp, cp up to min(64, max_devices)."""
    spec = graph.spec
    limit = min(MAX_DEGREE, max_devices)
    tps = [
        t
        for t in range(1, limit + 1)
        if tp_splits_heads(spec.num_heads, spec.num_kv_heads, t) and tp_splits_layer_kinds(spec, t)
    ]
    cps = [c for c in _powers(limit) if cp_splits_sequence(job.seq_len, c) and cp_splits_layer_kinds(spec, c)]
    best: dict[tuple[int, int, int], float] = {}
    for tp in tps:
        for cp in cps:
            if tp * cp > max_devices:
                continue
            sps = [True] if spec.is_moe and tp > 1 else ([False, True] if tp > 1 else [False])
            etps: list[int | None] = [None, 1] if spec.is_moe and tp > 1 else [None]
            # the floor under the EP overlap keeps a share of each dispatcher's all-to-all
            # (cost/floor.py): the least over the dispatchers the cluster runs bounds them all
            dispatchers = sorted({d for d, _, _ in software_states(spec, cluster, 2, PartialPlan())})
            comms = [CPComm.P2P] if cp == 1 else [CPComm.P2P, CPComm.ALL_GATHER]
            for mb in range(1, max_micro_batch + 1):
                for sp in sps:
                    for etp in etps:
                        for comm, dispatcher in itertools.product(comms, dispatchers):
                            layout = Layout(
                                dp=1,
                                tp=tp,
                                pp=1,
                                cp=cp,
                                etp=etp,
                                cp_comm=comm,
                                micro_batch=mb,
                                sequence_parallel=sp,
                                moe_dispatcher=dispatcher,
                                moe_overlap=spec.is_moe,
                                cuda_graphs=CudaGraphs.FULL if spec.is_moe else CudaGraphs.NONE,
                            )
                            value = tp * cp * compute_floor_s(graph, layout, job, cluster) / mb
                            key = (tp, cp, mb)
                            best[key] = min(best.get(key, float("inf")), value)
    entries = sorted((v, tp, cp, mb) for (tp, cp, mb), v in best.items())
    return DeviceSeconds(tuple(entries), spec.num_layers)


T = TypeVar("T")
Key = tuple[float, ...]


@dataclass(frozen=True, slots=True)
class Candidate(Generic[T]):
    item: T
    lower: Key  # proven lower bound of its objective key
    feasible_bound: bool = True  # False: its bound already breaks a limit (deadline, budget)


@dataclass(frozen=True, slots=True)
class Solved(Generic[T]):
    """A candidate's solve: its key (None: no plan, or one breaking a limit), whether that is
    proven (the per-cluster solve was OPTIMAL, or infeasibility proven), and its proven bound."""

    key: Key | None
    proven: bool
    bound: Key
    detail: object = None


@dataclass(frozen=True, slots=True)
class Examined(Generic[T]):
    candidate: Candidate[T]
    solved: Solved[T]


@dataclass(slots=True)
class CapacityOutcome(Generic[T]):
    status: str  # OPTIMAL | FEASIBLE | INFEASIBLE | UNKNOWN
    best: list[Examined[T]]  # up to top, best first
    bound: Key | None
    examined: list[Examined[T]] = field(default_factory=list)
    pruned_by_bound: int = 0
    pruned_by_limits: int = 0
    not_examined: int = 0
    wall_s: float = 0.0


def branch_and_bound(
    candidates: Sequence[Candidate[T]],
    solve: Callable[[Candidate[T], float], Solved[T]],
    top: int,
    deadline: float,
) -> CapacityOutcome[T]:
    """The ``top`` best candidates by key (module docstring). ``solve(candidate, deadline)``
    solves one; candidates whose bound breaks a limit are proven infeasible without a solve."""
    start = time.perf_counter()
    order = sorted(candidates, key=lambda c: c.lower)
    feasible = [c for c in order if c.feasible_bound]
    out: CapacityOutcome[T] = CapacityOutcome("UNKNOWN", [], None)
    out.pruned_by_limits = len(order) - len(feasible)
    solved_ok: list[Examined[T]] = []
    proven = True  # every examined candidate proven (its plan optimal, or proven infeasible)
    bounds: list[Key] = []  # the proven bound of each examined candidate that may still be best
    for i, cand in enumerate(feasible):
        kth = solved_ok[top - 1].solved.key if len(solved_ok) >= top else None
        if kth is not None and cand.lower > kth:
            out.pruned_by_bound = len(feasible) - i
            break
        if time.perf_counter() > deadline and out.examined:
            out.not_examined = len(feasible) - i
            bounds.append(cand.lower)  # the least bound left: valid for all the rest
            proven = False
            break
        s = solve(cand, deadline)
        ex = Examined(cand, s)
        out.examined.append(ex)
        if not s.proven:
            proven = False
        if s.key is not None or not s.proven:
            bounds.append(s.bound)
        if s.key is not None:
            solved_ok.append(ex)
            solved_ok.sort(key=lambda e: (e.solved.key, e.candidate.lower))
    out.best = solved_ok[:top]
    out.wall_s = time.perf_counter() - start
    if not out.best:
        out.status = "INFEASIBLE" if proven else "UNKNOWN"
        out.bound = min(bounds) if bounds else None
        return out
    winner = out.best[0].solved.key
    assert winner is not None
    out.bound = min([winner, *bounds])
    gap = winner[0] - out.bound[0]
    out.status = "OPTIMAL" if gap <= GAP_REL * abs(winner[0]) else "FEASIBLE"
    return out


def with_key(c: Candidate[T], lower: Key) -> Candidate[T]:
    return replace(c, lower=lower)
