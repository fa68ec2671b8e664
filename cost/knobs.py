"""The training knobs' enumerations: the values a job's and a plan's enumerated fields take (cost/plan.py
re-exports them; the MoE software state's are cost/software.py, the pipeline schedules
cost/pp_schedule.py)."""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "Axis",
    "Precision",
    "AttentionKernel",
    "Allocator",
    "OptimizerMoments",
    "CrossEntropy",
    "SelectivePolicy",
    "RecomputeModule",
    "OffloadModule",
    "Recompute",
    "CPComm",
]


class Axis(StrEnum):
    TP = "tp"
    CP = "cp"
    DP = "dp"
    PP = "pp"


class Precision(StrEnum):
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"  # per-tensor scaling, delayed or current ("FP8-CS"; Megatron --fp8-recipe tensorwise)
    FP8_BLOCKWISE = "fp8_blockwise"  # 1x128 / 128x128 block scales (--fp8-recipe blockwise)
    MXFP8 = "mxfp8"  # 32-element blocks, E8M0 scales, Blackwell (--fp8-recipe mxfp8, "FP8-MX")
    NVFP4 = "nvfp4"  # 16-element FP4 blocks, E4M3 scales, Blackwell (--fp4-recipe nvfp4)


class AttentionKernel(StrEnum):
    """Which fused-attention kernels the run uses (cost/compute.py ``attention_s``)."""

    FUSED = "fused"  # the generation's own kernel: cuDNN / Transformer Engine, FlashAttention-3 on Hopper
    FLASH2 = "flash2"  # FlashAttention-2 (flash-attn 2.x, written for Ampere's instructions)
    FLASH1 = "flash1"  # FlashAttention-1 (flash-attn 1.x, or its Triton port): half FA2's rate


class Allocator(StrEnum):
    """The CUDA caching allocator's mode (``PYTORCH_CUDA_ALLOC_CONF``; cost/memory.py
    ``allocator_overhead``)."""

    DEFAULT = "default"  # fixed-size segments, split and cached
    EXPANDABLE_SEGMENTS = "expandable_segments"  # expandable_segments:True, segments grown in place


class OptimizerMoments(StrEnum):
    """Adam's momentum and variance dtype (cost/dp.py ``moment_bytes``): fp32 (torch, DeepSpeed,
    Megatron's default) or bf16 (Megatron's precision-aware optimizer, ``exp_avg_dtype`` and
    ``exp_avg_sq_dtype`` bf16, as Megatron-Bridge's Moonlight and DeepSeek recipes set them)."""

    FP32 = "fp32"
    BF16 = "bf16"


class CrossEntropy(StrEnum):
    """How the loss is computed over the logits (cost/memory.py ``logit_bytes_per_element``)."""

    FUSED = "fused"  # fused vocab-parallel kernel (Megatron / TE): bf16 logits + fp32 softmax
    UPCAST = "upcast"  # logits upcast to fp32, torch cross_entropy (torchtitan, HF Trainer)
    COMPILED = "compiled"  # the same under torch.compile (torchtitan 2025+): bf16 logits + bf16 grad


class SelectivePolicy(StrEnum):
    """What ``recompute: selective`` keeps (cost/recompute.py): the framework's own policy."""

    CORE_ATTENTION = "core_attention"  # Megatron: recompute the attention core only
    TORCHTITAN_OP = "torchtitan_op"  # torchtitan op-level SAC: save every other matmul + SDPA


class RecomputeModule(StrEnum):
    """Megatron ``--recompute-modules`` choices (megatron-core 0.19.2 transformer_config.py);
    what each stores and re-runs: cost/recompute_modules.py."""

    CORE_ATTN = "core_attn"
    LAYERNORM = "layernorm"
    MLA_UP_PROJ = "mla_up_proj"
    MOE_ACT = "moe_act"
    SHARED_EXPERTS = "shared_experts"
    MLP = "mlp"
    MOE = "moe"


class OffloadModule(StrEnum):
    """Megatron ``--fine-grained-activation-offloading --offload-modules`` choices whose inputs
    paraplan prices (megatron-core 0.19.2 transformer_config.py ``offload_modules``; what each
    moves to host memory and what it costs: cost/offload.py). Megatron's eighth choice,
    fused_group_mlp, needs Transformer Engine's op fuser and is not offered."""

    ATTN_NORM = "attn_norm"
    QKV_LINEAR = "qkv_linear"
    CORE_ATTN = "core_attn"
    ATTN_PROJ = "attn_proj"
    MLP_NORM = "mlp_norm"
    EXPERT_FC1 = "expert_fc1"
    MOE_ACT = "moe_act"


class Recompute(StrEnum):
    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"


class CPComm(StrEnum):
    """How context-parallel ranks exchange K/V (Megatron ``--cp-comm-type``; cost/cp.py)."""

    P2P = "p2p"  # ring: cp - 1 send/recv steps overlapped with attention (Megatron's default)
    ALL_GATHER = "all_gather"  # gather all K/V first, reduce-scatter dK/dV (Llama 3's CP)
