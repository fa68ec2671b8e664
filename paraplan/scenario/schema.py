"""The scenario a user writes (YAML, JSON or a dict), validated at the boundary with pydantic.

model:   exactly one of ``preset`` | ``hf_config`` | explicit fields
cluster: node ``preset`` and ``nodes`` or ``gpus``; or ``pools`` of (preset, nodes) for mixed GPUs
job:     ``seq_len``, ``global_batch``, ``precision``
plan:    optional; any subset of knobs fixes them (evaluate needs all)
solver:  optional; search options
calibration: optional; a calibration profile file (``paraplan calibrate``)

The section base and the limits of the keys are in paraplan/scenario/section.py, the ``model:`` section in
paraplan/scenario/model_section.py, the ``plan:`` section (the plan document, the I/O edge of cost.Plan) in
paraplan/scenario/plan_doc.py, and the safe reading of a scenario file in paraplan/scenario/scenario_file.py;
this module holds the other sections, ``Scenario`` and ``load_scenario``.

Size: one module past 400 lines because ``job:`` is one section whose keys (each a field a user
writes, with its description and bounds) belong together; the other sections are split out above.
"""

from __future__ import annotations

from os import PathLike
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from paraplan.capacity.sections import (
    MAX_DAYS,
    MAX_TOKENS,
    MAX_USD,
    ChooseSection,
    Objective,
    ReliabilitySection,
    StorageSection,
    check_capacity,
)
from paraplan.cost import AttentionKernel, Precision
from paraplan.cost.offload import OffloadModule, check_offload_modules
from paraplan.cost.plan import Allocator, CrossEntropy, OptimizerMoments, RecomputeModule, SelectivePolicy
from paraplan.errors import ConfigError
from paraplan.graph.spec import show_value
from paraplan.hardware.topology import MAX_DEVICES, MAX_POOLS
from paraplan.rules.frameworks import FRAMEWORKS
from paraplan.scenario.model_section import ModelSection
from paraplan.scenario.plan_doc import PlanDoc
from paraplan.scenario.scenario_file import (
    MAX_NESTING,
    MAX_SCENARIO_BYTES,
    MAX_VALUES,
    read_scenario,
)
from paraplan.scenario.section import (
    MAX_GLOBAL_BATCH,
    MAX_LOSS_CHUNKS,
    MAX_SEARCH_MICRO_BATCH,
    MAX_SEARCH_VP,
    MAX_SEQ_LEN,
    MAX_TOKENS_PER_STEP,
    STRICT,
    CapacityRouting,
    Section,
)

__all__ = [
    "ModelSection",
    "ClusterSection",
    "PoolSection",
    "JobSection",
    "PlanDoc",
    "SolverSection",
    "Scenario",
    "load_scenario",
    "MAX_SCENARIO_BYTES",
    "MAX_NESTING",
    "MAX_VALUES",
]


class PoolSection(Section):
    preset: str = Field(description="node type of this pool (dgx-h100, dgx-a100-80gb, ...)")
    nodes: int | None = Field(None, ge=1, le=MAX_DEVICES, description="number of nodes in this pool")
    gpus: int | None = Field(None, ge=1, le=MAX_DEVICES, description="number of devices, instead of nodes")

    @model_validator(mode="after")
    def check_size(self) -> PoolSection:
        if (self.nodes is None) == (self.gpus is None):
            raise ValueError("give exactly one of nodes or gpus for each of cluster.pools")
        return self


class ClusterSection(Section):
    preset: str | None = Field(None, description="node type (dgx-h100, gb200-nvl72, ...) or fabric preset")
    nodes: int | None = Field(
        None, ge=1, le=MAX_DEVICES, description="number of nodes (a gb200-nvl72 node is a rack)"
    )
    gpus: int | None = Field(None, ge=1, le=MAX_DEVICES, description="number of devices, instead of nodes")
    pools: list[PoolSection] | None = Field(
        None,
        max_length=MAX_POOLS,
        description="mixed-GPU cluster: pools of nodes of one type "
        "each, on one scale-out network; the solver puts each pipeline stage on one pool "
        "(instead of preset/nodes/gpus)",
    )
    choose: ChooseSection | None = Field(
        None, description="capacity planning: node types and GPU counts to choose from (paraplan/capacity)"
    )
    price_per_gpu_hour: float | dict[str, float] | None = Field(
        None, description="USD per GPU-hour (default: hardware/data/prices.yaml); under choose: per preset"
    )
    storage: str | StorageSection | None = Field(
        None, description="checkpoint storage tier (hardware/data/storage.yaml) or {write_GBps, read_GBps}"
    )

    @model_validator(mode="after")
    def check_size(self) -> ClusterSection:
        prices = self.price_per_gpu_hour
        values = prices.values() if isinstance(prices, dict) else [prices] if prices is not None else []
        if any(not 0 < v <= 1e4 for v in values):  # also refuses nan
            raise ValueError(f"cluster.price_per_gpu_hour={prices} must be above 0 and at most 10,000 USD")
        if self.choose is not None:
            if self.preset is not None or self.nodes is not None or self.gpus is not None:
                raise ValueError("give either cluster.choose or cluster.preset with nodes/gpus, not both")
            return self
        if self.pools is not None:
            if self.preset is not None or self.nodes is not None or self.gpus is not None:
                raise ValueError("give either cluster.pools or cluster.preset with nodes/gpus, not both")
            if not self.pools:
                raise ValueError(
                    "cluster.pools must list at least one pool, e.g. "
                    "[{preset: dgx-h100, nodes: 4}, {preset: dgx-a100-80gb, nodes: 4}]"
                )
            return self
        if self.preset is None:
            raise ValueError("give cluster.preset (with nodes or gpus) or cluster.pools")
        if (self.nodes is None) == (self.gpus is None):
            raise ValueError("give exactly one of cluster.nodes or cluster.gpus")
        return self


class JobSection(Section):
    seq_len: int = Field(ge=1, le=MAX_SEQ_LEN, description="tokens per sequence")
    global_batch: int = Field(ge=1, le=MAX_GLOBAL_BATCH, description="sequences per optimizer step")
    precision: Precision = Field(
        Precision.BF16, description="bf16 | fp16 | fp8 (per-tensor scaling) | fp8_blockwise | mxfp8 | nvfp4"
    )
    flash_attention: bool = Field(True, description="fused attention: no s^2 activations stored")
    attention_kernel: AttentionKernel = Field(
        AttentionKernel.FUSED,
        description="fused (cuDNN / Transformer Engine / FlashAttention-3) | flash2 (FlashAttention-2: "
        "slower on Hopper and newer) | flash1 (FlashAttention-1: half flash2's rate there; "
        "cost/compute.py)",
    )
    frozen_base: bool = Field(
        False,
        description="LoRA / adapter fine-tuning: base weights frozen (no weight gradients, optimizer "
        "state or gradient sync for them)",
    )
    overlap_dp_comm: bool = Field(True, description="overlap gradient sync with backward")
    fp32_grads: bool = Field(
        True,
        description="accumulate and reduce gradients in fp32 (Megatron main grads); false keeps them in bf16",
    )
    expert_imbalance: float | None = Field(
        None,
        ge=1.0,
        le=100.0,
        allow_inf_nan=False,
        description="MoE: routed tokens on the busiest expert-parallel rank over the mean (1.0 = "
        "perfectly balanced); default: from job.moe_routing (see cost/ep.py expert_imbalance)",
    )
    moe_routing: Literal["dropless", "force_balanced"] | CapacityRouting = Field(
        "dropless",
        description="MoE routing in training: dropless (natural routing; default) | force_balanced "
        "(Megatron --moe-router-force-load-balancing, benchmark-only) | {capacity_factor: F} "
        "(token dropping at F, --moe-expert-capacity-factor)",
    )
    allocator: Allocator = Field(
        Allocator.DEFAULT,
        description="CUDA caching allocator: default | expandable_segments "
        "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; less reserved beyond allocated, "
        "cost/memory.py)",
    )
    optimizer_moments: OptimizerMoments = Field(
        OptimizerMoments.FP32,
        description="Adam's momentum and variance dtype: fp32 (default) | bf16 (Megatron's "
        "precision-aware optimizer, exp_avg_dtype / exp_avg_sq_dtype bf16: 4 B per parameter "
        "less optimizer state; cost/dp.py)",
    )
    cross_entropy: CrossEntropy = Field(
        CrossEntropy.FUSED,
        description="loss kernel: fused (Megatron / Transformer Engine vocab-parallel cross "
        "entropy: 6 B per logit) | upcast (logits cast to fp32 for torch's cross_entropy, as "
        "torchtitan and the HF Trainer do: 12 B per logit at the backward peak, 16 B over logits "
        "sharded by tp under loss parallel) | compiled (the "
        "same under torch.compile, torchtitan's default since 2025: 4 B, bf16 logits and gradient)",
    )
    loss_chunks: int = Field(
        1,
        ge=1,
        le=MAX_LOSS_CHUNKS,
        description="the loss over this many sequence chunks, lm_head + loss + backward one chunk at "
        "a time (torchtitan's ChunkedLossWrapper, --loss.num-chunks; 8 in its configs): the "
        "logits held are 1/loss_chunks of the micro-batch's, plus an fp32 gradient buffer of the "
        "final hidden states (cost/memory.py); 1 (default): the whole micro-batch's logits. Only "
        "torchtitan exports a value above 1",
    )
    variable_seq_len: bool = Field(
        False,
        description="sequence lengths vary from micro-batch to micro-batch (fine-tuning data padded "
        "to each batch's longest sequence, or packs of varying length), so the activations change "
        "size every micro-batch: with allocator default the must-fit peak keeps room for one more "
        "set of the stage's activations, blocks the caching allocator strands at earlier sizes "
        "(cost/memory.py); expandable_segments removes it",
    )
    selective_policy: SelectivePolicy = Field(
        SelectivePolicy.CORE_ATTENTION,
        description="what plan.recompute selective keeps: core_attention (Megatron: the "
        "attention core recomputed) | torchtitan_op (torchtitan's op-level selective "
        "checkpointing: every other matmul output and the attention output saved; cost/recompute.py)",
    )
    recompute_modules: list[RecomputeModule] = Field(
        default_factory=list,
        description="Megatron --recompute-modules under plan.recompute selective: core_attn | "
        "layernorm | mla_up_proj | moe_act | shared_experts | mlp | moe (empty: the framework's "
        "default selective policy; cost/recompute_modules.py)",
    )
    offload_modules: list[OffloadModule] = Field(
        default_factory=list,
        description="Megatron --fine-grained-activation-offloading --offload-modules: these modules' "
        "saved inputs go to host memory and back, one layer's kept: attn_norm | qkv_linear | "
        "core_attn | attn_proj | mlp_norm | expert_fc1 | moe_act (empty: none; cost/offload.py)",
    )
    moe_probs_applied: Literal["auto", "activation", "combine"] = Field(
        "auto",
        description="MoE: where the router's probabilities multiply the routed copies: activation (in "
        "the experts' activation, megatron-core: no routed output kept) | combine (torchtitan, DeepSpeed: "
        "the routed output kept for the backward) | auto (by solver.target; none: combine, so no plan "
        "fits that a framework which would run it cannot hold; rules/moe_probs.py)",
    )
    moe_router_fusion: bool = Field(
        False,
        description="MoE: the router's top-k, scores and aux loss as Transformer Engine's fused kernels "
        "(Megatron --moe-router-fusion; default false, megatron-core 0.19.2): unfused, each PyTorch op "
        "is one host launch (cost/host.py); megatron and nemo run it (rules/moe_fusion.py)",
    )
    moe_permute_fusion: bool = Field(
        False,
        description="MoE: the token permute and unpermute as Transformer Engine's fused kernels "
        "(Megatron --moe-permute-fusion; default false, megatron-core 0.19.2): unfused, each PyTorch "
        "op is one host launch (cost/host.py); megatron and nemo run it (rules/moe_fusion.py)",
    )
    image_tokens: int = Field(
        0,
        ge=0,
        le=MAX_SEQ_LEN,
        description="image patch tokens per sample into the model's vision encoder "
        "(0: the model's default, model.vision.image_tokens)",
    )

    tokens: float | None = Field(
        None, gt=0, le=MAX_TOKENS, allow_inf_nan=False, description="training token budget (capacity)"
    )
    deadline_days: float | None = Field(
        None, gt=0, le=MAX_DAYS, allow_inf_nan=False, description="time to train at most this"
    )
    budget_usd: float | None = Field(
        None, gt=0, le=MAX_USD, allow_inf_nan=False, description="cost at most this"
    )

    @model_validator(mode="after")
    def check_tokens_per_step(self) -> JobSection:
        tokens = self.seq_len * self.global_batch
        if tokens > MAX_TOKENS_PER_STEP:
            raise ValueError(
                f"job.seq_len x job.global_batch = {self.seq_len:,} x {self.global_batch:,} = "
                f"{tokens:,} tokens per step exceeds paraplan's limit of {MAX_TOKENS_PER_STEP:,} "
                '(2^32; README "Limits")'
            )
        check_offload_modules(self.offload_modules, self.recompute_modules)
        if self.loss_chunks > self.seq_len:
            raise ValueError(
                f"job.loss_chunks={self.loss_chunks:,} exceeds job.seq_len={self.seq_len:,}: the loss "
                "is chunked along the sequence, and a chunk holds at least one token"
            )
        return self


SolverTarget = Literal[(*FRAMEWORKS, "any")]  # type: ignore[valid-type]
"""Frameworks ``solver.target`` accepts: the frameworks (rules/frameworks.py), or ``any``
(the unrestricted optimum of the cost model, which may run on no framework). Unset: the fastest
plan at least one of the frameworks runs (paraplan/planning.py, runnable_options)."""


class SolverSection(Section):
    allow_uneven_stages: bool = Field(
        True,
        description="let the solver split layers unevenly (false: pp x vp divides the "
        "layers, equal stages and chunks)",
    )
    search_placement: bool = Field(True, description="let the solver choose the rank order")
    max_micro_batch: int = Field(
        8, ge=1, le=MAX_SEARCH_MICRO_BATCH, description="largest micro-batch considered"
    )
    max_vp: int = Field(4, ge=1, le=MAX_SEARCH_VP, description="largest interleaving degree considered")
    uniform_recompute: bool = Field(
        False, description="one recompute mode for every pipeline stage (what frameworks run)"
    )
    target: SolverTarget | None = Field(
        None,
        description="search only the plans this framework can run (its exporter's rules); "
        "the plan exports to it without a refusal. any: every plan the cost "
        "model allows (the unrestricted optimum). Unset: the fastest plan at "
        "least one framework runs (result.runs_on names them)",
    )
    search_moe_state: bool = Field(
        False,
        description="mixture-of-experts models: search plan.moe_dispatcher, plan.moe_overlap and "
        "plan.cuda_graphs where the plan leaves them unset (with their time and memory); off, "
        "unset ones take their defaults (alltoall, off, none)",
    )
    memory_headroom: float | None = Field(
        None,
        description="fraction of each device's memory kept free (0 <= x < 0.5): plans "
        "must fit HBM x (1 - memory_headroom), on top of the modelled runtime reserve. Unset: "
        "the search keeps the memory band's margin (1 - 1/p90 of measured/predicted peak "
        "memory, hardware/data/uncertainty.yaml; about 0.10), evaluate none; 0 turns it off",
    )

    @field_validator("memory_headroom")
    @classmethod
    def check_memory_headroom(cls, value: float | None) -> float | None:
        if value is not None and not 0.0 <= value < 0.5:
            raise ValueError(
                f"solver.memory_headroom={value} must be at least 0 and below 0.5 "
                "(a fraction of device memory kept free, e.g. 0.05)"
            )
        return value


class Scenario(BaseModel):
    model_config = STRICT
    model: ModelSection
    cluster: ClusterSection
    job: JobSection
    plan: PlanDoc = Field(default_factory=PlanDoc)
    solver: SolverSection = Field(default_factory=SolverSection)
    calibration: str | None = Field(
        None,
        description="calibration profile (YAML from `paraplan calibrate`) whose fitted "
        "efficiencies replace the catalog's; a path relative to the scenario file",
    )
    objective: Objective | None = Field(None, description="capacity: time_to_train | cost | gpus")
    reliability: ReliabilitySection = Field(default_factory=ReliabilitySection)

    @model_validator(mode="after")
    def check_capacity_keys(self) -> Scenario:
        check_capacity(self)
        return self


def _format(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        where = ".".join(show_value(p) if isinstance(p, int) else str(p) for p in e["loc"])
        where = where or "scenario"
        msg = e["msg"].removeprefix("Value error, ")
        ctx = e.get("ctx") or {}
        if e["type"] == "extra_forbidden":
            msg = "unknown key (check the spelling; see README for the scenario keys)"
        elif e["type"] == "less_than_equal":  # the limits are listed in README "Limits"
            msg = f"{show_value(e['input'])} must be at most {show_value(ctx['le'])}"
        elif e["type"] == "too_long":  # actual_length is None for an iterator, not a list
            count = (
                f"{ctx['actual_length']:,} items"
                if ctx.get("actual_length")
                else f"more than {ctx['max_length']:,} items"
            )
            msg = f"lists {count}; at most {ctx['max_length']:,} are allowed"
        lines.append(f"{where}: {msg}")
    if len(lines) == 1:
        return f"invalid scenario: {lines[0]}"
    return "invalid scenario:\n  " + "\n  ".join(lines)


def load_scenario(source: str | PathLike[str] | dict[str, Any] | Scenario) -> Scenario:
    """Scenario from a YAML/JSON file path or a dict; ConfigError names each bad field, and the
    file and the cause when the file is no scenario document at all. A result document
    (``paraplan plan --json``) reads as its scenario with its plan fixed."""
    if isinstance(source, Scenario):
        return source
    data, base = read_scenario(source)
    if "workload" in data and "job" not in data:
        raise ConfigError(
            "invalid scenario: workload: makes a serving scenario; load it with "
            "paraplan.serving.load_serving_scenario (paraplan.solve and paraplan.evaluate take both kinds)"
        )
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format(e)) from None
    hf = scenario.model.hf_config
    if base is not None and hf and not Path(hf).is_absolute():
        model = scenario.model.model_copy(update={"hf_config": str((base / hf).resolve())})
        scenario = scenario.model_copy(update={"model": model})
    cal = scenario.calibration
    if base is not None and cal and not Path(cal).is_absolute():
        scenario = scenario.model_copy(update={"calibration": str((base / cal).resolve())})
    return scenario
