"""The scenario a user writes (YAML, JSON or a dict), validated at the boundary with pydantic.

model:   exactly one of ``preset`` | ``hf_config`` | explicit fields
cluster: node ``preset`` and ``nodes`` or ``gpus``; or ``pools`` of (preset, nodes) for mixed GPUs
job:     ``seq_len``, ``global_batch``, ``precision``
plan:    optional; any subset of knobs fixes them (evaluate needs all)
solver:  optional; search options
calibration: optional; a calibration profile file (``paraplan calibrate``)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from paraplan.cost import Axis, CPComm, Precision, Recompute
from paraplan.errors import ConfigError

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

_STRICT = ConfigDict(extra="forbid", frozen=True)
_MOE_MLA_FIELDS = ("experts", "top_k", "shared_experts", "moe_ffn_hidden", "shared_ffn_hidden",
                   "first_dense_layers", "moe_layer_freq", "q_lora_rank", "kv_lora_rank",
                   "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
_EXPLICIT_FIELDS = ("layers", "hidden", "ffn_hidden", "heads", "kv_heads", "head_dim", "vocab",
                    "activation", "tied_embeddings", "norm", "dropout", *_MOE_MLA_FIELDS)


class ModelSection(BaseModel):
    model_config = _STRICT
    preset: str | None = Field(None, description="a model preset name, e.g. llama3-70b")
    hf_config: str | None = Field(None, description="path to a Hugging Face config.json")
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
        None, ge=1, description="total FFN width of the shared experts (default: "
        "shared_experts x moe_ffn_hidden)")
    first_dense_layers: int | None = Field(
        None, ge=0, description="leading layers with a dense MLP of ffn_hidden")
    moe_layer_freq: int | None = Field(
        None, ge=1, description="every k-th layer after the dense ones is MoE (1: all)")
    q_lora_rank: int | None = Field(None, ge=0, description="MLA query latent (0: none)")
    kv_lora_rank: int | None = Field(None, ge=1, description="MLA key/value latent")
    qk_nope_head_dim: int | None = Field(None, ge=1, description="MLA per-head q/k dims without RoPE")
    qk_rope_head_dim: int | None = Field(None, ge=1, description="MLA per-head q/k RoPE dims")
    v_head_dim: int | None = Field(None, ge=1, description="MLA per-head value dims")

    @model_validator(mode="after")
    def check_one_source(self) -> ModelSection:
        explicit = [f for f in _EXPLICIT_FIELDS if getattr(self, f) is not None]
        sources = [s for s, on in (("preset", self.preset), ("hf_config", self.hf_config),
                                   ("explicit fields", explicit)) if on]
        if len(sources) != 1:
            raise ValueError(
                "give exactly one of model.preset, model.hf_config or explicit fields "
                f"(layers, hidden, ffn_hidden, heads, vocab, ...); got {sources or 'none'}"
            )
        if explicit:
            required = ("layers", "hidden", "heads", "vocab") + (
                ("experts", "top_k", "moe_ffn_hidden") if self.experts else ("ffn_hidden",))
            missing = [f for f in required if getattr(self, f) is None]
            if missing:
                raise ValueError(f"explicit model needs {', '.join(missing)}")
        return self


class PoolSection(BaseModel):
    model_config = _STRICT
    preset: str = Field(description="node type of this pool (dgx-h100, dgx-a100-80gb, ...)")
    nodes: int | None = Field(None, ge=1, description="number of nodes in this pool")
    gpus: int | None = Field(None, ge=1, description="number of devices, instead of nodes")

    @model_validator(mode="after")
    def check_size(self) -> PoolSection:
        if (self.nodes is None) == (self.gpus is None):
            raise ValueError("give exactly one of nodes or gpus for each of cluster.pools")
        return self


class ClusterSection(BaseModel):
    model_config = _STRICT
    preset: str | None = Field(
        None, description="node type (dgx-h100, gb200-nvl72, ...) or fabric preset")
    nodes: int | None = Field(None, ge=1, description="number of nodes (a gb200-nvl72 node is a rack)")
    gpus: int | None = Field(None, ge=1, description="number of devices, instead of nodes")
    pools: list[PoolSection] | None = Field(
        None, description="mixed-GPU cluster: pools of nodes of one type each, on one scale-out "
        "network; the solver puts each pipeline stage on one pool (instead of preset/nodes/gpus)")

    @model_validator(mode="after")
    def check_size(self) -> ClusterSection:
        if self.pools is not None:
            if self.preset is not None or self.nodes is not None or self.gpus is not None:
                raise ValueError("give either cluster.pools or cluster.preset with nodes/gpus, "
                                 "not both")
            if not self.pools:
                raise ValueError("cluster.pools must list at least one pool, e.g. "
                                 "[{preset: dgx-h100, nodes: 4}, {preset: dgx-a100-80gb, nodes: 4}]")
            return self
        if self.preset is None:
            raise ValueError("give cluster.preset (with nodes or gpus) or cluster.pools")
        if (self.nodes is None) == (self.gpus is None):
            raise ValueError("give exactly one of cluster.nodes or cluster.gpus")
        return self


class JobSection(BaseModel):
    model_config = _STRICT
    seq_len: int = Field(ge=1, description="tokens per sequence")
    global_batch: int = Field(ge=1, description="sequences per optimizer step")
    precision: Precision = Field(Precision.BF16, description="bf16 | fp16 | fp8")
    flash_attention: bool = Field(True, description="fused attention: no s^2 activations stored")
    overlap_dp_comm: bool = Field(True, description="overlap gradient sync with backward")
    fp32_grads: bool = Field(True, description="accumulate and reduce gradients in fp32 "
                             "(Megatron main grads); false keeps them in bf16")
    expert_imbalance: float = Field(
        1.1, ge=1.0, le=100.0, description="MoE: routed tokens on the busiest expert-parallel "
        "rank over the mean (1.0 = perfectly balanced); see cost/ep.py")


class PlanSection(BaseModel):
    model_config = _STRICT
    dp: int | None = Field(None, ge=1)
    tp: int | None = Field(None, ge=1)
    pp: int | None = Field(None, ge=1)
    cp: int | None = Field(None, ge=1)
    ep: int | None = Field(None, ge=1)
    etp: int | None = Field(None, ge=1, description="expert tensor-parallel degree: tp (default) or 1")
    cp_comm: CPComm | None = Field(None, description="context-parallel K/V exchange: p2p | all_gather")
    vp: int | None = Field(None, ge=1)
    micro_batch: int | None = Field(None, ge=1)
    zero: int | None = Field(None, ge=0, le=3, description="ZeRO stage; 3 = fully sharded (FSDP)")
    sequence_parallel: bool | None = None
    recompute: Recompute | list[Recompute] | None = Field(
        None, description="none | selective | full, or one per pipeline stage")
    layers_per_stage: list[int] | None = Field(None, description="uneven pipeline stages")
    order: list[Axis] | None = Field(None, description="rank order, innermost first")
    stage_pools: list[int] | None = Field(
        None, description="pooled clusters: the pool (index in cluster.pools) of each pipeline "
        "stage; default for evaluate: every pool in cluster.pools order")

    @field_validator("layers_per_stage")
    @classmethod
    def check_layers_positive(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and any(n < 1 for n in v):
            raise ValueError(f"every stage needs at least one layer; got {v}")
        return v


SolverTarget = Literal["megatron", "nemo", "deepspeed", "torchtitan", "maxtext", "torch"]
"""Frameworks ``solver.target`` accepts: the exporters that launch a training run."""


class SolverSection(BaseModel):
    model_config = _STRICT
    allow_uneven_stages: bool = Field(True, description="let the solver split layers unevenly")
    search_placement: bool = Field(True, description="let the solver choose the rank order")
    max_micro_batch: int = Field(8, ge=1, description="largest micro-batch considered")
    max_vp: int = Field(4, ge=1, description="largest interleaving degree considered")
    uniform_recompute: bool = Field(
        False, description="one recompute mode for every pipeline stage (what frameworks run)")
    target: SolverTarget | None = Field(
        None, description="search only the plans this framework can run (its exporter's rules); "
                          "the plan exports to it without a refusal")


class Scenario(BaseModel):
    model_config = _STRICT
    model: ModelSection
    cluster: ClusterSection
    job: JobSection
    plan: PlanSection = Field(default_factory=PlanSection)
    solver: SolverSection = Field(default_factory=SolverSection)
    calibration: str | None = Field(
        None, description="calibration profile (YAML from `paraplan calibrate`) whose fitted "
        "efficiencies replace the catalog's; a path relative to the scenario file")


def _format(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"]) or "scenario"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key (check the spelling; see README for the scenario keys)"
        lines.append(f"{where}: {msg}")
    return "invalid scenario:\n  " + "\n  ".join(lines)


def load_scenario(source: str | Path | dict[str, Any] | Scenario) -> Scenario:
    """Scenario from a YAML/JSON file path or a dict; ConfigError names each bad field."""
    if isinstance(source, Scenario):
        return source
    if isinstance(source, dict):
        data, base = source, None
    else:
        path = Path(source)
        try:
            text = path.read_text()
        except OSError as e:
            raise ConfigError(f"cannot read scenario file {str(path)!r}: {e.strerror}") from None
        try:
            data = yaml.safe_load(text)  # JSON is YAML; safe_load never executes anything
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: not valid YAML/JSON: {e}") from None
        base = path.parent
    if not isinstance(data, dict):
        raise ConfigError("a scenario must be a mapping with model, cluster and job sections")
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format(e)) from None
    hf = scenario.model.hf_config
    if base is not None and hf and not Path(hf).is_absolute():
        model = scenario.model.model_copy(update={"hf_config": str(base / hf)})
        scenario = scenario.model_copy(update={"model": model})
    cal = scenario.calibration
    if base is not None and cal and not Path(cal).is_absolute():
        scenario = scenario.model_copy(update={"calibration": str(base / cal)})
    return scenario
