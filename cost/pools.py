"""Pooled (mixed-GPU) clusters: which pools a plan's stages use, and what that rules out.

A pooled cluster (hardware/topology.py) is an ordered list of homogeneous pools. A plan puts
each pipeline stage on one pool (``Plan.stage_pools``); the degrees tp, cp, dp, ep, the
micro-batch, ZeRO, vp and the rank order are the same on every stage, as Megatron-LM and NeMo
require (one process-group layout for the whole job; per-pool degrees are not searched). So a
stage has S = tp * cp * dp devices, a used pool of n_i devices hosts n_i / S consecutive stages
and pp = sum_i n_i / S. Pools are used whole or left idle, each used pool's stages are
contiguous, and pp is the outermost rank axis so that each stage's ranks lie inside its pool.
Stage s is then costed with its pool's accelerator, memory and tiers (cost/stage.py
``StageTerms.at``), and a stage next to another pool pays the inter-pool link for its p2p
(cost/pp.py ``stage_p2p_s``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from paraplan.cost.floor import compute_floor_s, ends_floor_s
from paraplan.cost.plan import Axis, Job, Layout
from paraplan.cost.pp_schedule import bubble_weight_floor
from paraplan.graph import LayerGraph
from paraplan.hardware import Cluster

__all__ = [
    "check_stage_pools",
    "pool_sequence",
    "stage_pools_of",
    "pooled_devices",
    "PoolFloor",
    "pool_floors",
    "pooled_pipeline_floor_s",
    "peak_flops_per_s",
]


def pool_sequence(stage_pools: tuple[int, ...]) -> tuple[int, ...]:
    """The pools in stage order, each once: (1, 1, 0, 0) -> (1, 0)."""
    seq: list[int] = []
    for p in stage_pools:
        if not seq or seq[-1] != p:
            seq.append(p)
    return tuple(seq)


def stage_pools_of(cluster: Cluster, sequence: tuple[int, ...], stage_devices: int) -> tuple[int, ...] | None:
    """Pool of each stage when the pools of ``sequence`` host stages of ``stage_devices``
    devices each, in that order; None when some pool's devices are not a multiple of it."""
    out: list[int] = []
    for p in sequence:
        n = cluster.pools[p].num_devices
        if n % stage_devices:
            return None
        out += [p] * (n // stage_devices)
    return tuple(out)


def pooled_devices(plan: Layout, cluster: Cluster) -> int:
    """Devices the plan runs on: every device of each pool it uses."""
    return sum(cluster.pools[p].num_devices for p in set(plan.stage_pools))


def check_stage_pools(plan: Layout, cluster: Cluster) -> None:
    """The rules of the module docstring; ValueError names the knob, the values and the rule."""
    pools = plan.stage_pools
    if not cluster.pools:
        if pools:
            raise ValueError(f"plan.stage_pools={list(pools)} needs a cluster with pools (cluster.pools)")
        return
    if len(pools) != plan.pp or any(not 0 <= p < len(cluster.pools) for p in pools):
        raise ValueError(
            f"plan.stage_pools={list(pools)} must give one pool index (0..{len(cluster.pools) - 1}, "
            f"in cluster.pools order) per pipeline stage, pp={plan.pp}"
        )
    seq = pool_sequence(pools)
    if len(seq) != len(set(seq)):
        raise ValueError(f"plan.stage_pools={list(pools)}: each pool's stages must be consecutive")
    per_stage = plan.tp * plan.cp * plan.dp
    if stage_pools_of(cluster, seq, per_stage) != pools:
        sizes = {p: cluster.pools[p].num_devices for p in seq}
        raise ValueError(
            f"plan.stage_pools={list(pools)}: a used pool hosts all its devices / (tp*cp*dp = "
            f"{per_stage}) stages; pool devices {sizes} (degrees are the same on every pool)"
        )
    if plan.order[-1] is not Axis.PP:
        raise ValueError(
            f"plan.order={[a.value for a in plan.order]}: on a pooled cluster pp must "
            "be the outermost axis (last) so that each stage lies inside one pool"
        )


@dataclass(frozen=True, slots=True)
class PoolFloor:
    """Least compute of one micro-batch on one pool's devices: all the model's blocks, and the
    embedding + LM head (cost/floor.py compute_floor_s, ends_floor_s). Units: seconds."""

    blocks_s: float
    ends_s: float


def pool_floors(graph: LayerGraph, plan: Layout, job: Job, cluster: Cluster) -> dict[int, PoolFloor]:
    """PoolFloor of each pool the plan uses (depends on tp, cp, micro-batch and SP only)."""
    local = replace(plan, stage_pools=())
    out = {}
    for p in sorted(set(plan.stage_pools)):
        pool = cluster.pools[p]
        ends = ends_floor_s(graph, local, job, pool)
        out[p] = PoolFloor(max(0.0, compute_floor_s(graph, local, job, pool) - ends), ends)
    return out


def pooled_pipeline_floor_s(
    floors: dict[int, PoolFloor], plan: Layout, num_micro_batches: int, uniform_blocks: bool
) -> float:
    """Least 1F1B step of a pooled layout over every split and recompute (cost/pp.py pipeline_s).

    Formula: (m - 1/v) * M + S / v, with S = min_i B_i + min_i E_i a floor of the sum of stage
    times (every block at least as fast as on the fastest pool, the ends likewise) and
    M = max(S / pp, 1 / sum_s 1 / B_p(s)) a floor of the slowest stage: when every block costs
    the same on a pool (b_i = B_i / L), stage s with k_s blocks takes >= k_s b_p(s), and
    sum_s k_s = L forces max_s k_s b_p(s) >= L / sum_s (1 / b_p(s)). Not used when blocks differ
    (several block kinds, LayerGraph.kind_blocks: ``uniform_blocks`` false).
    Source: pipeline_s = m max + (sum - max) / v = (m - 1/v) max + sum / v grows with both
    (m >= 1 >= 1/v). Units: seconds."""
    total = min(f.blocks_s for f in floors.values()) + min(f.ends_s for f in floors.values())
    slowest = total / plan.pp
    if uniform_blocks and all(f.blocks_s > 0 for f in floors.values()):
        slowest = max(slowest, 1 / sum(1 / floors[p].blocks_s for p in plan.stage_pools))
    w = bubble_weight_floor(plan.pp_schedule, plan.vp)  # 1/v, or a floor of the schedule's weight
    return (num_micro_batches - w) * slowest + total * w


def peak_flops_per_s(plan: Layout, cluster: Cluster, precision: str) -> float:
    """Mean peak of the devices the plan runs on (MFU's denominator). Units: FLOP/s."""
    if not cluster.pools:
        return cluster.accelerator.peak_for(precision)
    used = sorted(set(plan.stage_pools))
    total = sum(cluster.pools[p].num_devices * cluster.pools[p].accelerator.peak_for(precision) for p in used)
    return total / pooled_devices(plan, cluster)
