"""Host-side time of a MoE layer from the software state that runs it.

A MoE layer's router, top-k, permute, sort and unpermute are many small kernels; launched from
the host one by one they are launch-bound, and the token dispatcher needs the per-expert token
counts on the host (all-to-all splits, grouped-GEMM sizes): a device-to-host sync that drains
the launch queue, after which the GPU idles until the host has launched the next kernels
(Megatron-Core MoE README, "CUDA graphs" and "sync-free" sections; docs moe_physics.md Sec. 3.3).
Per MoE layer and pass (forward, backward, recompute forward):

    host = launch_s * uncaptured(cuda_graphs) + sync_s * (0 if overlapped or full graphs else 1)

- ``launch_s``: the launch-bound kernels' host time with nothing captured (Efficiency
  ``moe_layer_overhead_s``, hardware/data/efficiency.yaml ``moe_layer_overhead_us``: a host/CPU
  cost, one value for every generation);
- ``uncaptured``: the share of those kernels outside captured CUDA graphs: 1 with none, 0 with
  full graphs (whole layers captured), PARTIAL_UNCAPTURED with Transformer Engine's partial
  scopes (attention, moe_router, moe_preprocess captured; the permute, dispatch and experts
  launched from the host);
- ``sync_s`` (MOE_SYNC_S): the device-to-host sync's drain. Megatron's 1F1B EP overlap
  (``--overlap-moe-expert-parallel-comm``) hides it under the other micro-batch's kernels (the
  16-GPU Qwen3-30B nsys pair: HybridEP metadata preprocess 3.109 s -> 0.670 s per step with the
  overlap on, moe_physics.md Sec. 3.1); full CUDA graphs need sync-free dispatch (padded
  capacity), so there is none.

Parameters fitted to the calibration file's MoE rows (benchmarks/calibrate.py), bounded so that
the host share stays under the 16-GPU nsys idle bound (<= 8% of that step GPU-idle).
"""

from __future__ import annotations

from paraplan.cost.plan import CudaGraphs, Layout
from paraplan.hardware import Efficiency

__all__ = ["PARTIAL_UNCAPTURED", "MOE_SYNC_S", "moe_host_s"]

PARTIAL_UNCAPTURED = 0.5  # share of the launch-bound kernels left uncaptured by partial scopes
MOE_SYNC_S = 150e-6  # device-to-host sync drain per MoE layer per pass


def _uncaptured(graphs: CudaGraphs) -> float:
    return {CudaGraphs.NONE: 1.0, CudaGraphs.PARTIAL: PARTIAL_UNCAPTURED, CudaGraphs.FULL: 0.0}[graphs]


def moe_host_s(plan: Layout, eff: Efficiency) -> float:
    """Host-side time of one MoE layer per pass (module docstring). Units: seconds."""
    launch = eff.moe_layer_overhead_s * _uncaptured(plan.cuda_graphs)
    hidden = plan.moe_overlap or plan.cuda_graphs is CudaGraphs.FULL
    return launch + (0.0 if hidden else MOE_SYNC_S)
