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

from dataclasses import replace

from paraplan.cost.plan import Axis, Job, Plan
from paraplan.cost.stage import compute_floor_s, ends_floor_s
from paraplan.graph import LayerGraph
from paraplan.hardware import Cluster

__all__ = ["check_stage_pools", "pool_sequence", "stage_pools_of", "pooled_devices",
           "pooled_compute_floor_s", "peak_flops_per_s"]


def pool_sequence(stage_pools: tuple[int, ...]) -> tuple[int, ...]:
    """The pools in stage order, each once: (1, 1, 0, 0) -> (1, 0)."""
    seq: list[int] = []
    for p in stage_pools:
        if not seq or seq[-1] != p:
            seq.append(p)
    return tuple(seq)


def stage_pools_of(cluster: Cluster, sequence: tuple[int, ...], stage_devices: int
                   ) -> tuple[int, ...] | None:
    """Pool of each stage when the pools of ``sequence`` host stages of ``stage_devices``
    devices each, in that order; None when some pool's devices are not a multiple of it."""
    out: list[int] = []
    for p in sequence:
        n = cluster.pools[p].num_devices
        if n % stage_devices:
            return None
        out += [p] * (n // stage_devices)
    return tuple(out)


def pooled_devices(plan: Plan, cluster: Cluster) -> int:
    """Devices the plan runs on: every device of each pool it uses."""
    return sum(cluster.pools[p].num_devices for p in set(plan.stage_pools))


def check_stage_pools(plan: Plan, cluster: Cluster) -> None:
    """The rules of the module docstring; ValueError names the knob, the values and the rule."""
    pools = plan.stage_pools
    if not cluster.pools:
        if pools:
            raise ValueError(f"plan.stage_pools={list(pools)} needs a cluster with pools "
                             "(cluster.pools)")
        return
    if len(pools) != plan.pp or any(not 0 <= p < len(cluster.pools) for p in pools):
        raise ValueError(
            f"plan.stage_pools={list(pools)} must give one pool index (0..{len(cluster.pools) - 1}, "
            f"in cluster.pools order) per pipeline stage, pp={plan.pp}")
    seq = pool_sequence(pools)
    if len(seq) != len(set(seq)):
        raise ValueError(f"plan.stage_pools={list(pools)}: each pool's stages must be consecutive")
    per_stage = plan.tp * plan.cp * plan.dp
    if stage_pools_of(cluster, seq, per_stage) != pools:
        sizes = {p: cluster.pools[p].num_devices for p in seq}
        raise ValueError(
            f"plan.stage_pools={list(pools)}: a used pool hosts all its devices / (tp*cp*dp = "
            f"{per_stage}) stages; pool devices {sizes} (degrees are the same on every pool)")
    if plan.order[-1] is not Axis.PP:
        raise ValueError(f"plan.order={[a.value for a in plan.order]}: on a pooled cluster pp must "
                         "be the outermost axis (last) so that each stage lies inside one pool")


def pooled_compute_floor_s(graph: LayerGraph, plan: Plan, job: Job, cluster: Cluster) -> float:
    """Least time one micro-batch needs summed over all stages of a pooled layout.

    Formula: min_i (floor_i - ends_i) + min_i ends_i over the pools i the plan uses, where
    floor_i = compute_floor_s on pool i (all layers + ends there) and ends_i = ends_floor_s: every
    block runs at least as fast as on the fastest pool for blocks, the ends likewise.
    Units: seconds."""
    local = replace(plan, stage_pools=())
    used = sorted(set(plan.stage_pools))
    ends = {p: ends_floor_s(graph, local, job, cluster.pools[p]) for p in used}
    blocks = min(compute_floor_s(graph, local, job, cluster.pools[p]) - ends[p] for p in used)
    return max(0.0, blocks) + min(ends.values())


def peak_flops_per_s(plan: Plan, cluster: Cluster, precision: str) -> float:
    """Mean peak of the devices the plan runs on (MFU's denominator). Units: FLOP/s."""
    if not cluster.pools:
        return cluster.accelerator.peak_for(precision)
    used = sorted(set(plan.stage_pools))
    total = sum(cluster.pools[p].num_devices * cluster.pools[p].accelerator.peak_for(precision)
                for p in used)
    return total / pooled_devices(plan, cluster)
