"""Collectives in alpha-beta terms on a tiered topology, and which tiers a group spans.

``T = n_phases * alpha + Q / B_eff`` (the lessons' model; worked example: 4 phases x 5 us +
100 MB at 50 GB/s = 2.02 ms). Ring forms follow Thakur et al. 2005 / hardware.json
``collective_cost_models``; groups spanning several tiers use the hierarchical form
(reduce-scatter inside each tier, then across: hardware.json ``hierarchical_2d_allreduce``,
generalised to any number of tiers).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from math import isqrt, prod

from paraplan.cost.plan import Axis, Layout
from paraplan.cost.torus import TorusGroup, placed_cluster, torus_alltoall_s, torus_collective_s, torus_group
from paraplan.hardware import Cluster, Tier

__all__ = [
    "GroupSpan",
    "alpha_beta_s",
    "ring_allreduce_s",
    "ring_allgather_s",
    "group_span",
    "allreduce_s",
    "allgather_s",
    "reduce_scatter_s",
    "alltoall_s",
    "p2p_s",
    "SubAxis",
    "span_of",
    "packed_span",
    "least_phases",
    "axis_stride",
]


def alpha_beta_s(num_phases: int, alpha_s: float, bytes_moved: float, bytes_per_s: float) -> float:
    """Formula: T = n * alpha + Q / B. Units: seconds."""
    return num_phases * alpha_s + bytes_moved / bytes_per_s


def ring_allreduce_s(p: int, n_bytes: float, alpha_s: float, bytes_per_s: float) -> float:
    """Formula: 2(p-1) alpha + 2 (p-1)/p n / B. Source: Thakur et al. 2005 (ring)."""
    if p <= 1:
        return 0.0
    return alpha_beta_s(2 * (p - 1), alpha_s, 2 * (p - 1) / p * n_bytes, bytes_per_s)


def ring_allgather_s(p: int, n_bytes: float, alpha_s: float, bytes_per_s: float) -> float:
    """Formula: (p-1) alpha + (p-1)/p n / B (n = full gathered buffer). Same for reduce-scatter."""
    if p <= 1:
        return 0.0
    return alpha_beta_s(p - 1, alpha_s, (p - 1) / p * n_bytes, bytes_per_s)


@dataclass(frozen=True, slots=True)
class GroupSpan:
    """Fan-in of a process group at each tier, innermost first (product = group size)."""

    tiers: tuple[Tier, ...]
    fan_in: tuple[int, ...]
    latency_floor: bool = False  # a bound over placements: hierarchical latency at its least
    torus: TorusGroup | None = None  # TPU clusters: the group's torus axes (cost/torus.py)

    @property
    def size(self) -> int:
        return prod(self.fan_in)

    @property
    def outermost(self) -> Tier:
        for tier, f in zip(reversed(self.tiers), reversed(self.fan_in), strict=True):
            if f > 1:
                return tier
        return self.tiers[0]


@dataclass(frozen=True, slots=True)
class SubAxis:
    """``degree`` group members ``stride`` ranks apart (a whole axis or a slice of one)."""

    stride: int
    degree: int


def span_of(cluster: Cluster, sub_axes: list[SubAxis]) -> GroupSpan:
    """Tiers a process group spans whose members sit along ``sub_axes`` (whole axes, or slices
    of axes such as the expert-parallel group inside dp x cp).

    A tier domain of D consecutive ranks holds, along each sub-axis, the largest divisor of its
    degree that is at most D // stride and a multiple of what the next inner tier holds (groups
    tile a domain only in divisors: 32 ranks 4 apart on 72-GPU racks hold 16 per rack, not 18,
    and cross the scale-out tier). Fan-in at a tier = members per domain there / members per
    domain one tier in, so the fan-ins multiply to the group size.
    """
    if cluster.torus is not None:  # TPU slices: per-axis rings, DCN outside (cost/torus.py)
        group = torus_group(cluster.torus, tuple((a.stride, a.degree) for a in sub_axes))
        return GroupSpan(cluster.tiers, group.fan_in, torus=group)
    size = prod(a.degree for a in sub_axes)
    held = [1] * len(sub_axes)
    fan_in: list[int] = []
    inside = 1
    for tier in cluster.tiers:
        dom = tier.domain_devices
        held = [_tiling(a.degree, max(1, dom // a.stride), h) for a, h in zip(sub_axes, held, strict=True)]
        members = prod(held)
        fan_in.append(members // inside)
        inside = members
    if inside < size:
        fan_in[-1] *= size // inside
    return GroupSpan(cluster.tiers, tuple(fan_in))


@cache
def _tiling(degree: int, room: int, inner: int) -> int:
    """Largest divisor of ``degree`` that is a multiple of ``inner`` and at most ``room``
    (``inner`` when none larger fits)."""
    rest = degree // inner
    best = 1
    q = 1
    while q * q <= rest:
        if rest % q == 0:
            for c in (q, rest // q):
                if inner * c <= room:
                    best = max(best, c)
        q += 1
    return inner * best


def axis_stride(plan: Layout, axis: Axis) -> int:
    """Ranks between neighbours along ``axis``: the product of the degrees ordered inside it."""
    return prod(plan.degree(b) for b in plan.order[: plan.order.index(axis)])


def group_span(cluster: Cluster, plan: Layout, *axes: Axis) -> GroupSpan:
    """Tiers a process group over ``axes`` spans under the plan's rank order (members along axis
    a are stride_a ranks apart, stride_a = product of the degrees ordered inside a; span_of)."""
    strides: dict[Axis, int] = {}
    running = 1
    for a in plan.order:
        strides[a] = running
        running *= getattr(plan, a)
    return span_of(
        placed_cluster(cluster, plan.torus_shape), [SubAxis(strides[a], getattr(plan, a)) for a in axes]
    )


def _hierarchical_s(span: GroupSpan, n_bytes: float, phases_per_step: int, data_factor: float) -> float:
    """Sum over tiers of phases (f-1) alpha + data n (f-1)/(f M B), M = inner fan-in.

    ``span.latency_floor``: the span bounds every placement of the group (``packed_span``), so
    the latency is the least any factorisation of the group over the tiers can have,
    phases x least alpha x least_phases(size, tiers): a group split over two tiers takes fewer
    phases than one flat ring, so packing every member into the fastest tier is not the cheapest
    latency (the bandwidth part is: inner tiers at least as fast)."""
    if span.torus is not None:
        return torus_collective_s(span.torus, n_bytes, phases_per_step, data_factor)
    total, inner = 0.0, 1
    for tier, f in zip(span.tiers, span.fan_in, strict=True):
        if f > 1:
            phases = 0 if span.latency_floor else phases_per_step * (f - 1)
            total += alpha_beta_s(
                phases,
                tier.alpha_s,
                data_factor * n_bytes * (f - 1) / (f * inner),
                tier.effective_bytes_per_s,
            )
        inner *= f
    if span.latency_floor and span.size > 1:
        alpha = min(t.alpha_s for t in span.tiers)
        total += phases_per_step * least_phases(span.size, len(span.tiers)) * alpha
    return total


@cache
def least_phases(size: int, tiers: int) -> int:
    """min sum_i (f_i - 1) over factorisations size = prod f_i into at most ``tiers`` factors:
    the fewest latency-bearing steps of a hierarchical collective of ``size`` members."""
    if tiers <= 1 or size <= 1:
        return size - 1
    small = [f for f in range(1, isqrt(size) + 1) if size % f == 0]
    return min(f - 1 + least_phases(size // f, tiers - 1) for f in {*small, *(size // f for f in small)})


def packed_span(cluster: Cluster, size: int) -> GroupSpan:
    """A group of ``size`` consecutive ranks, as a bound over every placement of such a group
    (its members fill the fastest domains first; latency at its floor, ``_hierarchical_s``)."""
    return replace(span_of(cluster, [SubAxis(1, size)]), latency_floor=True)


def allreduce_s(span: GroupSpan, n_bytes: float) -> float:
    """Hierarchical all-reduce: sum over tiers of 2(f-1) alpha + 2 n (f-1)/(f M B), M = inner fan-in."""
    return _hierarchical_s(span, n_bytes, 2, 2.0)


def allgather_s(span: GroupSpan, n_bytes: float) -> float:
    """Hierarchical all-gather of an n-byte result: sum of (f-1) alpha + n (f-1)/(f M B)."""
    return _hierarchical_s(span, n_bytes, 1, 1.0)


def reduce_scatter_s(span: GroupSpan, n_bytes: float) -> float:
    """Same volume and phases as all-gather (n = the full, unreduced buffer)."""
    return _hierarchical_s(span, n_bytes, 1, 1.0)


def alltoall_s(span: GroupSpan, n_bytes: float) -> float:
    """Pairwise all-to-all in which every rank sends ``n_bytes`` in total (n/p to each peer).

    Formula: sum_i r_i * alpha_i + max_i (n * r_i / p) / B_i, where r_i = peers first reached at
    tier i (ranks in the tier-i domain minus those in the tier-(i-1) domain) and B_i the tier's
    effective per-GPU bandwidth. One tier gives hardware.json ``pairwise_alltoall``:
    (p-1) alpha + (p-1)/p n / B.
    Source: hardware.json collective_cost_models.pairwise_alltoall; NCCL maintainers (S25): a
    cross-node all-to-all runs at the per-GPU NIC bandwidth (one NIC per GPU, no aggregation).
    Units: seconds.
    Assumes: the sends on different tiers proceed concurrently (NVLink and NIC are separate
    links); each peer costs one latency (NCCL posts one send/recv pair per peer).
    """
    if span.torus is not None:
        return torus_alltoall_s(span.torus, n_bytes)
    p = span.size
    if p <= 1:
        return 0.0
    latency, slowest, inner = 0.0, 0.0, 1
    for tier, f in zip(span.tiers, span.fan_in, strict=True):
        if f > 1:
            peers = inner * f - inner
            latency += peers * tier.alpha_s
            slowest = max(slowest, n_bytes * peers / p / tier.effective_bytes_per_s)
        inner *= f
    return latency + slowest


def p2p_s(tier: Tier, n_bytes: float) -> float:
    """Point-to-point send: alpha + n / B."""
    return alpha_beta_s(1, tier.alpha_s, n_bytes, tier.effective_bytes_per_s)
