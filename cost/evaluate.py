"""``evaluate``: step time and per-stage memory of a fully fixed plan, with their parts.

step_s = pipeline_s + dp_exposed_s + optimizer_s, where
pipeline_s = m * max_s t_s + (sum_s t_s - max_s t_s) * w             (pp.py)
      (w = 1/v under 1F1B and interleaving, the schedule's weight otherwise: pp_schedule.py)
t_s = sum_k n_k,s * block_k(recompute_s) + ends + p2p                 (stage.py)
      (partial recompute: recomputed blocks at FULL, the rest at NONE; recompute_layers.py)
dp_exposed_s = max_s max(0, sync_s - backward_s)                     (dp.py, overlapped)
On a pooled cluster each stage is costed on its own pool (cost/pools.py); throughput and MFU
count the devices the plan runs on.
Parts: compute_s + exposed_comm_s + bubble_s + optimizer_s = step_s.
"""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.cost.flops import model_flops_per_token
from paraplan.cost.memory import StageMemory
from paraplan.cost.plan import Job, Plan
from paraplan.cost.pools import check_stage_pools, peak_flops_per_s, pooled_devices
from paraplan.cost.pp import bubble_s
from paraplan.cost.pp_schedule import rank_values
from paraplan.cost.recompute_layers import partial_stage_memory, recomputed_counts, stage_cost
from paraplan.cost.stage import StageTerms
from paraplan.cost.stage_build import stage_terms
from paraplan.cost.validity import check_layer_kinds, check_plan
from paraplan.graph import LayerGraph
from paraplan.hardware import Cluster

__all__ = ["Breakdown", "evaluate", "step_time_s"]


@dataclass(frozen=True, slots=True)
class Breakdown:
    step_time_s: float
    compute_s: float
    bubble_s: float
    exposed_comm_s: float
    optimizer_s: float
    stage_time_s: tuple[float, ...]
    stage_memory: tuple[StageMemory, ...]
    memory_capacity_bytes: float
    num_micro_batches: int
    model_flops_per_token: float
    tokens_per_s_per_gpu: float
    model_tflops_per_gpu: float
    mfu: float
    stage_capacity_bytes: tuple[float, ...] = ()  # per stage (differs on a pooled cluster)
    memory_headroom_bytes: float = 0.0  # kept free by solver.memory_headroom (not in capacity)

    @property
    def peak_memory_bytes(self) -> float:
        return max(m.total_bytes for m in self.stage_memory)

    @property
    def fits(self) -> bool:
        caps = self.stage_capacity_bytes or (self.memory_capacity_bytes,) * len(self.stage_memory)
        return all(m.total_bytes <= c for m, c in zip(self.stage_memory, caps, strict=True))

    @property
    def memory_reserve_bytes(self) -> float:
        """The runtime reserve (CUDA context, NCCL buffers, fragmentation) of the peak stage."""
        return self.stage_memory[self.binding_stage].reserve_bytes

    @property
    def binding_stage(self) -> int:
        return max(range(len(self.stage_memory)), key=lambda s: self.stage_memory[s].total_bytes)


@dataclass(frozen=True, slots=True)
class StepParts:
    step_s: float
    compute_s: float
    comm_s: float
    bubble_s: float
    dp_exposed_s: float
    optimizer_s: float
    stage_s: tuple[float, ...]


def step_time_s(terms: StageTerms) -> StepParts:
    """The formula of the module docstring, for the plan's layer split and recompute."""
    plan = terms.full_plan
    m = terms.num_micro_batches
    split = terms.stage_counts()
    rec = recomputed_counts(terms)
    costs = [stage_cost(terms, s, split[s], rec[s]) for s in range(plan.pp)]
    schedule = plan.pp_schedule  # DualPipe: rank s runs stages s and p - 1 - s (rank_values)
    stage_s = rank_values(schedule, [c.time_s for c in costs], mean=True)
    compute_s = rank_values(schedule, [c.compute_s for c in costs], mean=True)
    slowest = max(range(plan.pp), key=lambda s: stage_s[s])
    compute = m * compute_s[slowest]
    bubble = bubble_s(stage_s, plan.vp, float(terms.bubble_weight))
    dp_exposed = max(rank_values(schedule, [c.dp_exposed_s for c in costs], mean=False))
    optimizer = max(
        rank_values(schedule, [terms.optimizer_s(s, split[s]) for s in range(plan.pp)], mean=False)
    )
    comm = m * stage_s[slowest] - compute
    step = m * stage_s[slowest] + bubble + dp_exposed + optimizer
    return StepParts(step, compute, comm, bubble, dp_exposed, optimizer, tuple(stage_s))


def evaluate(graph: LayerGraph, cluster: Cluster, job: Job, plan: Plan) -> Breakdown:
    """Step time and memory of ``plan``; ValueError if the plan breaks a rule (see check_plan)."""
    spec = graph.spec
    check_stage_pools(plan, cluster)
    num_devices = pooled_devices(plan, cluster) if cluster.pools else cluster.num_devices
    check_plan(
        plan,
        job,
        num_devices=num_devices,
        num_layers=spec.num_layers,
        num_heads=spec.num_heads,
        num_kv_heads=spec.num_kv_heads,
        num_experts=spec.num_experts,
    )
    check_layer_kinds(plan, spec)
    peak = peak_flops_per_s(plan, cluster, job.precision.value)
    terms = stage_terms(graph, plan, job, cluster)
    parts = step_time_s(terms)
    rec = recomputed_counts(terms)
    memory = tuple(
        partial_stage_memory(terms, s, counts, rec[s]) for s, counts in enumerate(terms.stage_counts())
    )
    caps = tuple(terms.stage_capacity_bytes(s) for s in range(plan.pp))
    flops_per_token = model_flops_per_token(spec, job.seq_len)
    tokens_per_s_per_gpu = job.tokens_per_step / parts.step_s / num_devices
    achieved = flops_per_token * tokens_per_s_per_gpu
    return Breakdown(
        step_time_s=parts.step_s,
        compute_s=parts.compute_s,
        bubble_s=parts.bubble_s,
        exposed_comm_s=parts.comm_s + parts.dp_exposed_s,
        optimizer_s=parts.optimizer_s,
        stage_time_s=parts.stage_s,
        stage_memory=memory,
        memory_capacity_bytes=min(caps),
        num_micro_batches=terms.num_micro_batches,
        model_flops_per_token=flops_per_token,
        tokens_per_s_per_gpu=tokens_per_s_per_gpu,
        model_tflops_per_gpu=achieved / 1e12,
        mfu=achieved / peak,
        stage_capacity_bytes=caps,
        memory_headroom_bytes=cluster.memory_headroom_bytes,
    )
