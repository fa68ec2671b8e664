"""The scenario a user writes (YAML, JSON or a dict), validated at the boundary with pydantic.

model:   exactly one of ``preset`` | ``hf_config`` | explicit fields
cluster: node ``preset`` and ``nodes`` or ``gpus``; or ``pools`` of (preset, nodes) for mixed GPUs
job:     ``seq_len``, ``global_batch``, ``precision``
plan:    optional; any subset of knobs fixes them (evaluate needs all)
solver:  optional; search options
calibration: optional; a calibration profile file (``paraplan calibrate``)
"""

from __future__ import annotations

from os import PathLike
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from paraplan.cost import AttentionKernel, Axis, CPComm, Precision, Recompute
from paraplan.errors import ConfigError
from paraplan.graph.spec import MODEL_LIMITS, show_value
from paraplan.hardware.topology import MAX_DEVICES, MAX_POOLS

__all__ = [
    "ModelSection",
    "ClusterSection",
    "PoolSection",
    "JobSection",
    "PlanSection",
    "SolverSection",
    "Scenario",
    "load_scenario",
]

# Limits of the scenario's job, plan and solver keys (README "Limits"; the model's are
# graph.spec.MODEL_LIMITS, the cluster's hardware.topology.MAX_DEVICES and MAX_POOLS). Each is far
# beyond any real training job, so absurd sizes are refused at once instead of searched for minutes.
MAX_SEQ_LEN = 16_777_216
"""Tokens per sequence: 16x the 1M-token contexts paraplan plans today."""
MAX_GLOBAL_BATCH = 16_777_216
"""Sequences per optimizer step: ~1,000x the largest published batches."""
MAX_TOKENS_PER_STEP = 2**32
"""seq_len x global_batch: ~250x the 16M-token steps of the largest published runs; keeps step
times far inside the solver's 64-bit ticks (a 10^15-token step overflowed them)."""
MAX_LAYERS = MODEL_LIMITS["num_layers"]
"""Longest per-stage list (layers_per_stage, recompute, stage_pools): one entry per stage, and a
stage holds at least one layer."""
MAX_SEARCH_MICRO_BATCH = 1_024
"""solver.max_micro_batch: sequences per micro-batch the search considers."""
MAX_SEARCH_VP = 64
"""solver.max_vp: interleaving degrees the search considers (real runs use at most ~24)."""
MAX_SCENARIO_BYTES = 1 << 20
"""A scenario file is a few KB even with per-stage lists for 1,024 layers."""
MAX_NESTING = 16
"""Levels of mappings and lists in a scenario (it needs 5); deeper documents make YAML, pydantic
and repr() recurse past Python's stack."""
MAX_VALUES = 100_000
"""Values in a scenario once YAML aliases are expanded (an alias bomb is exponential)."""

_STRICT = ConfigDict(extra="forbid", frozen=True)


def _takes_int(annotation: Any) -> bool:
    """The annotation is int, int | None or a list of ints (not bool, which subclasses int)."""
    if annotation is int:
        return True
    return any(_takes_int(a) for a in get_args(annotation))


class _Section(BaseModel):
    """A scenario section: unknown keys refused, values frozen, and true/false refused where a
    whole number is expected (pydantic would read true as 1: `layers: true` is one layer)."""

    model_config = _STRICT

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_int(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if field is None or not _takes_int(field.annotation) or _takes_bool(field.annotation):
            return value
        if isinstance(value, bool):
            raise ValueError(f"{value!r} is true/false; give a whole number")
        if isinstance(value, list) and any(isinstance(v, bool) for v in _flat(value)):
            raise ValueError("holds true/false; give whole numbers")
        return value


def _flat(values: list) -> list:
    return [x for v in values for x in (_flat(v) if isinstance(v, list) else [v])]


def _takes_bool(annotation: Any) -> bool:
    return annotation is bool or any(_takes_bool(a) for a in get_args(annotation))


_MOE_MLA_FIELDS = (
    "experts",
    "top_k",
    "shared_experts",
    "moe_ffn_hidden",
    "shared_ffn_hidden",
    "first_dense_layers",
    "moe_layer_freq",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
)
_ARCHITECTURE_FIELDS = (
    "position_embedding",
    "rope",
    "norm_eps",
    "zero_centered_norm",
    "linear_bias",
    "qkv_bias",
    "qk_norm",
    "parallel_residual",
    "sliding_window",
    "full_attention_every",
    "attention_sinks",
    "router",
)
_EXPLICIT_FIELDS = (
    "layers",
    "hidden",
    "ffn_hidden",
    "heads",
    "kv_heads",
    "head_dim",
    "vocab",
    "activation",
    "tied_embeddings",
    "norm",
    "dropout",
    *_MOE_MLA_FIELDS,
)


class ModelSection(_Section):
    preset: str | None = Field(None, description="a model preset name, e.g. llama3-70b")
    hf_config: str | None = Field(None, description="path to a Hugging Face config.json")
    trace: bool | None = Field(
        None,
        description="with hf_config: build the model with transformers on the meta device "
        "and read it off the real code, checked against the formulas (the [trace] extra)",
    )
    allow_bias: bool | None = Field(
        None,
        description="with trace: plan a model with biases (not in the formulas) when its "
        "FLOPs and parameters still agree within 1%",
    )
    name: str | None = Field(None, description="display name for explicit models")
    layers: int | None = Field(None, ge=1)
    hidden: int | None = Field(None, ge=1)
    ffn_hidden: int | None = Field(None, ge=1)
    heads: int | None = Field(None, ge=1)
    kv_heads: int | None = Field(None, ge=1)
    head_dim: int | None = Field(None, ge=1)
    vocab: int | None = Field(None, ge=1)
    activation: Literal["swiglu", "gelu", "relu", "relu2"] | None = None
    tied_embeddings: bool | None = None
    norm: Literal["rmsnorm", "layernorm"] | None = None
    dropout: bool | None = Field(None, description="dropout in training (stores masks)")
    experts: int | None = Field(None, ge=1, description="routed experts per MoE layer")
    top_k: int | None = Field(None, ge=1, description="experts each token is routed to")
    shared_experts: int | None = Field(None, ge=0, description="always-active shared experts")
    moe_ffn_hidden: int | None = Field(None, ge=1, description="FFN width of one expert")
    shared_ffn_hidden: int | None = Field(
        None,
        ge=1,
        description="total FFN width of the shared experts (default: shared_experts x moe_ffn_hidden)",
    )
    first_dense_layers: int | None = Field(
        None, ge=0, description="leading layers with a dense MLP of ffn_hidden"
    )
    moe_layer_freq: int | None = Field(
        None, ge=1, description="every k-th layer after the dense ones is MoE (1: all)"
    )
    q_lora_rank: int | None = Field(None, ge=0, description="MLA query latent (0: none)")
    kv_lora_rank: int | None = Field(None, ge=1, description="MLA key/value latent")
    qk_nope_head_dim: int | None = Field(None, ge=1, description="MLA per-head q/k dims without RoPE")
    qk_rope_head_dim: int | None = Field(None, ge=1, description="MLA per-head q/k RoPE dims")
    v_head_dim: int | None = Field(None, ge=1, description="MLA per-head value dims")
    # architecture details of an explicit model (graph/spec.py ModelSpec; exporters express them)
    position_embedding: Literal["rope", "learned", "alibi", "none"] | None = None
    rope: dict[str, float | int | bool | str] | None = Field(
        None,
        description="RoPE: theta, fraction, scaling (llama3|yarn), factor, "
        "original_max_positions, low/high_freq_factor, beta_fast/slow, mscale(_all_dim)",
    )
    norm_eps: float | None = Field(None, gt=0)
    zero_centered_norm: bool | None = None
    linear_bias: bool | None = Field(None, description="biases on every linear layer")
    qkv_bias: bool | None = Field(None, description="biases on the QKV projection only")
    qk_norm: bool | None = Field(None, description="RMSNorm on per-head queries and keys")
    parallel_residual: bool | None = None
    sliding_window: int | None = Field(None, ge=0, description="attention window in tokens")
    full_attention_every: int | None = Field(None, ge=0)
    attention_sinks: bool | None = None
    router: dict[str, float | int | bool | str] | None = Field(
        None,
        description="MoE router: score (softmax|sigmoid), expert_bias, groups, group_topk, "
        "scaling_factor, balance (aux_loss|seq_aux_loss|none), aux_loss_coeff",
    )

    @model_validator(mode="after")
    def check_architecture_needs_explicit_model(self) -> ModelSection:
        given = [f for f in _ARCHITECTURE_FIELDS if getattr(self, f) is not None]
        if given and (self.preset or self.hf_config):
            raise ValueError(
                f"model.{given[0]} describes an explicit model; a preset or "
                "hf_config carries its own architecture"
            )
        return self

    @model_validator(mode="after")
    def check_one_source(self) -> ModelSection:
        explicit = [f for f in _EXPLICIT_FIELDS if getattr(self, f) is not None]
        sources = [
            s
            for s, on in (
                ("preset", self.preset),
                ("hf_config", self.hf_config),
                ("explicit fields", explicit),
            )
            if on
        ]
        if len(sources) != 1:
            raise ValueError(
                "give exactly one of model.preset, model.hf_config or explicit fields "
                f"(layers, hidden, ffn_hidden, heads, vocab, ...); got {sources or 'none'}"
            )
        if explicit:
            required = ("layers", "hidden", "heads", "vocab") + (
                ("experts", "top_k", "moe_ffn_hidden") if self.experts else ("ffn_hidden",)
            )
            missing = [f for f in required if getattr(self, f) is None]
            if missing:
                raise ValueError(f"explicit model needs {', '.join(missing)}")
        return self

    @model_validator(mode="after")
    def check_trace(self) -> ModelSection:
        if self.trace and not self.hf_config:
            raise ValueError(
                "model.trace: true needs model.hf_config (the config transformers builds on the meta device)"
            )
        if self.allow_bias is not None and not self.trace:
            raise ValueError("model.allow_bias applies to a traced model; add model.trace: true")
        return self


class PoolSection(_Section):
    preset: str = Field(description="node type of this pool (dgx-h100, dgx-a100-80gb, ...)")
    nodes: int | None = Field(None, ge=1, le=MAX_DEVICES, description="number of nodes in this pool")
    gpus: int | None = Field(None, ge=1, le=MAX_DEVICES, description="number of devices, instead of nodes")

    @model_validator(mode="after")
    def check_size(self) -> PoolSection:
        if (self.nodes is None) == (self.gpus is None):
            raise ValueError("give exactly one of nodes or gpus for each of cluster.pools")
        return self


class ClusterSection(_Section):
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

    @model_validator(mode="after")
    def check_size(self) -> ClusterSection:
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


class JobSection(_Section):
    seq_len: int = Field(ge=1, le=MAX_SEQ_LEN, description="tokens per sequence")
    global_batch: int = Field(ge=1, le=MAX_GLOBAL_BATCH, description="sequences per optimizer step")
    precision: Precision = Field(
        Precision.BF16, description="bf16 | fp16 | fp8 (per-tensor scaling) | fp8_blockwise | mxfp8 | nvfp4"
    )
    flash_attention: bool = Field(True, description="fused attention: no s^2 activations stored")
    attention_kernel: AttentionKernel = Field(
        AttentionKernel.FUSED,
        description="fused (cuDNN / Transformer Engine / FlashAttention-3) | flash2 (FlashAttention-2: "
        "slower on Hopper and newer; cost/compute.py)",
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
    expert_imbalance: float = Field(
        1.1,
        ge=1.0,
        le=100.0,
        allow_inf_nan=False,
        description="MoE: routed tokens on the "
        "busiest expert-parallel rank over the mean (1.0 = perfectly balanced); see cost/ep.py",
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
        return self


class PlanSection(_Section):
    dp: int | None = Field(None, ge=1, le=MAX_DEVICES)
    tp: int | None = Field(None, ge=1, le=MAX_DEVICES)
    pp: int | None = Field(None, ge=1, le=MAX_LAYERS, description="pipeline stages (each holds a layer)")
    cp: int | None = Field(None, ge=1, le=MAX_DEVICES)
    ep: int | None = Field(None, ge=1, le=MAX_DEVICES)
    etp: int | None = Field(
        None, ge=1, le=MAX_DEVICES, description="expert tensor-parallel degree: tp (default) or 1"
    )
    cp_comm: CPComm | None = Field(None, description="context-parallel K/V exchange: p2p | all_gather")
    vp: int | None = Field(None, ge=1, le=MAX_LAYERS, description="virtual stages per pp rank")
    micro_batch: int | None = Field(None, ge=1, le=MAX_GLOBAL_BATCH)
    zero: int | None = Field(None, ge=0, le=3, description="ZeRO stage; 3 = fully sharded (FSDP)")
    sequence_parallel: bool | None = None
    recompute: Recompute | list[Recompute] | None = Field(
        None, description="none | selective | full, or one per pipeline stage"
    )
    layers_per_stage: list[int] | None = Field(
        None, max_length=MAX_LAYERS, description="uneven pipeline stages"
    )
    layers_per_chunk: list[list[int]] | None = Field(
        None,
        max_length=MAX_LAYERS,
        description="interleaving with unequal virtual stages: one "
        "row of vp layer counts per pipeline stage (rank s chunk c = virtual stage c*pp + s); "
        "default: each stage's layers spread evenly, short chunks next to the embedding on stage "
        "0 and next to the loss elsewhere (Megatron's account-for-embedding/loss split)",
    )
    order: list[Axis] | None = Field(None, max_length=len(Axis), description="rank order, innermost first")
    stage_pools: list[int] | None = Field(
        None,
        max_length=MAX_LAYERS,
        description="pooled clusters: the pool (index in "
        "cluster.pools) of each pipeline stage; default for evaluate: every pool in cluster.pools "
        "order",
    )
    grad_accum: int | None = Field(
        None,
        ge=1,
        le=MAX_GLOBAL_BATCH,
        description="micro-batches per step per dp rank, as a "
        "result's plan lists it: must equal job.global_batch / (micro_batch x dp)",
    )
    num_devices: int | None = Field(
        None,
        ge=1,
        le=MAX_DEVICES,
        description="devices the plan uses, as a result's plan lists it: must equal dp x tp x pp x cp",
    )

    @model_validator(mode="before")
    @classmethod
    def accept_result_plan(cls, data: Any) -> Any:
        """A result's plan as returned (``result.plan``): empty ``stage_pools`` and
        ``layers_per_chunk`` mean none; ``recompute_per_stage`` is the per-stage form of
        ``recompute`` and must agree with it."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for key in ("stage_pools", "layers_per_chunk"):
            if data.get(key) == []:
                del data[key]
        if "recompute_per_stage" in data:
            per_stage = data.pop("recompute_per_stage")
            given = data.get("recompute")
            if per_stage is None:
                return data
            if not isinstance(per_stage, list) or not per_stage:
                raise ValueError(
                    f"plan.recompute_per_stage={show_value(per_stage)} must list one "
                    "recompute mode per pipeline stage"
                )
            same = (
                given is None
                or given == per_stage
                or (isinstance(given, str) and all(m == given for m in per_stage))
            )
            if not same:
                raise ValueError(
                    f"plan.recompute_per_stage={show_value(per_stage)} disagrees with "
                    f"plan.recompute={show_value(given)}; give one of them"
                )
            if given is None:
                data["recompute"] = per_stage
        return data

    @model_validator(mode="after")
    def check_num_devices(self) -> PlanSection:
        degrees = (self.dp, self.tp, self.pp)
        if self.num_devices is not None and None not in degrees:
            used = self.dp * self.tp * self.pp * (self.cp or 1)  # type: ignore[operator]
            if used != self.num_devices:
                raise ValueError(
                    f"plan.num_devices={self.num_devices} but dp x tp x pp x cp = "
                    f"{used}; fix the degrees or drop plan.num_devices"
                )
        return self

    torus_shape: list[int] | None = Field(
        None,
        max_length=3,
        description="TPU slices: the slice's torus shape, e.g. [4, 8, 16] "
        "(v4/v5p slices of whole cubes may take any shape; default: the most cubic)",
    )

    @field_validator("recompute")
    @classmethod
    def check_recompute_length(
        cls, v: Recompute | list[Recompute] | None
    ) -> Recompute | list[Recompute] | None:
        if isinstance(v, list) and len(v) > MAX_LAYERS:
            raise ValueError(
                f"lists {len(v):,} stages; at most {MAX_LAYERS:,} (one per stage, "
                "and a stage holds at least one layer)"
            )
        return v

    @field_validator("layers_per_stage")
    @classmethod
    def check_layers_positive(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and any(n < 1 for n in v):
            raise ValueError(f"every stage needs at least one layer; got {show_value(v)}")
        if v is not None and any(n > MAX_LAYERS for n in v):
            raise ValueError(
                f"a stage of {show_value(max(v))} layers exceeds paraplan's limit of "
                f'{MAX_LAYERS:,} layers (README "Limits")'
            )
        return v

    @field_validator("layers_per_chunk")
    @classmethod
    def check_chunks_positive(cls, v: list[list[int]] | None) -> list[list[int]] | None:
        if v is None:
            return v
        for s, row in enumerate(v):
            if not row or len(row) > MAX_LAYERS or any(n < 1 or n > MAX_LAYERS for n in row):
                raise ValueError(
                    f"row {s} = {show_value(row)}: each pipeline stage lists vp "
                    f"virtual-stage layer counts, each from 1 to {MAX_LAYERS:,}"
                )
        return v

    @field_validator("stage_pools")
    @classmethod
    def check_pool_indices(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and any(not 0 <= i < MAX_POOLS for i in v):
            raise ValueError(
                f"pool indices run from 0 to {MAX_POOLS - 1} (at most {MAX_POOLS} pools); got {show_value(v)}"
            )
        return v


SolverTarget = Literal["megatron", "nemo", "deepspeed", "torchtitan", "maxtext", "torch", "any"]
"""Frameworks ``solver.target`` accepts: the exporters that launch a training run, or ``any``
(the unrestricted optimum of the cost model, which may run on no framework). Unset: the fastest
plan at least one of the frameworks runs (paraplan/targets.py, runnable_space)."""


class SolverSection(_Section):
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
    memory_headroom: float = Field(
        0.0,
        description="fraction of each device's memory kept free (0 <= x < 0.5): plans "
        "must fit HBM x (1 - memory_headroom), on top of the modelled runtime reserve",
    )

    @field_validator("memory_headroom")
    @classmethod
    def check_memory_headroom(cls, value: float) -> float:
        if not 0.0 <= value < 0.5:
            raise ValueError(
                f"solver.memory_headroom={value} must be at least 0 and below 0.5 "
                "(a fraction of device memory kept free, e.g. 0.05)"
            )
        return value


class Scenario(BaseModel):
    model_config = _STRICT
    model: ModelSection
    cluster: ClusterSection
    job: JobSection
    plan: PlanSection = Field(default_factory=PlanSection)
    solver: SolverSection = Field(default_factory=SolverSection)
    calibration: str | None = Field(
        None,
        description="calibration profile (YAML from `paraplan calibrate`) whose fitted "
        "efficiencies replace the catalog's; a path relative to the scenario file",
    )


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


class _ScenarioLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader that refuses, as a YAMLError with the line and column, documents
    nested deeper than MAX_NESTING (its composer recurses once per level) and integers too long
    for Python's 4,300-digit string conversion limit (a ValueError otherwise)."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self._depth >= MAX_NESTING:
            raise yaml.composer.ComposerError(
                None,
                None,
                f"nested more than {MAX_NESTING} levels deep; a scenario needs 5",
                self.peek_event().start_mark,
            )
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        try:
            return super().construct_yaml_int(node)
        except ValueError:
            raise yaml.constructor.ConstructorError(
                None, None, f"an integer of {len(node.value):,} characters is too long", node.start_mark
            ) from None


_ScenarioLoader.add_constructor("tag:yaml.org,2002:int", _ScenarioLoader.construct_yaml_int)


def _read(path: Path) -> Any:
    """The parsed YAML/JSON document of a scenario file; ConfigError names the file and the
    cause (unreadable, too large, not UTF-8, not YAML)."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_SCENARIO_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"cannot read scenario file {str(path)!r}: {e.strerror}") from None
    if len(raw) > MAX_SCENARIO_BYTES:
        raise ConfigError(
            f'{path}: larger than {MAX_SCENARIO_BYTES >> 20} MiB; a scenario is a few KB (README "Limits")'
        )
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        utf16 = " (it looks like UTF-16)" if raw[:2] in (b"\xff\xfe", b"\xfe\xff") else ""
        raise ConfigError(
            f"{path}: not UTF-8 text{utf16}: byte 0x{raw[e.start]:02x} at position "
            f"{e.start}; save the scenario as UTF-8"
        ) from None
    try:
        return yaml.load(text, Loader=_ScenarioLoader)  # a SafeLoader: never executes anything
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        at = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = "; ".join(x for x in (e.context, e.problem) if x)
        raise ConfigError(f"{path}{at}: not valid YAML/JSON: {what}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML/JSON: {e}") from None
    except ValueError as e:  # a value YAML recognises but cannot build, e.g. date 2024-13-01
        raise ConfigError(f"{path}: not valid YAML/JSON: {e}") from None


def _check_shape(data: Any, where: str) -> None:
    """Refuse documents nested deeper than MAX_NESTING (or referring to themselves through a
    YAML alias) or holding more than MAX_VALUES values once aliases are expanded: pydantic and
    repr() recurse over them and walk every alias copy. Iterative; each distinct container is
    measured once, so an alias bomb costs no more than its text."""
    measured: dict[int, tuple[int, int]] = {}  # id -> (values, height) of a measured container
    stack: list[tuple[Any, int, bool]] = [(data, 1, False)]  # (container, depth, children done)
    while stack:
        node, depth, done = stack.pop()
        if len(node) > MAX_VALUES:
            raise ConfigError(
                f"{where}: a list or mapping of {len(node):,} entries; a scenario needs a few hundred values"
            )
        children = [c for c in _entries(node) if isinstance(c, _CONTAINERS)]
        if done:
            sub = [measured[id(c)] for c in children]
            values = 1 + len(node) + sum(v for v, _ in sub)
            if values > MAX_VALUES:
                raise ConfigError(
                    f"{where}: holds more than {MAX_VALUES:,} values (YAML aliases "
                    "expanded); a scenario needs a few hundred"
                )
            measured[id(node)] = (values, 1 + max((h for _, h in sub), default=0))
        elif depth + measured.get(id(node), (0, 1))[1] - 1 > MAX_NESTING:
            raise ConfigError(
                f"{where}: nested more than {MAX_NESTING} levels deep (or a YAML "
                "alias refers to itself); a scenario needs 5"
            )
        elif id(node) not in measured:
            stack.append((node, depth, True))
            stack.extend((c, depth + 1, False) for c in children)


_CONTAINERS = (dict, list, tuple, set, frozenset)


def _entries(node: Any) -> list[Any]:
    """The keys and values of a mapping, the items of any other container."""
    return [x for kv in node.items() for x in kv] if isinstance(node, dict) else list(node)


RESULT_KEYS = frozenset({"plan", "predicted", "scenario", "version"})
"""Keys that mark a result document (``paraplan plan --json``) rather than a scenario."""


def _scenario_of_result(data: dict[str, Any]) -> dict[str, Any]:
    """A result document read as a scenario: its scenario with its plan fixed as returned (so
    ``paraplan evaluate RESULT.json`` re-scores the plan); any other mapping unchanged."""
    if not RESULT_KEYS <= data.keys() or not isinstance(data["scenario"], dict):
        return data
    return {**data["scenario"], "plan": data["plan"]}


def load_scenario(source: str | PathLike[str] | dict[str, Any] | Scenario) -> Scenario:
    """Scenario from a YAML/JSON file path or a dict; ConfigError names each bad field, and the
    file and the cause when the file is no scenario document at all. A result document
    (``paraplan plan --json``) reads as its scenario with its plan fixed."""
    if isinstance(source, Scenario):
        return source
    if isinstance(source, dict):
        data, base, where = source, Path.cwd(), "scenario"  # relative paths: from here
    elif isinstance(source, (str, PathLike)):
        path = Path(source)
        if "\0" in str(path):
            raise ConfigError(f"cannot read scenario file {str(path)!r}: the path has a NUL byte")
        data, base, where = _read(path), path.parent, str(path)
    else:
        raise ConfigError(f"a scenario is a file path, a dict or a Scenario, not a {type(source).__name__}")
    if not isinstance(data, dict):
        raise ConfigError(
            f"{where}: a scenario must be a mapping with model, cluster and job "
            f"sections, not a {type(data).__name__}"
        )
    _check_shape(data, where)
    data = _scenario_of_result(data)
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
