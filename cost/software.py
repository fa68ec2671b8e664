"""The software state a plan runs under that moves MoE step time: the token dispatcher, CUDA
graphs, the routing mode and where the router's probabilities are applied (fields of
cost.plan.Layout and Job; re-exported from cost.plan); the router and permute fusion are plain
Job booleans (``moe_router_fusion``, ``moe_permute_fusion``; cost/host.py ``fusion_launch_s``).
What each costs: cost/dispatch.py, cost/host.py, cost/ep.py; which framework runs which:
rules/moe_state.py."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["MoEDispatcher", "CudaGraphs", "MoERouting", "MoEProbs", "SOFTWARE_FIELDS"]

SOFTWARE_FIELDS = ("moe_dispatcher", "moe_overlap", "cuda_graphs")
"""The Layout fields of the software state."""


class MoEDispatcher(StrEnum):
    """How routed tokens reach their experts (Megatron ``--moe-token-dispatcher-type`` and
    ``--moe-flex-dispatcher-backend``; cost/dispatch.py)."""

    ALLTOALL = "alltoall"  # NCCL all-to-all: every top-k copy to its expert's rank
    ALLGATHER = "allgather"  # all-gather the tokens over EP, each rank keeps its experts' copies
    DEEPEP = "deepep"  # DeepEP: one copy per destination node, forwarded over NVLink
    HYBRIDEP = "hybridep"  # NVIDIA HybridEP: DeepEP's node deduplication, TMA copies, fewer SMs


class CudaGraphs(StrEnum):
    """How much of a step runs inside captured CUDA graphs (Megatron ``--cuda-graph-impl``,
    ``--cuda-graph-scope``; cost/host.py)."""

    NONE = "none"  # every kernel launched from the host
    PARTIAL = "partial"  # attention, router and MoE preprocess captured (TE scopes), experts not
    FULL = "full"  # whole layers captured (full-iteration graphs, sync-free dispatch)


class MoERouting(StrEnum):
    """How tokens are routed in training (cost/ep.py ``expert_imbalance``)."""

    DROPLESS = "dropless"  # natural routing, no token dropped: the busiest expert paces the layer
    FORCE_BALANCED = "force_balanced"  # --moe-router-force-load-balancing (benchmark-only)
    CAPACITY = "capacity"  # token dropping at job.moe_capacity_factor


class MoEProbs(StrEnum):
    """Where the router's probabilities multiply the routed copies (``job.moe_probs_applied``,
    resolved: cost/ep.py ``expert_stored_bytes``; which framework does which: rules/moe_probs.py).

    ``activation``: inside the experts' activation (megatron-core 0.16.1-0.19.2 experts.py,
    ``weighted_bias_swiglu_impl`` / ``activation_func_with_probs``), whose saved input the
    activation keeps anyway; the combine only unpermutes, so no routed output is kept.
    ``combine``: the routed output is multiplied at the combine (torchtitan 0.3.0
    ``routed_output * topk_scores``, DeepSpeed's einsum with ``combine_weights``), whose backward
    keeps that d-wide output per routed copy."""

    ACTIVATION = "activation"
    COMBINE = "combine"
