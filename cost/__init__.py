"""The one cost model: compute, memory, communication and schedule of a parallel training step."""

from paraplan.cost.block import BlockCost
from paraplan.cost.comm import (
    GroupSpan,
    allgather_s,
    allreduce_s,
    alpha_beta_s,
    group_span,
    reduce_scatter_s,
    ring_allgather_s,
    ring_allreduce_s,
)
from paraplan.cost.dispatch import DispatchTime, dispatch_time, dispatcher_sm_fraction
from paraplan.cost.dp import state_bytes
from paraplan.cost.evaluate import Breakdown, evaluate, step_time_s
from paraplan.cost.flops import matmul_params, model_flops_per_token
from paraplan.cost.megatron_flops import FlopCounting, megatron_flops_per_step, padded_vocab_size
from paraplan.cost.memory import StageMemory, stage_memory
from paraplan.cost.plan import (
    DEFAULT_ORDER,
    AttentionKernel,
    Axis,
    CPComm,
    CudaGraphs,
    Job,
    Layout,
    MoEDispatcher,
    MoEProbs,
    MoERouting,
    PartialPlan,
    Plan,
    PPSchedule,
    Precision,
    Recompute,
)
from paraplan.cost.pp import bubble_s, in_flight_micro_batches, pipeline_s
from paraplan.cost.recompute import stored_activation_bytes
from paraplan.cost.stage import StageTerms
from paraplan.cost.stage_build import stage_terms
from paraplan.cost.validity import check_plan

__all__ = [
    "DEFAULT_ORDER",
    "AttentionKernel",
    "Axis",
    "BlockCost",
    "Breakdown",
    "CPComm",
    "CudaGraphs",
    "PPSchedule",
    "DispatchTime",
    "FlopCounting",
    "MoEDispatcher",
    "MoEProbs",
    "MoERouting",
    "GroupSpan",
    "Job",
    "Layout",
    "PartialPlan",
    "Plan",
    "Precision",
    "Recompute",
    "StageMemory",
    "StageTerms",
    "allgather_s",
    "allreduce_s",
    "alpha_beta_s",
    "bubble_s",
    "check_plan",
    "dispatch_time",
    "dispatcher_sm_fraction",
    "evaluate",
    "group_span",
    "in_flight_micro_batches",
    "matmul_params",
    "megatron_flops_per_step",
    "model_flops_per_token",
    "padded_vocab_size",
    "pipeline_s",
    "reduce_scatter_s",
    "ring_allgather_s",
    "ring_allreduce_s",
    "stage_memory",
    "stage_terms",
    "state_bytes",
    "step_time_s",
    "stored_activation_bytes",
]
