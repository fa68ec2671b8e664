"""Machines: accelerators, link tiers, clusters and their topology graph (no model knowledge)."""

from paraplan.hardware.calibration import (
    CalibrationProfile,
    apply_calibration,
    load_profile,
    profile_from_dict,
)
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
from paraplan.hardware.dispatch import DispatcherParams, dispatcher_params, sm_count
from paraplan.hardware.efficiency import Efficiency, efficiency
from paraplan.hardware.topology import (
    Cluster,
    Tier,
    build_cluster,
    build_pooled_cluster,
    topology_graph,
    with_memory_headroom,
    with_torus_shape,
)
from paraplan.hardware.tpu import Torus, parse_slice, tpu_chip
from paraplan.hardware.uncertainty import (
    MemoryBand,
    StepTimeBand,
    default_memory_headroom,
    memory_band,
    step_time_band,
)

__all__ = [
    "MemoryBand",
    "default_memory_headroom",
    "memory_band",
    "Accelerator",
    "CalibrationProfile",
    "Cluster",
    "DispatcherParams",
    "Efficiency",
    "Fabric",
    "LinkSpec",
    "NodeType",
    "StepTimeBand",
    "Tier",
    "accelerator",
    "apply_calibration",
    "build_cluster",
    "build_pooled_cluster",
    "dispatcher_params",
    "efficiency",
    "fabric",
    "fabric_names",
    "load_profile",
    "node_type",
    "node_type_names",
    "profile_from_dict",
    "sm_count",
    "step_time_band",
    "topology_graph",
    "with_memory_headroom",
    "Torus",
    "parse_slice",
    "tpu_chip",
    "with_torus_shape",
]
