"""Collectives on a TPU torus: per-axis bidirectional rings, several axes at once, DCN outside.

A process group on a TPU cluster (hardware/tpu.py: ranks row-major over the slice's torus, slices
outermost) uses, along each torus axis it spans, ``members`` chips ``step`` chips apart. Along an
axis whose members cover it with wraparound the group is a bidirectional ring; otherwise a line
(one-way). A group over several axes runs its collective on all of them at once, and across slices
hierarchically over DCN (ICI inside each slice, then DCN on 1/M of the data, M = ICI members).

Source: Austin et al., How To Scale Your Model, 'Sharded Matrices' (S6; hardware.json
collective_cost_models.torus_axis_allgather): along one axis with wraparound an all-gather or
reduce-scatter of V bytes takes T = max(V / W_bidir, (p/2) t_hop); an all-reduce twice that;
gathering over k axes at once divides the time by k; an all-to-all costs about a quarter of an
all-gather on a bidirectional ring; without wraparound, one-way bandwidth and p - 1 hops.
Here the max is written as the alpha-beta sum (p/2) t_hop + V / W_bidir: equal in both limits,
at most 2x above the max where the two terms meet (messages of ~45 KB on v5e, S6), and affine in
the bytes as every other collective of the cost model (gradient-sync lines in cost/stage_build.py and
the solver's tables take collectives to be affine in the bytes).
Units: seconds, bytes, bytes/s.
Assumes: members ``step`` > 1 chips apart share each link with the step - 1 interleaved groups on
the same axis (bandwidth / step, hops x step); a group over several axes is a box (the product of
its per-axis members; true when degrees split the axes by divisors, hardware/tpu.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from math import ceil, prod

import numpy as np
from paraplan.hardware import Cluster, with_torus_shape
from paraplan.hardware.tpu import Torus

__all__ = [
    "AxisUse",
    "TorusGroup",
    "torus_group",
    "torus_floor",
    "torus_collective_s",
    "torus_alltoall_s",
    "torus_profile",
    "placed_cluster",
    "collective_matmul_exposed_s",
]


@dataclass(frozen=True, slots=True)
class AxisUse:
    """How a group lies along one torus axis."""

    axis: int
    members: int
    step: int  # chips between neighbouring members
    ring: bool  # wraparound closes the members into a ring


@dataclass(frozen=True, slots=True)
class TorusGroup:
    """A process group on a TPU cluster: where it lies, and the terms its collectives cost.

    The six ``*_s`` / ``*_s_per_byte`` terms are what every collective of the group is a
    non-negative combination of (``torus_collective_s``, ``torus_alltoall_s``), so a group no
    worse in each term is no slower in any collective of any size."""

    axes: tuple[AxisUse, ...]  # the axes it spans (members > 1); () for a floor (torus_floor)
    slices: int  # slices it spans (fan-in over DCN)
    size: int
    fan_in: tuple[int, ...]  # per cluster tier (each torus axis longer than 1, then DCN)
    ici_s_per_byte: float  # (M-1)/M / sum_a W_a
    ici_latency_s: float  # sum_a hops_a t_hop
    dcn_latency_s: float  # (S-1) alpha_dcn
    dcn_s_per_byte: float  # (S-1)/(S M) / B_dcn
    a2a_ici_s_per_byte: float  # max_a (M/p) f_a step_a / (c W)
    a2a_dcn_s_per_byte: float  # (p-M)/p / B_dcn

    def terms(self) -> tuple[float, ...]:
        return (
            self.ici_s_per_byte,
            self.ici_latency_s,
            self.dcn_latency_s,
            self.dcn_s_per_byte,
            self.a2a_ici_s_per_byte,
            self.a2a_dcn_s_per_byte,
        )


def _hops(use: AxisUse) -> float:
    """Hops of one pass along an axis: p/2 round a ring, p - 1 along a line (times the step)."""
    return (use.members / 2 if use.ring else use.members - 1) * use.step


def _group(torus: Torus, uses: list[AxisUse], slices: int, size: int, fan_in: tuple[int, ...]) -> TorusGroup:
    """The cost terms of a group lying along ``uses`` over ``slices`` slices.

    W_a = link x efficiency x (2 on a ring, both directions; 1 on a line) / step; hops_a = p/2
    (ring) or p - 1 (line), x step; c = 8 on a ring (two links each way across the middle), 4
    on a line (S6; see torus_collective_s and torus_alltoall_s)."""
    link = torus.link_bytes_per_s * torus.ici_efficiency
    dcn = torus.dcn_bytes_per_s * torus.dcn_efficiency
    m = prod(a.members for a in uses)
    bandwidth = sum(link * (2 if a.ring else 1) / a.step for a in uses)
    return TorusGroup(
        axes=tuple(uses),
        slices=slices,
        size=size,
        fan_in=fan_in,
        ici_s_per_byte=(m - 1) / m / bandwidth if m > 1 else 0.0,
        ici_latency_s=sum(_hops(a) for a in uses) * torus.hop_s,
        dcn_latency_s=(slices - 1) * torus.dcn_alpha_s,
        dcn_s_per_byte=(slices - 1) / (slices * m) / dcn,
        a2a_ici_s_per_byte=max(
            (m / size * a.members * a.step / ((8 if a.ring else 4) * link) for a in uses), default=0.0
        ),
        a2a_dcn_s_per_byte=(size - m) / size / dcn,
    )


def _axis_use(axis: int, coords: np.ndarray, length: int, wraps: bool) -> AxisUse | None:
    """Members along one axis: their count, the chips between neighbours, and whether they close
    into a ring (evenly spaced, covering an axis with wraparound)."""
    values = np.unique(coords)
    f = len(values)
    if f <= 1:
        return None
    gaps = np.diff(values)
    if np.all(gaps == gaps[0]):
        step = int(gaps[0])
        return AxisUse(axis, f, step, ring=wraps and f * step == length)
    return AxisUse(axis, f, ceil(int(values[-1] - values[0]) / (f - 1)), ring=False)


@cache
def torus_group(torus: Torus, sub_axes: tuple[tuple[int, int], ...]) -> TorusGroup:
    """The group of rank 0 whose members sit along ``sub_axes`` ((stride, degree) pairs: degree
    members stride ranks apart), located on ``torus``; fan-in per tier as in cost.comm.span_of."""
    ranks = np.zeros(1, dtype=np.int64)
    for stride, degree in sub_axes:
        ranks = (ranks[:, None] + np.arange(degree, dtype=np.int64) * stride).ravel()
    per_slice = torus.slice_chips
    local = ranks % per_slice
    slices = len(np.unique(ranks // per_slice))
    uses: list[AxisUse] = []
    fan_in: list[int] = []
    inner = 1
    for axis, length in enumerate(torus.shape):
        coords = (local // inner) % length
        inner *= length
        use = _axis_use(axis, coords, length, torus.wrap[axis])
        if use is not None:
            uses.append(use)
        if length > 1:
            fan_in.append(use.members if use else 1)
    if not fan_in:
        fan_in.append(1)
    if torus.num_slices > 1:
        fan_in.append(slices)
    return _group(torus, uses, slices, len(ranks), tuple(fan_in))


def torus_floor(groups: list[TorusGroup]) -> TorusGroup:
    """A group no slower than any of ``groups`` in every collective: each cost term at its least
    (a bound over placements; its fan-in is that of the group spanning the fewest slices)."""
    fewest = min(groups, key=lambda g: (g.slices, g.fan_in))
    terms = [min(t) for t in zip(*(g.terms() for g in groups), strict=True)]
    return TorusGroup((), fewest.slices, fewest.size, fewest.fan_in, *terms)


def torus_collective_s(group: TorusGroup, n_bytes: float, phases: int, data_factor: float) -> float:
    """All-gather / reduce-scatter (phases 1, data 1) or all-reduce (2, 2) of an n-byte buffer.

    Formula: ICI: phases sum_a hops_a t_hop + data n (M-1)/M / sum_a W_a (the scaling book's max
    of the two terms written as their sum: module docstring); DCN (S slices, after ICI):
    phases (S-1) alpha + data n (S-1)/(S M) / B_dcn.
    Source: S6 (module docstring); DCN as cost.comm's hierarchical ring (Thakur et al. 2005).
    """
    return phases * (group.ici_latency_s + group.dcn_latency_s) + data_factor * n_bytes * (
        group.ici_s_per_byte + group.dcn_s_per_byte
    )


def torus_alltoall_s(group: TorusGroup, n_bytes: float) -> float:
    """All-to-all in which every rank sends ``n_bytes`` in all (n/p to each of p members).

    Formula: per axis a, the traffic crossing its middle: T_a = n_i f_a step_a / (c W), c = 8 on a
    ring (two links each way), 4 on a line, n_i = n M/p the bytes for ICI peers; axes and DCN run
    at once: T = sum_a hops_a t_hop + (S-1) alpha_dcn + max(max_a T_a, n (p-M)/p / B_dcn).
    Source: S6: an all-to-all is ~1/4 of an all-gather on a bidirectional ring (one ring:
    n p / (8 W) against the all-gather's n p / (2 W)).
    """
    if group.size <= 1:
        return 0.0
    return (
        group.ici_latency_s
        + group.dcn_latency_s
        + n_bytes * max(group.a2a_ici_s_per_byte, group.a2a_dcn_s_per_byte)
    )


def torus_profile(group: TorusGroup) -> tuple[float, ...]:
    """The terms every torus cost of ``group`` grows with (TorusGroup.terms): a placement no
    worse than another in each is no slower in any collective (the solver's dominance)."""
    return group.terms()


def collective_matmul_exposed_s(comm_s: float, compute_s: float) -> float:
    """Tensor-parallel collectives left exposed on a TPU: XLA's collective matmul splits each
    all-gather -> matmul and matmul -> reduce-scatter into per-shard steps whose transfers run
    under the partial matmuls, so only what exceeds the pass's compute stays on the critical path.

    Formula: max(0, comm_s - compute_s) per pass (forward, backward).
    Source: Wang et al. 2023, "Overlap Communication with Dependent Computation via Decomposition
    in Large Deep Learning Models", ASPLOS '23 (XLA's collective matmul on TPU); the scaling book
    (S5, S6) on TPU tensor parallelism hiding its collectives behind matmuls.
    Assumes: the pass's compute (its GEMMs and attention) is what the transfers can hide under.
    """
    return max(0.0, comm_s - compute_s)


def placed_cluster(cluster: Cluster, torus_shape: tuple[int, ...]) -> Cluster:
    """The cluster with its TPU slices in the plan's shape (``plan.torus_shape``; () = default)."""
    if not torus_shape:
        return cluster
    if cluster.torus is None:
        raise ValueError(
            f"plan.torus_shape={list(torus_shape)} needs a TPU slice cluster "
            "(cluster.preset such as v5p-1024); remove it for this cluster"
        )
    return with_torus_shape(cluster, tuple(torus_shape))
