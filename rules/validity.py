"""Model/plan validity facts the framework rules share, each stated once: how tensor parallelism
splits the attention heads, and how expert parallelism splits the experts.

These are the same facts as ``cost.plan.check_plan`` (heads % tp; kv heads a multiple or divisor
of tp) and ``cost.plan.check_expert_parallel`` (ep > 1 needs experts; experts % ep), and the
search domains of solver/space.py; every framework rule asks these functions."""
from __future__ import annotations

from paraplan.graph import ModelSpec

__all__ = ["tp_splits_heads", "ep_splits_experts"]


def tp_splits_heads(spec: ModelSpec, tp: int) -> bool:
    """Whether tp ranks split the attention: heads % tp == 0, and the kv heads (query groups)
    are a multiple or a divisor of tp (Megatron rules 5-6; a kv head is replicated when tp
    exceeds them)."""
    return spec.num_heads % tp == 0 and (spec.num_kv_heads % tp == 0
                                         or tp % spec.num_kv_heads == 0)


def ep_splits_experts(spec: ModelSpec, ep: int) -> bool:
    """Whether ep ranks split the routed experts: ep == 1, or a mixture-of-experts model with
    num_experts % ep == 0."""
    return ep == 1 or (spec.is_moe and spec.num_experts % ep == 0)
