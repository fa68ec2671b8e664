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

__all__ = ["AxisUse", "TorusGroup", "torus_group", "torus_collective_s", "torus_alltoall_s",
           "placed_cluster"]


@dataclass(frozen=True, slots=True)
class AxisUse:
    """How a group lies along one torus axis."""

    axis: int
    members: int
    step: int  # chips between neighbouring members
    ring: bool  # wraparound closes the members into a ring


@dataclass(frozen=True, slots=True)
class TorusGroup:
    """A process group on a TPU cluster: its torus axes, slices, and the link figures."""

    axes: tuple[AxisUse, ...]  # the axes it spans (members > 1)
    slices: int  # slices it spans (fan-in over DCN)
    size: int
    fan_in: tuple[int, ...]  # per cluster tier (each torus axis longer than 1, then DCN)
    link_bytes_per_s: float  # effective, one way, per ICI link
    hop_s: float
    dcn_bytes_per_s: float  # effective, one way, per chip
    dcn_alpha_s: float

    @property
    def ici_members(self) -> int:
        return prod(a.members for a in self.axes)


def _axis_use(axis: int, coords: np.ndarray, length: int, wraps: bool) -> AxisUse | None:
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
    return TorusGroup(
        axes=tuple(uses), slices=slices, size=len(ranks), fan_in=tuple(fan_in),
        link_bytes_per_s=torus.link_bytes_per_s * torus.ici_efficiency, hop_s=torus.hop_s,
        dcn_bytes_per_s=torus.dcn_bytes_per_s * torus.dcn_efficiency, dcn_alpha_s=torus.dcn_alpha_s,
    )


def _hops(use: AxisUse) -> float:
    """Hops of one pass along an axis: p/2 round a ring, p - 1 along a line (times the step)."""
    return (use.members / 2 if use.ring else use.members - 1) * use.step


def torus_collective_s(group: TorusGroup, n_bytes: float, phases: int, data_factor: float) -> float:
    """All-gather / reduce-scatter (phases 1, data 1) or all-reduce (2, 2) of an n-byte buffer.

    Formula: ICI: max(data n (M-1)/M / sum_a W_a, phases sum_a hops_a t_hop), W_a = link x 2 on a
    ring (both directions) or x 1 on a line, / step; hops_a = p/2 (ring) or p - 1 (line), x step.
    DCN (S slices): phases (S-1) alpha + data n (S-1)/(S M) / B_dcn.
    Source: S6 (module docstring); DCN as cost.comm's hierarchical ring (Thakur et al. 2005).
    """
    total = 0.0
    m = group.ici_members
    if m > 1:
        bandwidth = sum(group.link_bytes_per_s * (2 if a.ring else 1) / a.step for a in group.axes)
        total += max(data_factor * n_bytes * (m - 1) / m / bandwidth,
                     phases * sum(_hops(a) for a in group.axes) * group.hop_s)
    s = group.slices
    if s > 1:
        total += (phases * (s - 1) * group.dcn_alpha_s
                  + data_factor * n_bytes * (s - 1) / (s * m) / group.dcn_bytes_per_s)
    return total


def torus_alltoall_s(group: TorusGroup, n_bytes: float) -> float:
    """All-to-all in which every rank sends ``n_bytes`` in all (n/p to each of p members).

    Formula: per axis a, the traffic crossing its middle: T_a = n_i f_a step_a / (c W), c = 8 on a
    ring (two links each way), 4 on a line, n_i = n M/p the bytes for ICI peers; axes and DCN run
    at once: T = sum_a hops_a t_hop + (S-1) alpha_dcn + max(max_a T_a, n (p-M)/p / B_dcn).
    Source: S6: an all-to-all is ~1/4 of an all-gather on a bidirectional ring (one ring:
    n p / (8 W) against the all-gather's n p / (2 W)).
    """
    p = group.size
    if p <= 1:
        return 0.0
    m = group.ici_members
    local = n_bytes * m / p
    slowest = max((local * a.members * a.step / ((8 if a.ring else 4) * group.link_bytes_per_s)
                   for a in group.axes), default=0.0)
    latency = sum(_hops(a) for a in group.axes) * group.hop_s
    if group.slices > 1:
        latency += (group.slices - 1) * group.dcn_alpha_s
        slowest = max(slowest, n_bytes * (p - m) / p / group.dcn_bytes_per_s)
    return latency + slowest


def placed_cluster(cluster: Cluster, torus_shape: tuple[int, ...]) -> Cluster:
    """The cluster with its TPU slices in the plan's shape (``plan.torus_shape``; () = default)."""
    if not torus_shape:
        return cluster
    if cluster.torus is None:
        raise ValueError(f"plan.torus_shape={list(torus_shape)} needs a TPU slice cluster "
                         "(cluster.preset such as v5p-1024); remove it for this cluster")
    return with_torus_shape(cluster, tuple(torus_shape))
