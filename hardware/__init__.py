"""Machines: accelerators, link tiers, clusters and their topology graph (no model knowledge)."""

from paraplan.hardware.catalog import (
    Accelerator,
    Fabric,
    LinkSpec,
    NodeType,
    accelerator,
    fabric,
    fabric_names,
    node_type,
    node_type_names,
)
from paraplan.hardware.efficiency import Efficiency, efficiency
from paraplan.hardware.topology import Cluster, Tier, build_cluster, build_pooled_cluster, topology_graph

__all__ = [
    "Accelerator",
    "Cluster",
    "Efficiency",
    "Fabric",
    "LinkSpec",
    "NodeType",
    "Tier",
    "accelerator",
    "build_cluster",
    "build_pooled_cluster",
    "efficiency",
    "fabric",
    "fabric_names",
    "node_type",
    "node_type_names",
    "topology_graph",
]
