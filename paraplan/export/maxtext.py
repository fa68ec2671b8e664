"""MaxText 0.2.5 export: a config YAML over ``base.yml`` (docs/frameworks.md §5).

MaxText builds a hybrid device mesh: ``ici_*_parallelism`` inside a slice and
``dcn_*_parallelism`` across slices. On TPU clusters a slice is a TPU slice (``v5p-1024``: 512
chips) and the config says ``hardware: tpu``; on GPU clusters a slice is a node (the scale-up
domain) and ``hardware: gpu``. Which axes cross slices follows from the plan's rank order and the
slice size: walking the order from the innermost axis, axes stay inside a slice until the product
of degrees reaches the slice's device count; the axis that straddles the boundary is split into
an ICI part and a DCN part, and the rest are DCN only. The file is ``maxtext.yml``: MaxText reads
only a config whose name ends in ``.yml``.

Mapping: dp -> ``data`` (ZeRO-0; ZeRO-1 adds ``shard_optimizer_over_data``) or ``fsdp`` (ZeRO-3);
pp -> ``stage`` (keys ``ici/dcn_pipeline_parallelism``) with ``num_pipeline_repeats`` = vp
(circular pipeline); cp -> ``context``; tp -> ``tensor``. MaxText's mesh order (``mesh_axes``:
data, stage, fsdp, ..., context, ..., tensor) fixes the rank order: innermost tensor, context,
fsdp, stage, data.

Mixture of experts: ep -> the ``expert`` mesh axis (``ici/dcn_expert_parallelism``), which is
innermost in ``mesh_axes`` and shards the batch of the non-expert layers like data/fsdp: the
plan's ep innermost data-parallel ranks (the cost model's EP group), the rest of dp on
``data``/``fsdp``. That placement matches only without tensor and context parallelism, and with
pp = 1 or ZeRO-3 (else ``data`` sits outside ``stage``); MoE presets map to MaxText's model
configs, other MoE shapes to ``num_experts`` / ``num_experts_per_tok`` / ``base_moe_mlp_dim``.

Rules enforced (paraplan/rules/maxtext.py): ICI products equal the devices per slice and DCN
products the slice count (checked by MaxText only at mesh creation); stages x repeats x layers per
stage == layers (uniform stages only); pipeline micro-batches % stages == 0;
``shard_optimizer_over_data`` only without FSDP (ZeRO-2 has no MaxText form); one remat policy for
every stage; the expert placement above; "FP8 quantization is not compatible with gradient
accumulation" (MaxText's config check).

Rank order: ``mesh_axes`` lists data first, then stage, then fsdp, ..., tensor: outermost first.
With pp > 1 the pipeline stage axis therefore sits inside ``data`` and outside ``fsdp``; the
header writes the order innermost first (tensor, context, fsdp|stage, stage|data).
"""

from __future__ import annotations

from typing import Any

import yaml

from paraplan.cost import Axis, CPComm, Precision, Recompute
from paraplan.export import (
    ExportContext,
    comment_block,
    enforce,
    header_lines,
    uniform_recompute,
)
from paraplan.rules import rules_of
from paraplan.rules.maxtext import MODELS, maxtext_order, mesh_split, slices

__all__ = ["KEYS", "render", "maxtext_config", "mesh_split", "maxtext_order"]

FRAMEWORK = "MaxText 0.2.5"

KEYS: dict[str, str] = {
    "base": "base_config",
    "run_name": "run_name",
    "model_name": "model_name",
    "ici": "ici_{}_parallelism",
    "dcn": "dcn_{}_parallelism",
    "num_slices": "num_slices",
    "per_device_batch": "per_device_batch_size",
    "grad_accum": "gradient_accumulation_steps",
    "seq_len": "max_target_length",
    "layers_per_stage": "num_layers_per_pipeline_stage",
    "repeats": "num_pipeline_repeats",
    "pp_micro_batches": "num_pipeline_microbatches",
    "scan_layers": "scan_layers",
    "zero1": "shard_optimizer_over_data",
    "remat": "remat_policy",
    "dtype": "dtype",
    "weight_dtype": "weight_dtype",
    "quantization": "quantization",
    "hidden": "base_emb_dim",
    "heads": "base_num_query_heads",
    "kv_heads": "base_num_kv_heads",
    "ffn_hidden": "base_mlp_dim",
    "num_layers": "base_num_decoder_layers",
    "head_dim": "head_dim",
    "vocab": "vocab_size",
    "num_experts": "num_experts",
    "top_k": "num_experts_per_tok",
    "moe_ffn_hidden": "base_moe_mlp_dim",
    "first_dense_layers": "first_num_dense_layers",
    "shared_experts": "shared_experts",
    "cp_strategy": "context_parallel_strategy",
    "hardware": "hardware",
}
"""paraplan concept -> MaxText config key; the only place MaxText key names appear."""

DP_AXIS = {False: "data", True: "fsdp"}  # keyed by "ZeRO-3"
MESH_AXIS = {Axis.TP: "tensor", Axis.CP: "context", Axis.PP: "pipeline"}  # key infixes
REMAT = {Recompute.NONE: "minimal_with_context", Recompute.SELECTIVE: "minimal", Recompute.FULL: "full"}
CP_STRATEGY = {CPComm.P2P: "ring", CPComm.ALL_GATHER: "all_gather"}  # context_parallel_strategy
DTYPES = {Precision.BF16: "bfloat16", Precision.FP8: "bfloat16", Precision.FP16: "float16"}
WEIGHT_DTYPE = "float32"
FP8_QUANTIZATION = "fp8"
BASE_CONFIG = "base.yml"
HARDWARE = {True: "tpu", False: "gpu"}  # keyed by "the cluster is a TPU slice"
TRAIN = "python3 -m maxtext.trainers.pre_train.train maxtext.yml"
XPK_TPU_TYPE = {"v5e": "v5litepod", "v4": "v4", "v5p": "v5p", "v6e": "v6e"}
"""Slice family -> the TPU type prefix xpk / GKE name it by (v5e slices are ``v5litepod-N``)."""
# --------------------------------------------------------------------------- config


def _mesh_keys(ctx: ExportContext) -> dict[str, Any]:
    p = ctx.plan
    per_slice, num, _ = slices(ctx.rule_context)
    split = mesh_split(p, per_slice, num)
    names = {**MESH_AXIS, Axis.DP: DP_AXIS[p.zero == 3]}
    keys: dict[str, Any] = {}
    # every mesh axis written out; fsdp_transpose and tensor_sequence have no paraplan axis (1)
    for name in (
        "data",
        "fsdp",
        "fsdp_transpose",
        "pipeline",
        "context",
        "tensor",
        "tensor_sequence",
        "expert",
    ):
        axis = "expert" if name == "expert" else next((a for a, n in names.items() if n == name), None)
        ici, dcn = split.get(axis, (1, 1)) if axis is not None else (1, 1)
        keys[KEYS["ici"].format(name)] = ici
        keys[KEYS["dcn"].format(name)] = dcn
    keys[KEYS["num_slices"]] = num
    if p.zero == 1:
        keys[KEYS["zero1"]] = True
    return keys


def _batch_keys(ctx: ExportContext) -> dict[str, Any]:
    p, job, c = ctx.plan, ctx.inst.job, ctx.cluster
    n = job.global_batch // (p.micro_batch * p.dp)
    per_step = job.global_batch if p.pp > 1 else p.micro_batch * p.dp
    per_device = per_step / c.num_devices
    if int(c.num_devices * per_device) != per_step:
        per_device = round(per_device, 12)
    keys: dict[str, Any] = {
        KEYS["per_device_batch"]: per_device,
        KEYS["grad_accum"]: 1 if p.pp > 1 else n,
        KEYS["seq_len"]: job.seq_len,
    }
    if p.pp > 1:
        keys.update(
            {
                KEYS["layers_per_stage"]: p.layers_per_stage[0] // p.vp,
                KEYS["repeats"]: p.vp,
                KEYS["pp_micro_batches"]: n,
                KEYS["scan_layers"]: False,
            }
        )
    return keys


def _model_keys(ctx: ExportContext) -> dict[str, Any]:
    preset = ctx.scenario.get("model", {}).get("preset")
    if preset in MODELS:
        return {KEYS["model_name"]: MODELS[preset]}
    s = ctx.spec
    keys = {
        KEYS["hidden"]: s.hidden,
        KEYS["heads"]: s.num_heads,
        KEYS["kv_heads"]: s.num_kv_heads,
        KEYS["head_dim"]: s.head_dim,
        KEYS["ffn_hidden"]: s.ffn_hidden,
        KEYS["num_layers"]: s.num_layers,
        KEYS["vocab"]: s.vocab,
    }
    if s.is_moe:
        keys.update(
            {
                KEYS["num_experts"]: s.num_experts,
                KEYS["top_k"]: s.top_k,
                KEYS["moe_ffn_hidden"]: s.moe_ffn_hidden,
            }
        )
        if s.first_dense_layers:
            keys[KEYS["first_dense_layers"]] = s.first_dense_layers
        if s.num_shared_experts:
            keys[KEYS["shared_experts"]] = s.num_shared_experts
    return keys


def maxtext_config(ctx: ExportContext) -> dict[str, Any]:
    """The config mapping for the context's plan (rules enforced first)."""
    enforce(ctx, FRAMEWORK, rules_of("maxtext").rules)  # its launch rules first
    mode = uniform_recompute(ctx.plan) or Recompute.FULL  # RULES refused mixed modes already
    config: dict[str, Any] = {
        KEYS["base"]: BASE_CONFIG,
        KEYS["run_name"]: "paraplan",
        KEYS["hardware"]: HARDWARE[ctx.cluster.torus is not None],
        **_model_keys(ctx),
        **_mesh_keys(ctx),
        **_batch_keys(ctx),
        KEYS["remat"]: REMAT[mode],
        KEYS["dtype"]: DTYPES[ctx.precision],
        KEYS["weight_dtype"]: WEIGHT_DTYPE,
    }
    if ctx.precision is Precision.FP8:
        config[KEYS["quantization"]] = FP8_QUANTIZATION
    if ctx.plan.cp > 1:
        config[KEYS["cp_strategy"]] = CP_STRATEGY[ctx.plan.cp_comm]
    return config


def _launch(ctx: ExportContext) -> list[str]:
    """How to start the run: on TPU an xpk workload over the slices (the slice shape, where the
    plan chose one, is the slice's --topology at creation); on GPU the train module per host."""
    c = ctx.cluster
    if c.torus is None:
        return [f"run: {TRAIN}"]
    family, size = c.name.split("-")
    lines = [
        f"run (every host of every slice; xpk starts them): xpk workload create "
        f"--cluster CLUSTER --workload paraplan --tpu-type={XPK_TPU_TYPE[family]}-{size} "
        f'--num-slices={c.torus.num_slices} --command "{TRAIN}"'
    ]
    if ctx.plan.torus_shape and ctx.plan.torus_shape != c.torus.shapes[0]:
        lines.append(
            f"slice shape {'x'.join(map(str, ctx.plan.torus_shape))} (optical circuit "
            f"switching): create each slice with --type={family} --topology="
            f"{'x'.join(map(str, ctx.plan.torus_shape))}"
        )
    return lines


def _notes(ctx: ExportContext) -> list[str]:
    p = ctx.plan
    per_slice, num, what = slices(ctx.rule_context)
    notes = [
        f"rank order {'-'.join(a.value for a in maxtext_order(p))} (innermost first; "
        f"mesh_axes lists them outermost first); ici_* inside a {per_slice}-device {what}, "
        f"dcn_* across {num}"
    ]
    if ctx.cluster.torus is not None:
        shape = p.torus_shape or ctx.cluster.torus.shape
        notes.append(
            f"placement: paraplan laid the ranks row-major over the {'x'.join(map(str, shape))} "
            "torus in this order; MaxText's create_device_mesh assigns physical axes "
            "to mesh axes itself (allow_split_physical_axes for axes that split one)"
        )
    mode = uniform_recompute(p) or Recompute.FULL
    if mode is not Recompute.FULL:
        notes.append(
            f"recompute={mode.value}: remat_policy {REMAT[mode]} is MaxText's nearest "
            "policy (it saves every matmul output"
            + (" and the attention context)" if mode is Recompute.NONE else ")")
        )
    if p.tp > 1 and p.sequence_parallel:
        notes.append(
            "sequence_parallel: MaxText shards norm/residual activations over the tensor "
            "axis through its logical axis rules; there is no separate switch"
        )
    if p.cp > 1:
        notes.append(
            f"cp_comm={p.cp_comm.value}: context_parallel_strategy "
            f"{CP_STRATEGY[p.cp_comm]} (MaxText's default all-gathers K/V)"
        )
    if p.ep > 1:
        notes.append(
            f"ep={p.ep}: the expert axis shards the experts and, for the other layers, "
            f"the batch (with data/fsdp = dp/ep = {p.dp // p.ep})"
        )
    return notes + _launch(ctx)


def render(ctx: ExportContext) -> str:
    """``maxtext.yml``: header comments, then the config over base.yml."""
    config = maxtext_config(ctx)
    body = yaml.safe_dump(config, sort_keys=False, default_flow_style=False)
    return comment_block(header_lines(ctx, FRAMEWORK) + _notes(ctx)) + "\n" + body
