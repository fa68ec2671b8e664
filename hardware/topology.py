"""Clusters: devices grouped into nested link tiers, and the topology graph they imply.

A cluster is a list of tiers, innermost first. Tier ``k`` has domains of ``domain_devices``
consecutive devices (by global rank); two devices talk over the innermost tier whose domain holds
both. The last tier's domain is the whole cluster.

A *pooled* cluster (mixed GPU types) is a sequence of homogeneous pools, each a ``Cluster`` of its
own, sharing the scale-out network: ``pools`` holds them and ``pool_link`` is the tier between
two pools, the slower of the pools' scale-out links (least effective bandwidth, largest latency).
Its own ``accelerator`` and ``tiers`` are the first pool's and exist only for display; the cost
model always costs a stage with the pool that hosts it (cost/pools.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

import networkx as nx
from paraplan.hardware.catalog import Accelerator, LinkSpec, fabric, fabric_names, node_type
from paraplan.hardware.efficiency import Efficiency, efficiency
from paraplan.hardware.tpu import Torus, is_slice_name, parse_slice, torus_of, tpu_chip

__all__ = [
    "Tier",
    "Cluster",
    "build_cluster",
    "build_pooled_cluster",
    "topology_graph",
    "with_memory_headroom",
    "MAX_DEVICES",
    "MAX_POOLS",
    "with_torus_shape",
    "torus_tiers",
]

MAX_DEVICES = 1_000_000
"""Most devices in a cluster, summed over pools (README "Limits"): ~10x the largest training
clusters built so far; beyond it the planner's divisor and rank-order searches grow for nothing."""
MAX_POOLS = 8
"""Most pools of a mixed-GPU cluster (README "Limits"): the solver tries every ordered subset of
pools, which grows factorially (8 pools: 109,600 orders)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Tier:
    name: str
    domain_devices: int
    per_gpu_bytes_per_s: float
    alpha_s: float
    efficiency: float

    @property
    def effective_bytes_per_s(self) -> float:
        """Useful per-GPU bandwidth at this tier: line rate times achievable fraction."""
        return self.per_gpu_bytes_per_s * self.efficiency


@dataclass(frozen=True, slots=True, kw_only=True)
class Cluster:
    name: str
    accelerator: Accelerator
    devices_per_node: int
    num_nodes: int
    tiers: tuple[Tier, ...]
    pools: tuple[Cluster, ...] = ()  # pooled clusters only (module docstring)
    pool_link: Tier | None = None  # the link between two pools
    efficiency_override: Efficiency | None = None  # from a calibration profile (calibration.py)
    memory_headroom: float = 0.0  # fraction of device memory kept free (solver.memory_headroom)
    torus: Torus | None = None  # TPU slices: the ICI torus (tiers = its axes, then DCN; tpu.py)

    @property
    def efficiency(self) -> Efficiency:
        """The achieved-efficiency parameters the cost model uses for this cluster's accelerator:
        a calibration profile's when one was applied, else the catalog's (data/efficiency.yaml)."""
        if self.efficiency_override is not None:
            return self.efficiency_override
        return efficiency(self.accelerator.generation)

    @property
    def num_devices(self) -> int:
        if self.pools:
            return sum(p.num_devices for p in self.pools)
        return self.devices_per_node * self.num_nodes

    @property
    def memory_capacity_bytes(self) -> float:
        """Device memory; for a pooled cluster the least of its pools' (each stage is checked
        against its own pool's, see cost/pools.py)."""
        if self.pools:
            return min(p.memory_capacity_bytes for p in self.pools)
        return self.accelerator.hbm_bytes * (1.0 - self.memory_headroom)

    @property
    def memory_headroom_bytes(self) -> float:
        """Device memory kept free by ``memory_headroom`` (of the pool with the least capacity)."""
        if self.pools:
            return min(self.pools, key=lambda p: p.memory_capacity_bytes).memory_headroom_bytes
        return self.accelerator.hbm_bytes * self.memory_headroom

    def tier_of_span(self, span_devices: int) -> Tier:
        """Innermost tier whose domain holds ``span_devices`` consecutive ranks."""
        for tier in self.tiers:
            if span_devices <= tier.domain_devices:
                return tier
        return self.tiers[-1]


def _tier(link: LinkSpec, domain: int) -> Tier:
    return Tier(
        name=link.name,
        domain_devices=domain,
        per_gpu_bytes_per_s=link.per_gpu_bytes_per_s,
        alpha_s=link.alpha_s,
        efficiency=link.efficiency,
    )


def _scale_out(preset: str) -> LinkSpec:
    """The outermost link of a node or fabric preset (what joins it to other pools)."""
    if preset in fabric_names():
        return fabric(preset).tiers[-1]
    return node_type(preset).scale_out


def with_memory_headroom(cluster: Cluster, fraction: float) -> Cluster:
    """``cluster`` (and each of its pools) with ``fraction`` of device memory kept free: the
    capacity every plan is checked against becomes HBM x (1 - fraction)."""
    if not 0.0 <= fraction < 0.5:
        raise ValueError(f"solver.memory_headroom={fraction} must be at least 0 and below 0.5")
    return replace(
        cluster,
        memory_headroom=fraction,
        pools=tuple(replace(p, memory_headroom=fraction) for p in cluster.pools),
    )


def build_pooled_cluster(pools: Sequence[Mapping[str, Any]]) -> Cluster:
    """Pooled cluster of pools in the given order (module docstring); each pool is the keyword
    arguments of ``build_cluster``: ``{"preset": "dgx-h100", "nodes": 4}`` (or ``gpus``).

    The inter-pool tier is the slower of the pools' scale-out links: the least effective
    bandwidth and the largest latency of any of them (pools meet on the shared scale-out network).
    """
    if not pools:
        raise ValueError("cluster.pools must list at least one pool")
    if any(is_slice_name(str(p.get("preset", ""))) for p in pools):
        raise ValueError(
            "cluster.pools: TPU slices are not pooled; give one slice preset with "
            "cluster.nodes = slices (multislice over DCN)"
        )
    if len(pools) > MAX_POOLS:
        raise ValueError(
            f"cluster.pools lists {len(pools)} pools; paraplan's limit is {MAX_POOLS} "
            '(README "Limits"); merge pools of the same node type'
        )
    built = tuple(build_cluster(p["preset"], nodes=p.get("nodes"), gpus=p.get("gpus")) for p in pools)
    total = sum(c.num_devices for c in built)
    if total > MAX_DEVICES:
        raise ValueError(
            f"cluster.pools hold {total:,} devices in all, over paraplan's limit of "
            f'{MAX_DEVICES:,} (README "Limits")'
        )
    links = [_scale_out(p["preset"]) for p in pools]
    slowest = min(links, key=lambda lk: lk.per_gpu_bytes_per_s * lk.efficiency)
    num = sum(c.num_devices for c in built)
    link = Tier(
        name="inter-pool",
        domain_devices=num,
        per_gpu_bytes_per_s=slowest.per_gpu_bytes_per_s,
        alpha_s=max(lk.alpha_s for lk in links),
        efficiency=slowest.efficiency,
    )
    first = built[0]
    return Cluster(
        name="+".join(f"{c.name}x{c.num_nodes}" for c in built),
        accelerator=first.accelerator,
        devices_per_node=first.devices_per_node,
        num_nodes=sum(c.num_nodes for c in built),
        tiers=(*first.tiers, link),
        pools=built,
        pool_link=link,
    )


def torus_tiers(torus: Torus) -> tuple[Tier, ...]:
    """One tier per torus axis longer than 1 (domain: the chips of the axes up to it, as ranks
    run row-major over the torus), then DCN across slices. The axis tiers carry one ICI link
    one way and the hop latency (what a point-to-point send gets); collectives on a torus are
    costed per axis by cost/torus.py."""
    tiers: list[Tier] = []
    domain = 1
    for d, length in enumerate(torus.shape):
        domain *= length
        if length > 1 or (d == len(torus.shape) - 1 and not tiers):
            tiers.append(
                Tier(
                    name=f"ici-{'xyz'[d]}",
                    domain_devices=domain,
                    per_gpu_bytes_per_s=torus.link_bytes_per_s,
                    alpha_s=torus.hop_s,
                    efficiency=torus.ici_efficiency,
                )
            )
    if torus.num_slices > 1:
        tiers.append(
            Tier(
                name="dcn",
                domain_devices=domain * torus.num_slices,
                per_gpu_bytes_per_s=torus.dcn_bytes_per_s,
                alpha_s=torus.dcn_alpha_s,
                efficiency=torus.dcn_efficiency,
            )
        )
    return tuple(tiers)


def with_torus_shape(cluster: Cluster, shape: tuple[int, ...]) -> Cluster:
    """The TPU cluster with its slices in ``shape`` (one of ``cluster.torus.shapes``: optical
    circuit switching lets a v4/v5p job choose); ``cluster`` itself when shape is () or current."""
    if cluster.torus is None or not shape or tuple(shape) == cluster.torus.shape:
        return cluster
    torus, tiers = _reshaped(cluster.torus, tuple(shape))
    return Cluster(
        name=cluster.name,
        accelerator=cluster.accelerator,
        devices_per_node=cluster.devices_per_node,
        num_nodes=cluster.num_nodes,
        tiers=tiers,
        efficiency_override=cluster.efficiency_override,
        torus=torus,
    )


@cache
def _reshaped(torus: Torus, shape: tuple[int, ...]) -> tuple[Torus, tuple[Tier, ...]]:
    new = torus.reshaped(shape)
    return new, torus_tiers(new)


def _tpu_cluster(preset: str, slices: int | None, chips: int | None) -> Cluster:
    """``slices`` slices of the TPU slice ``preset`` (``v5p-1024``), or ``chips`` chips of them.
    A scenario's cluster.nodes counts slices (as a gb200-nvl72 node is a rack); devices_per_node
    is the host's chips (4 or 8)."""
    spec = parse_slice(preset)
    if chips is not None:
        if chips < 1 or chips % spec.chips:
            raise ValueError(
                f"cluster.gpus={chips} must be a positive multiple of the {spec.chips} "
                f"chips of a {preset} slice; or give cluster.nodes = slices"
            )
        slices = chips // spec.chips
    assert slices is not None
    if slices < 1:
        raise ValueError(f"cluster.nodes={slices} (slices of {preset}) must be at least 1")
    if slices * spec.chips > MAX_DEVICES:
        raise ValueError(
            f"{slices:,} slices of {preset} exceed paraplan's limit of "
            f'{MAX_DEVICES:,} devices (README "Limits")'
        )
    torus = torus_of(spec, slices)
    host = min(spec.host_chips, spec.chips)
    return Cluster(
        name=preset,
        accelerator=tpu_chip(spec.chip),
        devices_per_node=host,
        num_nodes=slices * spec.chips // host,
        tiers=torus_tiers(torus),
        torus=torus,
    )


def build_cluster(preset: str, *, nodes: int | None = None, gpus: int | None = None) -> Cluster:
    """Cluster of ``nodes`` nodes (or ``gpus`` devices) of a node preset or a fabric preset;
    for a TPU slice preset (``v5p-1024``), ``nodes`` slices joined by DCN."""
    if is_slice_name(preset):
        if (nodes is None) == (gpus is None):
            raise ValueError("cluster: give exactly one of cluster.nodes (slices) or cluster.gpus")
        return _tpu_cluster(preset, nodes, gpus)
    fab = fabric(preset) if preset in fabric_names() else None
    nt = node_type(fab.node if fab else preset)
    dpn = nt.devices_per_node
    if (nodes is None) == (gpus is None):
        raise ValueError("cluster: give exactly one of cluster.nodes or cluster.gpus")
    if gpus is not None:
        if gpus < 1:
            raise ValueError(f"cluster.gpus={gpus} must be at least 1")
        if gpus < dpn:
            dpn = gpus  # a partial node: the whole job sits inside one scale-up domain
            nodes = 1
        elif gpus % dpn:
            raise ValueError(
                f"cluster.gpus={gpus} must be a multiple of the {dpn} GPUs per {preset} node "
                f"(or fewer than {dpn}); use cluster.nodes={max(1, gpus // dpn)} "
                f"or gpus={(gpus // dpn + 1) * dpn}"
            )
        else:
            nodes = gpus // dpn
    assert nodes is not None
    if nodes < 1:
        raise ValueError(f"cluster.nodes={nodes} must be at least 1")
    num = dpn * nodes
    if num > MAX_DEVICES:
        given = (
            f"cluster.gpus={gpus:,}"
            if gpus is not None
            else (f"cluster.nodes={nodes:,} x {dpn} GPUs per {preset} node = {num:,} devices")
        )
        raise ValueError(f'{given} exceeds paraplan\'s limit of {MAX_DEVICES:,} devices (README "Limits")')
    tiers = [_tier(nt.scale_up, dpn)]
    if fab:
        for link in fab.tiers:
            dom = link.domain_gpus or num
            if dom > tiers[-1].domain_devices:
                tiers.append(_tier(link, min(dom, num) if link.domain_gpus else num))
        tiers = [t for t in tiers if t.domain_devices <= num]
        if tiers[-1].domain_devices < num:
            tiers.append(_tier(fab.tiers[-1], num))
    elif nodes > 1:
        tiers.append(_tier(nt.scale_out, num))
    return Cluster(
        name=preset,
        accelerator=nt.accelerator,
        devices_per_node=dpn,
        num_nodes=nodes,
        tiers=tuple(tiers),
    )


def topology_graph(cluster: Cluster) -> nx.Graph:
    """Devices and one switch per tier domain; edges carry the tier, bandwidth and latency.

    Node names: ``("gpu", rank)`` and ``(tier_name, domain_index)``. Each device links to its
    innermost switch; each domain switch links to the switch of the domain that contains it.
    """
    g = nx.Graph()
    for rank in range(cluster.num_devices):
        g.add_node(("gpu", rank), kind="device")
    for level, tier in enumerate(cluster.tiers):
        num_domains = max(1, cluster.num_devices // tier.domain_devices)
        for d in range(num_domains):
            g.add_node((tier.name, d), kind="switch", level=level)
        attrs = {
            "tier": tier.name,
            "bytes_per_s": tier.per_gpu_bytes_per_s,
            "alpha_s": tier.alpha_s,
        }
        if level == 0:
            for rank in range(cluster.num_devices):
                g.add_edge(("gpu", rank), (tier.name, rank // tier.domain_devices), **attrs)
        else:
            inner = cluster.tiers[level - 1]
            for d in range(max(1, cluster.num_devices // inner.domain_devices)):
                outer = d * inner.domain_devices // tier.domain_devices
                g.add_edge((inner.name, d), (tier.name, outer), **attrs)
    return g
