"""Host-side time of a MoE layer from the software state that runs it.

A MoE layer's router, top-k, permute, sort and unpermute are many small kernels; launched from
the host one by one they are launch-bound, and the token dispatcher needs the per-expert token
counts on the host (all-to-all splits, grouped-GEMM sizes): a device-to-host sync that drains
the launch queue, after which the GPU idles until the host has launched the next kernels
(Megatron-Core MoE README, "CUDA graphs" and "sync-free" sections; docs moe_physics.md Sec. 3.3).
The host launches kernels while the GPU runs the ones already queued, so launching costs time
only where it outruns the GPU; the sync lets the host run ahead by at most one layer. Per MoE
block and pass (forward; backward launches twice the kernels, dgrad and wgrad):

    time = max(gpu_s, launch_s) + sync_s

- ``launch_s = layer_s * uncaptured(cuda_graphs) + local_experts * expert_s * (graphs != full)``:
  ``layer_s`` the router / permute / dispatch kernels' host time with nothing captured
  (Efficiency ``moe_layer_overhead_s``, hardware/data/efficiency.yaml ``moe_layer_overhead_us``;
  a host/CPU cost, one value for every generation), PARTIAL_UNCAPTURED of it left by Transformer
  Engine's partial scopes (attn, moe_router, moe_preprocess captured); ``expert_s``
  (EXPERT_LAUNCH_S) one local expert's GEMM, activation and quantisation launches (Transformer
  Engine's GroupedLinear launches one GEMM per expert; partial scopes leave the experts
  uncaptured). This is why the same Qwen3-30B-A3B run is 2.6x slower per token at micro-batch 1
  on 8 B200 (row 340, 28.2 s) than at micro-batch 4 on 8 GB200 (row 332, 11.0 s): four times the
  layer passes, each too short to hide its 16 local experts' launches.
- The per-expert launches depend on the precision (``expert_launch_s``): in BF16 GroupedLinear
  launches each expert's GEMM alone; under an FP8 recipe (tensorwise, blockwise, MXFP8, NVFP4)
  Transformer Engine also quantises each expert's GEMM input (and, backward, its output
  gradient) in kernels of its own (transformer_engine/pytorch/module/grouped_linear.py: the
  input is split per expert and each split cast by its quantizer before the GEMM), about twice
  the launches per expert. EXPERT_LAUNCH_BF16_S is fitted on its own, bounded above by the FP8
  family's EXPERT_LAUNCH_S with a prior of half of it (two of the four launches). The pair that
  shows it: the same Qwen3-235B layout (tp 1, pp 8, ep 8, micro-batch 1, 16 local experts,
  partial graphs) measured 25.9 s in BF16 on 256 GB200 (row 2057) and 49.6 s in MXFP8 on 256
  B300 (row 276), where one launch cost for both predicts 31.8 s and 31.0 s.
- Megatron's router and permute fusion (``job.moe_router_fusion``, ``job.moe_permute_fusion``,
  ``fusion_launch_s``): unfused, the router's top-k, scores and aux loss and the token permute /
  unpermute run as PyTorch ops, each a launch of TORCH_OP_LAUNCH_S, added to ``launch_s`` (the
  counts and sources in ``router_unfused_kernels`` / ``permute_unfused_kernels``).
- ``sync_s`` (MOE_SYNC_S): the device-to-host sync's drain (the dispatcher needs the per-expert
  token counts on the host). Every dropless dispatcher syncs once per MoE layer pass in
  megatron-core 0.19.2 (moe/token_dispatcher.py, moe/fused_a2a.py): alltoall at its
  ``cuda_sync_point`` ("before_ep_alltoall" for ep > 1), DeepEP through the host list of
  received tokens per expert its dispatch returns, HybridEP waiting on the count in pinned
  memory unless ``num_permuted_tokens`` is given (a capacity budget or drop-and-pad).
  Megatron's 1F1B EP overlap hides it under the other micro-batch's
  kernels (the 16-GPU Qwen3-30B nsys pair: HybridEP metadata preprocess 3.109 s -> 0.670 s per
  step with the overlap on, moe_physics.md Sec. 3.1); full CUDA graphs need sync-free dispatch,
  so there is none.

Counting the launches by module and graph scope in place of ``layer_s`` was tried and not kept
(docs/moe_physics.md Sec. 5.12, benchmarks/host_counts.py).

Parameters fitted to the calibration file's 78 MoE rows and its one-setting pairs
(benchmarks/calibrate_moe.py, 2026-12-01; unchanged over its 76 rows of 2026-12-02, after the
recompute modules, and refitted unchanged after DeepEP's combine on NVL72, cost/dispatch.py):
``moe_layer_overhead_us`` 1000 us, EXPERT_LAUNCH_S 160 us, MOE_SYNC_S 50 us,
PARTIAL_UNCAPTURED 0.25 (not fitted: a quarter of the router / permute launches stay outside TE's
scopes); the sync bounded at 300 us by the 16-GPU nsys idle bound
(<= 1.9 s of a 24.7 s step GPU-idle over 6,144 layer passes). Leave-one-source-out
(benchmarks/calibrate_moe.py --crossval) the fitted values move within 500-1000 / 160-200 /
50-100 us and the held-out MoE error is 21.7% / 41.6% against 21.7% / 41.5% in-sample (76 rows,
2026-12-02; 24.1% / 48.4% against 21.7% / 48.3% over 78 before); after DeepEP's combine on NVL72
(2026-12-02, later) 21.4% / 41.9% held out against 21.4% / 40.9% in-sample, the held-out fits
within 1000 / 160-200 / 0-300 us. Refitted 2026-12-02 (last) with EXPERT_LAUNCH_BF16_S beside
them (76 MoE rows and the one-setting pairs; grid 0-200 us, bounded by EXPERT_LAUNCH_S, prior half
of it): ``moe_layer_overhead_us`` 1500 us, EXPERT_LAUNCH_S 160 us, EXPERT_LAUNCH_BF16_S 80 us,
MOE_SYNC_S 50 us; MoE in-sample 21.4% / 40.9% -> 17.4% / 40.9% (17.4% / 40.5% with the
dropless imbalance refitted after it, cost/ep.py); leave-one-source-out 17.6% / 40.9% (the
held-out fits within 1500 / 160-200 / 80 / 0-300 us; docs/moe_physics.md Sec. 5.3).
Refitted 2026-12-02 (third round) after the gpt-oss rows took their preset's attention pattern
and biases and the FP8 recipes' quantisation padding was costed (cost/ep.py
QUANTIZATION_PADDING_ELEMS; 76 MoE rows and the one-setting pairs, same grids): 1500 / 160 / 80 us
unchanged, MOE_SYNC_S 50 -> 100 us (docs/moe_physics.md Sec. 5.6). Refitted on the merged main
(2026-12-02, third round, with the Hopper attention refit of Sec. 5.5 beside it; same rows and
grids): 1500 / 160 / 80 us unchanged, MOE_SYNC_S 100 -> 200 us (objective 1.448 -> 1.446).
"""

from __future__ import annotations

from typing import NamedTuple

from paraplan.cost.plan import CudaGraphs, Job, Layout, Precision
from paraplan.graph.spec import Router
from paraplan.hardware import Efficiency

__all__ = [
    "PARTIAL_UNCAPTURED",
    "EXPERT_LAUNCH_S",
    "EXPERT_LAUNCH_BF16_S",
    "MOE_SYNC_S",
    "expert_launch_s",
    "moe_launch_s",
    "moe_sync_s",
    "moe_pass_s",
    "TORCH_OP_LAUNCH_S",
    "FusionLaunches",
    "router_unfused_kernels",
    "permute_unfused_kernels",
    "fusion_launch_s",
]

PARTIAL_UNCAPTURED = 0.25  # share of the router/permute launches left uncaptured by partial scopes
EXPERT_LAUNCH_S = 160e-6  # host time of one local expert's kernels per forward pass, FP8 recipes (fitted)
EXPERT_LAUNCH_BF16_S = 80e-6  # the same without the per-expert quantisation, BF16/FP16 (fitted; <= FP8's)
MOE_SYNC_S = 200e-6  # device-to-host sync drain per MoE layer per pass (fitted; benchmarks/calibrate_moe.py)
TORCH_OP_LAUNCH_S = 10e-6  # host time of one eager PyTorch op's launch (prior, cited from memory; not fitted)


def _uncaptured(graphs: CudaGraphs) -> float:
    return {CudaGraphs.NONE: 1.0, CudaGraphs.PARTIAL: PARTIAL_UNCAPTURED, CudaGraphs.FULL: 0.0}[graphs]


def expert_launch_s(precision: Precision) -> float:
    """Host time of one local expert's forward launches: EXPERT_LAUNCH_BF16_S where the GEMMs run
    unquantised (BF16, FP16), EXPERT_LAUNCH_S under an FP8 / FP4 recipe, whose per-expert
    quantisation kernels add their launches (module docstring). Units: seconds."""
    return EXPERT_LAUNCH_BF16_S if precision in (Precision.BF16, Precision.FP16) else EXPERT_LAUNCH_S


def moe_launch_s(plan: Layout, local_experts: int, eff: Efficiency, precision: Precision) -> float:
    """Host launch time of one MoE layer's forward pass (module docstring). Units: seconds."""
    if plan.cuda_graphs is CudaGraphs.FULL:
        return 0.0
    return eff.moe_layer_overhead_s * _uncaptured(plan.cuda_graphs) + local_experts * expert_launch_s(
        precision
    )


def moe_sync_s(plan: Layout) -> float:
    """Exposed device-to-host sync of one MoE layer pass: none under the EP overlap or full
    graphs (module docstring). Units: seconds."""
    return 0.0 if plan.moe_overlap or plan.cuda_graphs is CudaGraphs.FULL else MOE_SYNC_S


def moe_pass_s(gpu_s: float, launch_s: float, plan: Layout) -> float:
    """One pass of a MoE block: max(GPU time, host launch time) + sync. Units: seconds."""
    return max(gpu_s, launch_s) + moe_sync_s(plan)


# --------------------------------------------------------------------------- router / permute fusion


class FusionLaunches(NamedTuple):
    """Host time of the launches an unfused router and permute add to one MoE layer (seconds)."""

    forward_s: float
    backward_s: float


def router_unfused_kernels(router: Router, top_k: int) -> tuple[int, int]:
    """(forward, backward) kernels the unfused router launches beyond the fused path, per MoE layer.

    Counted from megatron-core 0.19.2 moe_utils.py, ``topk_routing_with_score_function`` and
    ``compute_routing_scores_for_aux_loss`` with ``fused=False`` (one launch per PyTorch op that
    moves data): scores (softmax 1; sigmoid: fp32 cast + sigmoid 2), the expert bias (add + gather
    2), the top-k (1; group-limited: top-2 per group, sum, group top-k, zeros, scatter, mask expand,
    bool, invert, masked_fill, top-k 10), the sigmoid's normalisation (sum, add, divide 3), the
    scaling factor (1), the cast back (1), the dense probabilities and routing map (zeros, scatter,
    zeros, int, scatter, bool 6); with a balancing loss the aux-loss scores again (softmax 1 or
    sigmoid and normalisation 5, top-k 1, routing map 4) and the loss itself (about 4: token sums,
    products, the sum). Fused, Transformer Engine (>= 2.7) runs the top-k with its score function,
    the aux-loss scores and the aux loss as one kernel each. Backward: about one kernel per
    differentiable op of the forward chain (scores, gather, normalisation, scaling, cast, scatter of
    the probabilities: 8; the aux loss 6) against one per fused kernel. An approximate count from
    reading the code, not a profile."""
    sigmoid = router.score == "sigmoid"
    forward = (2 if sigmoid else 1) + (2 if router.expert_bias else 0)
    forward += 10 if router.groups > 1 and router.group_topk > 0 else 1
    forward += 3 if sigmoid and top_k > 1 else 0
    forward += (1 if router.scaling_factor != 1.0 else 0) + 1 + 6
    backward, fused = 8, 1
    if router.balance != "none" and router.aux_loss_coeff > 0:
        forward += (5 if sigmoid else 1) + 1 + 4 + 4
        backward, fused = backward + 6, fused + 2
    return forward - fused, backward - fused


def permute_unfused_kernels() -> tuple[int, int]:
    """(forward, backward) kernels the unfused permute and unpermute launch beyond the fused path,
    per MoE layer. megatron-core 0.19.2 moe_utils.py ``permute`` (dropless, probabilities carried):
    bool cast, transpose copy, a stable argsort (radix sort, about 3 kernels), a modulo, the
    probabilities' transpose copy and gather, the tokens' index_select: 9 against Transformer
    Engine's ``moe_permute_with_probs`` (row-id map, about 3 kernels, and the permute: 4);
    ``unpermute``: zeros and scatter_add (2) against one. Backward: index_select's (zeros,
    index_add) and scatter_add's (gather) 3 against 2 fused kernels. The alltoall dispatcher's
    regrouping by local expert (``sort_chunks_by_idxs``) is left out: it is the dispatcher's, and
    the block's work does not read the dispatcher (cost/stage_build.py ``_WORK_IGNORES``)."""
    return (9 + 2) - (4 + 1), 3 - 2


def fusion_launch_s(job: Job, router: Router, top_k: int, graphs: CudaGraphs) -> FusionLaunches:
    """Host time an unfused router (``job.moe_router_fusion`` false) and permute
    (``job.moe_permute_fusion`` false) add to one MoE layer's launches:
    ``kernels x TORCH_OP_LAUNCH_S`` per pass, the router's only where it is not captured
    (partial graphs capture the moe_router scope; full graphs everything) and the permute's unless
    full graphs (the unpermute runs after the experts, outside the partial scopes).
    TORCH_OP_LAUNCH_S (10 us): an eager PyTorch op's host dispatch and launch, cited from memory
    (a few us of CUDA launch plus the dispatcher's Python and C++ overhead; PyTorch's own
    performance notes put small-op overhead near 10 us); it is far below the fitted per-expert
    launch (EXPERT_LAUNCH_S, Transformer Engine's GEMM and quantisation path). Units: seconds."""
    if graphs is CudaGraphs.FULL:
        return FusionLaunches(0.0, 0.0)
    forward = backward = 0
    if not job.moe_router_fusion and graphs is CudaGraphs.NONE:
        f, b = router_unfused_kernels(router, top_k)
        forward, backward = forward + f, backward + b
    if not job.moe_permute_fusion:
        f, b = permute_unfused_kernels()
        forward, backward = forward + f, backward + b
    return FusionLaunches(forward * TORCH_OP_LAUNCH_S, backward * TORCH_OP_LAUNCH_S)
