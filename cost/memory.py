"""Peak memory of one device of a pipeline stage, by part.

peak = model state (weights + grads + optimizer, by ZeRO stage, see dp.py)
     + activations (per block per micro-batch, see recompute.py) * layers * in-flight micro-batches
     + transient working set (FULL recompute re-materialises one block; ZeRO-3 gathers two blocks)
     + logits on the last stage + a fixed runtime reserve.
"""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.cost.dp import WEIGHT_BYTES, grad_bytes, shard_degree, state_bytes
from paraplan.cost.plan import Recompute
from paraplan.cost.pp import in_flight_micro_batches
from paraplan.cost.stage import StageTerms

__all__ = ["StageMemory", "stage_memory", "RUNTIME_RESERVE_BYTES"]

RUNTIME_RESERVE_BYTES = 1.5e9  # CUDA context (~0.5 GB) + NCCL/communication buffers (~1 GB)
ZERO3_PREFETCH_BLOCKS = 2  # FSDP keeps the current and the prefetched block unsharded


@dataclass(frozen=True, slots=True)
class StageMemory:
    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    buffers_bytes: float

    @property
    def total_bytes(self) -> float:
        return (self.weights_bytes + self.grads_bytes + self.optimizer_bytes
                + self.activations_bytes + self.buffers_bytes)


def stage_memory(terms: StageTerms, stage: int, layers: int, recompute: Recompute) -> StageMemory:
    """Peak bytes on one device of ``stage`` holding ``layers`` blocks."""
    plan = terms.plan
    state = state_bytes(terms.stage_params(stage, layers), plan.zero, shard_degree(plan),
                        grad_bytes(terms.job))
    block = terms.block[recompute]
    held = in_flight_micro_batches(stage, plan, terms.num_micro_batches)
    activations = layers * block.activation_bytes * held + (block.working_bytes if layers else 0.0)
    if stage == 0:
        activations += terms.first.activation_bytes
    if stage == plan.pp - 1:
        activations += terms.last.activation_bytes
    buffers = RUNTIME_RESERVE_BYTES
    if plan.zero >= 3 and shard_degree(plan) > 1:
        buffers += ZERO3_PREFETCH_BLOCKS * terms.block_params * WEIGHT_BYTES
    return StageMemory(state.weights, state.grads, state.optimizer, activations, buffers)
