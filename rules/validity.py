"""Model/plan validity facts the framework rules share, over a ModelSpec: how tensor parallelism
splits the attention heads, how expert parallelism splits the experts, how the global batch
splits into micro-batches and how context parallelism splits the sequence.

Each rule is stated once, in cost/validity.py, which ``check_plan`` and the solver's search
domains (solver/space.py) call too; these only read the counts off the model, job and plan."""

from __future__ import annotations

from paraplan.cost import Job, Plan
from paraplan.cost import validity as _rule
from paraplan.graph import ModelSpec

__all__ = [
    "tp_splits_heads",
    "ep_splits_experts",
    "batch_splits",
    "cp_splits_sequence",
    "hybrid_pattern",
    "mtp_layers",
]


def tp_splits_heads(spec: ModelSpec, tp: int) -> bool:
    """cost.validity.tp_splits_heads of the model's heads and kv heads (Megatron rules 5-6)."""
    return _rule.tp_splits_heads(spec.num_heads, spec.num_kv_heads, tp)


def ep_splits_experts(spec: ModelSpec, ep: int) -> bool:
    """cost.validity.ep_splits_experts of the model's routed experts (0 for a dense model)."""
    return _rule.ep_splits_experts(spec.num_experts if spec.is_moe else 0, ep)


def batch_splits(job: Job, plan: Plan) -> bool:
    """cost.validity.batch_splits of the job's global batch over the plan's micro-batch and dp."""
    return _rule.batch_splits(job.global_batch, plan.micro_batch, plan.dp)


def cp_splits_sequence(job: Job, cp: int) -> bool:
    """cost.validity.cp_splits_sequence of the job's sequence length."""
    return _rule.cp_splits_sequence(job.seq_len, cp)
    """Whether cp ranks split the sequence into 2 * cp equal chunks (causal load balancing:
    each rank takes one chunk from each end): cp == 1 or seq_len % (2 * cp) == 0."""
    return cp == 1 or job.seq_len % (2 * cp) == 0


def hybrid_pattern(spec: ModelSpec) -> str | None:
    """The model's hybrid layer pattern (one Megatron symbol per layer, HYBRID_SYMBOLS) from the
    spec's ``layer_pattern``, or None for a transformer whose layers all hold attention + MLP."""
    return spec.layer_pattern or None


def mtp_layers(spec: ModelSpec) -> int:
    """Multi-token-prediction layers after the decoder (DeepSeek-V3: 1), from ``spec.mtp_layers``."""
    return spec.mtp_layers
