"""Model/plan validity facts the framework rules share, each stated once: how tensor parallelism
splits the attention heads, how expert parallelism splits the experts, how the global batch
splits into micro-batches and how context parallelism splits the sequence.

These are the same facts as ``cost.plan.check_plan`` (heads % tp; kv heads a multiple or divisor
of tp; global_batch % (micro_batch * dp); seq_len % (2 * cp)) and
``cost.plan.check_expert_parallel`` (ep > 1 needs experts; experts % ep), and the search domains
of solver/space.py; every framework rule asks these functions."""

from __future__ import annotations

from paraplan.cost import Job, Plan
from paraplan.cost.plan import check_layer_kinds
from paraplan.graph import ModelSpec

__all__ = ["tp_splits_heads", "ep_splits_experts", "batch_splits", "cp_splits_sequence", "layer_kinds_split"]


def tp_splits_heads(spec: ModelSpec, tp: int) -> bool:
    """Whether tp ranks split the attention: heads % tp == 0, and the kv heads (query groups)
    are a multiple or a divisor of tp (Megatron rules 5-6; a kv head is replicated when tp
    exceeds them)."""
    return spec.num_heads % tp == 0 and (spec.num_kv_heads % tp == 0 or tp % spec.num_kv_heads == 0)


def ep_splits_experts(spec: ModelSpec, ep: int) -> bool:
    """Whether ep ranks split the routed experts: ep == 1, or a mixture-of-experts model with
    num_experts % ep == 0."""
    return ep == 1 or (spec.is_moe and spec.num_experts % ep == 0)


def batch_splits(job: Job, plan: Plan) -> bool:
    """Whether the global batch is a whole number of micro-batches per data-parallel replica:
    global_batch % (micro_batch * dp) == 0 (global = micro-batch x accumulation x replicas)."""
    return job.global_batch % (plan.micro_batch * plan.dp) == 0


def cp_splits_sequence(job: Job, cp: int) -> bool:
    """Whether cp ranks split the sequence into 2 * cp equal chunks (causal load balancing:
    each rank takes one chunk from each end): cp == 1 or seq_len % (2 * cp) == 0."""
    return cp == 1 or job.seq_len % (2 * cp) == 0


def layer_kinds_split(spec: ModelSpec, plan: Plan) -> bool:
    """Whether the plan's tp and cp split the model's Mamba and vision layers
    (cost.plan.check_layer_kinds: no cp with Mamba layers; tp divides Mamba heads and groups and
    the vision heads)."""
    try:
        check_layer_kinds(plan, spec)
    except ValueError:
        return False
    return True
