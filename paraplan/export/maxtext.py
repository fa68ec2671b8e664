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

Rules enforced: ICI products equal the devices per slice and DCN products the slice count (checked
by MaxText only at mesh creation); stages x repeats x layers per stage == layers (uniform stages
only); pipeline micro-batches % stages == 0; ``shard_optimizer_over_data`` only without FSDP
(ZeRO-2 has no MaxText form); one remat policy for every stage; the expert placement above;
"FP8 quantization is not compatible with gradient accumulation" (MaxText's config check).

Rank order: ``mesh_axes`` lists data first, then stage, then fsdp, ..., tensor: outermost first.
With pp > 1 the pipeline stage axis therefore sits inside ``data`` and outside ``fsdp``; the
header writes the order innermost first (tensor, context, fsdp|stage, stage|data).
"""

from __future__ import annotations

from dataclasses import replace
from math import prod
from typing import Any

import yaml

from paraplan.cost import Axis, CPComm, Plan, Precision, Recompute
from paraplan.export import (
    Draft,
    ExportContext,
    Fix,
    Refusal,
    SearchLimits,
    check_dense_model,
    check_expert_tp_is_tp,
    comment_block,
    enforce,
    header_lines,
    micro_batch_repairs,
    order_fixes,
    order_matches,
    repair,
    uniform_recompute,
    uniform_recompute_rule,
)

__all__ = ["KEYS", "RULES", "render", "maxtext_config", "mesh_split", "maxtext_order"]

FRAMEWORK = "MaxText 0.2.5"

KEYS: dict[str, str] = {
    "base": "base_config", "run_name": "run_name", "model_name": "model_name",
    "ici": "ici_{}_parallelism", "dcn": "dcn_{}_parallelism", "num_slices": "num_slices",
    "per_device_batch": "per_device_batch_size", "grad_accum": "gradient_accumulation_steps",
    "seq_len": "max_target_length",
    "layers_per_stage": "num_layers_per_pipeline_stage", "repeats": "num_pipeline_repeats",
    "pp_micro_batches": "num_pipeline_microbatches", "scan_layers": "scan_layers",
    "zero1": "shard_optimizer_over_data", "remat": "remat_policy",
    "dtype": "dtype", "weight_dtype": "weight_dtype", "quantization": "quantization",
    "hidden": "base_emb_dim", "heads": "base_num_query_heads", "kv_heads": "base_num_kv_heads",
    "ffn_hidden": "base_mlp_dim", "num_layers": "base_num_decoder_layers", "head_dim": "head_dim",
    "vocab": "vocab_size", "num_experts": "num_experts", "top_k": "num_experts_per_tok",
    "moe_ffn_hidden": "base_moe_mlp_dim", "first_dense_layers": "first_num_dense_layers",
    "shared_experts": "shared_experts", "cp_strategy": "context_parallel_strategy",
    "hardware": "hardware",
}
"""paraplan concept -> MaxText config key; the only place MaxText key names appear."""

DP_AXIS = {False: "data", True: "fsdp"}  # keyed by "ZeRO-3"
MESH_AXIS = {Axis.TP: "tensor", Axis.CP: "context", Axis.PP: "pipeline"}  # key infixes
REMAT = {Recompute.NONE: "minimal_with_context", Recompute.SELECTIVE: "minimal",
         Recompute.FULL: "full"}
CP_STRATEGY = {CPComm.P2P: "ring", CPComm.ALL_GATHER: "all_gather"}  # context_parallel_strategy
DTYPES = {Precision.BF16: "bfloat16", Precision.FP8: "bfloat16", Precision.FP16: "float16"}
WEIGHT_DTYPE = "float32"
FP8_QUANTIZATION = "fp8"
BASE_CONFIG = "base.yml"
HARDWARE = {True: "tpu", False: "gpu"}  # keyed by "the cluster is a TPU slice"
TRAIN = "python3 -m maxtext.trainers.pre_train.train maxtext.yml"
XPK_TPU_TYPE = {"v5e": "v5litepod", "v4": "v4", "v5p": "v5p", "v6e": "v6e"}
"""Slice family -> the TPU type prefix xpk / GKE name it by (v5e slices are ``v5litepod-N``)."""
MODELS = {name: name for name in (
    "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3.1-8b",
    "llama3.1-70b", "llama3.1-405b", "mistral-7b", "gpt3-175b", "mixtral-8x7b", "mixtral-8x22b",
    "qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-120b")} | {"deepseek-v3": "deepseek3-671b"}
"""paraplan presets -> MaxText ``model_name`` configs of the same shape (MaxText @e591f30
configs/models, the sources of docs/data/models.json)."""


def maxtext_order(plan: Plan) -> tuple[Axis, ...]:
    """MaxText's innermost-first order for the plan's dp flavour (data or fsdp)."""
    if plan.zero == 3:
        return (Axis.TP, Axis.CP, Axis.DP, Axis.PP)
    return (Axis.TP, Axis.CP, Axis.PP, Axis.DP)


def mesh_split(plan: Plan, devices_per_node: int, num_nodes: int
               ) -> dict[Axis | str, tuple[int, int]]:
    """(ici, dcn) degree of each axis: inside a node until the order fills it, then across.
    With ep > 1 the ``"expert"`` axis (ep ranks) comes first and dp keeps dp / ep.

    ValueError when an axis would straddle the node boundary unevenly.
    """
    axes: list[tuple[Axis | str, int]] = [("expert", plan.ep)] if plan.ep > 1 else []
    axes += [(a, plan.degree(a) // (plan.ep if a is Axis.DP else 1)) for a in plan.order]
    split: dict[Axis | str, tuple[int, int]] = {}
    inner = 1
    for axis, degree in axes:
        if inner % devices_per_node == 0:
            room = 1  # the node is full: this axis runs across nodes
        elif devices_per_node % inner == 0:
            room = devices_per_node // inner
        else:
            room = 0
        ici = min(degree, room)
        if ici == 0 or degree % ici:
            raise ValueError(f"{getattr(axis, 'value', axis)}={degree} after {inner} inner ranks "
                             f"straddles the {devices_per_node}-device node boundary unevenly")
        split[axis] = (ici, degree // ici)
        inner *= degree
    ici_product = prod(i for i, _ in split.values())
    if ici_product != devices_per_node or prod(d for _, d in split.values()) != num_nodes:
        raise ValueError(f"ICI degrees multiply to {ici_product}, not the {devices_per_node} "
                         "devices per node")
    return split


# --------------------------------------------------------------------------- rules


def check_zero(ctx: ExportContext, draft: Draft) -> Refusal | None:
    """ZeRO-1 = shard_optimizer_over_data; ZeRO-3 = fsdp axis; nothing shards gradients only."""
    p = draft.plan
    if p.zero != 2:
        return None
    return Refusal("plan.zero=2: MaxText shards optimizer state only (shard_optimizer_over_data, "
                   "ZeRO-1) or everything (fsdp axis, ZeRO-3)",
                   repair("zero -> 1", draft, replace(p, zero=1))
                   + repair("zero -> 3", draft, replace(p, zero=3)))


def check_uniform_stages(ctx: ExportContext, draft: Draft) -> Refusal | None:
    """stages x repeats x num_layers_per_pipeline_stage == layers: every stage alike."""
    p = draft.plan
    if len(set(p.layers_per_stage)) == 1 and p.layers_per_stage[0] % p.vp == 0:
        return None
    layers = sum(p.layers_per_stage)
    fixes: tuple[Fix, ...] = ()
    if layers % p.pp == 0:
        even = (layers // p.pp,) * p.pp
        vp = p.vp if (layers // p.pp) % p.vp == 0 else 1
        fixes = repair(f"layers_per_stage -> {list(even)}", draft,
                       replace(p, layers_per_stage=even, vp=vp))
    return Refusal(f"layers_per_stage={list(p.layers_per_stage)}: MaxText pipelines need "
                   "stages x repeats x num_layers_per_pipeline_stage == layers, so every stage "
                   "holds the same number of layers, a multiple of the repeats (vp)", fixes)


def check_pipeline_micro_batches(ctx: ExportContext, draft: Draft) -> Refusal | None:
    """num_pipeline_microbatches % number of stages == 0."""
    p, gb = draft.plan, ctx.inst.job.global_batch
    if p.pp == 1:
        return None
    n = gb // (p.micro_batch * p.dp)
    if n % p.pp == 0:
        return None
    return Refusal(f"num_pipeline_microbatches={n} must be a multiple of the pp={p.pp} stages",
                   micro_batch_repairs(draft, gb, lambda count: count % p.pp == 0))


check_uniform_recompute = uniform_recompute_rule("remat_policy applies to every layer")


def check_rank_order(ctx: ExportContext, draft: Draft) -> Refusal | None:
    """The plan's order must be mesh_axes' order (tensor, context, fsdp|stage, stage|data)."""
    order = maxtext_order(draft.plan)
    if order_matches(draft.plan, order):
        return None
    name = "-".join(a.value for a in order)
    return Refusal(f"plan.order={'-'.join(a.value for a in draft.plan.order)}: MaxText's "
                   f"mesh_axes place ranks as {name} (innermost first)",
                   order_fixes(draft, [(name, order)]))


def slices(ctx: ExportContext) -> tuple[int, int, str]:
    """(devices per slice, slices, what a slice is): a TPU slice on TPU clusters, else a node."""
    c = ctx.cluster
    if c.torus is not None:
        return c.torus.slice_chips, c.torus.num_slices, f"{c.name} slice"
    return c.devices_per_node, c.num_nodes, "node"


def check_node_boundary(ctx: ExportContext, draft: Draft) -> Refusal | None:
    """ICI product == devices per slice and DCN product == slices (mesh creation)."""
    per_slice, num, what = slices(ctx)
    try:
        mesh_split(draft.plan, per_slice, num)
    except ValueError as e:
        return Refusal(f"the mesh cannot be cut into ici (inside a {per_slice}-device {what}) and "
                       f"dcn (across {num} of them) parts: {e}")
    return None


def check_fp8_accumulation(ctx: ExportContext, draft: Draft) -> Refusal | None:
    """MaxText: "FP8 quantization is not compatible with gradient accumulation"."""
    p = draft.plan
    accumulation = 1 if p.pp > 1 else ctx.inst.job.global_batch // (p.micro_batch * p.dp)
    if draft.precision is not Precision.FP8 or accumulation == 1:
        return None
    whole = ctx.inst.job.global_batch // p.dp
    fixes = repair(f"micro_batch -> {whole} (no accumulation)", draft,
                   replace(p, micro_batch=whole))
    fixes += (Fix("precision -> bf16", replace(draft, precision=Precision.BF16)),)
    return Refusal(f"precision fp8 with gradient_accumulation_steps={accumulation}: MaxText "
                   "refuses it (\"FP8 quantization is not compatible with gradient "
                   "accumulation\"); run one micro-batch per step or bf16", fixes)


def check_expert_axis(ctx: ExportContext, draft: Draft) -> Refusal | None:
    """The expert mesh axis is innermost: it holds the plan's EP group only when tp = cp = 1
    and dp is the innermost remaining axis (pp = 1 or fsdp)."""
    p = draft.plan
    if p.ep == 1 or (p.tp == 1 and p.cp == 1 and (p.pp == 1 or p.zero == 3)):
        return None
    return Refusal(f"plan.ep={p.ep}: MaxText's expert axis is innermost in mesh_axes, inside "
                   f"tensor (tp={p.tp}), context (cp={p.cp}) and stage (pp={p.pp}, unless dp is "
                   "the fsdp axis), so it cannot hold the plan's expert-parallel group",
                   repair("ep -> 1", draft, replace(p, ep=1)))


def check_model_keys(ctx: ExportContext, draft: Draft) -> Refusal | None:
    """A model without a MaxText model_name must be expressible in the shape keys written here:
    no latent attention, no interleaved dense/MoE layers, shared experts of the expert width."""
    s = ctx.spec
    if ctx.scenario.get("model", {}).get("preset") in MODELS:
        return None
    odd = [what for what, on in (
        ("multi-head latent attention", s.is_mla),
        (f"moe_layer_freq={s.moe_layer_freq}", s.moe_layer_freq > 1),
        ("shared experts of another width", s.shared_ffn_hidden
         and s.shared_ffn_hidden != s.num_shared_experts * s.moe_ffn_hidden)) if on]
    if not odd:
        return None
    return Refusal(f"model {s.name}: {', '.join(odd)} has no key in this export (use a MaxText "
                   "model config that has it)")


# MaxText shards expert weights over the tensor axis like the dense MLP: expert TP = tp
check_expert_tp = check_expert_tp_is_tp("MaxText has no separate expert tensor-parallel degree")


RULES = (check_dense_model, check_expert_tp, check_model_keys, check_zero, check_uniform_stages,
         check_pipeline_micro_batches, check_uniform_recompute, check_rank_order,
         check_expert_axis, check_node_boundary, check_fp8_accumulation)

SEARCH = SearchLimits(even_stages=True)
"""solver.target=maxtext: num_layers_per_pipeline_stage: every stage alike; one remat_policy."""
MODEL_RULES = (check_model_keys,)
"""The RULES that read only the model and job (solver.target checks them once, first)."""


# --------------------------------------------------------------------------- config


def _mesh_keys(ctx: ExportContext) -> dict[str, Any]:
    p = ctx.plan
    per_slice, num, _ = slices(ctx)
    split = mesh_split(p, per_slice, num)
    names = {**MESH_AXIS, Axis.DP: DP_AXIS[p.zero == 3]}
    keys: dict[str, Any] = {}
    # every mesh axis written out; fsdp_transpose and tensor_sequence have no paraplan axis (1)
    for name in ("data", "fsdp", "fsdp_transpose", "pipeline", "context", "tensor",
                 "tensor_sequence", "expert"):
        axis = "expert" if name == "expert" else next(
            (a for a, n in names.items() if n == name), None)
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
    keys: dict[str, Any] = {KEYS["per_device_batch"]: per_device,
                            KEYS["grad_accum"]: 1 if p.pp > 1 else n,
                            KEYS["seq_len"]: job.seq_len}
    if p.pp > 1:
        keys.update({KEYS["layers_per_stage"]: p.layers_per_stage[0] // p.vp,
                     KEYS["repeats"]: p.vp, KEYS["pp_micro_batches"]: n,
                     KEYS["scan_layers"]: False})
    return keys


def _model_keys(ctx: ExportContext) -> dict[str, Any]:
    preset = ctx.scenario.get("model", {}).get("preset")
    if preset in MODELS:
        return {KEYS["model_name"]: MODELS[preset]}
    s = ctx.spec
    keys = {KEYS["hidden"]: s.hidden, KEYS["heads"]: s.num_heads,
            KEYS["kv_heads"]: s.num_kv_heads, KEYS["head_dim"]: s.head_dim,
            KEYS["ffn_hidden"]: s.ffn_hidden, KEYS["num_layers"]: s.num_layers,
            KEYS["vocab"]: s.vocab}
    if s.is_moe:
        keys.update({KEYS["num_experts"]: s.num_experts, KEYS["top_k"]: s.top_k,
                     KEYS["moe_ffn_hidden"]: s.moe_ffn_hidden})
        if s.first_dense_layers:
            keys[KEYS["first_dense_layers"]] = s.first_dense_layers
        if s.num_shared_experts:
            keys[KEYS["shared_experts"]] = s.num_shared_experts
    return keys


def maxtext_config(ctx: ExportContext) -> dict[str, Any]:
    """The config mapping for the context's plan (rules enforced first)."""
    enforce(ctx, FRAMEWORK, RULES)
    mode = uniform_recompute(ctx.plan) or Recompute.FULL  # RULES refused mixed modes already
    config: dict[str, Any] = {KEYS["base"]: BASE_CONFIG, KEYS["run_name"]: "paraplan",
                              KEYS["hardware"]: HARDWARE[ctx.cluster.torus is not None],
                              **_model_keys(ctx), **_mesh_keys(ctx), **_batch_keys(ctx),
                              KEYS["remat"]: REMAT[mode], KEYS["dtype"]: DTYPES[ctx.precision],
                              KEYS["weight_dtype"]: WEIGHT_DTYPE}
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
    lines = [f"run (every host of every slice; xpk starts them): xpk workload create "
             f"--cluster CLUSTER --workload paraplan --tpu-type={XPK_TPU_TYPE[family]}-{size} "
             f"--num-slices={c.torus.num_slices} --command \"{TRAIN}\""]
    if ctx.plan.torus_shape and ctx.plan.torus_shape != c.torus.shapes[0]:
        lines.append(f"slice shape {'x'.join(map(str, ctx.plan.torus_shape))} (optical circuit "
                     f"switching): create each slice with --type={family} --topology="
                     f"{'x'.join(map(str, ctx.plan.torus_shape))}")
    return lines


def _notes(ctx: ExportContext) -> list[str]:
    p = ctx.plan
    per_slice, num, what = slices(ctx)
    notes = [f"rank order {'-'.join(a.value for a in maxtext_order(p))} (innermost first; "
             f"mesh_axes lists them outermost first); ici_* inside a {per_slice}-device {what}, "
             f"dcn_* across {num}"]
    if ctx.cluster.torus is not None:
        shape = p.torus_shape or ctx.cluster.torus.shape
        notes.append(f"placement: paraplan laid the ranks row-major over the {'x'.join(map(str, shape))} "
                     "torus in this order; MaxText's create_device_mesh assigns physical axes "
                     "to mesh axes itself (allow_split_physical_axes for axes that split one)")
    mode = uniform_recompute(p) or Recompute.FULL
    if mode is not Recompute.FULL:
        notes.append(f"recompute={mode.value}: remat_policy {REMAT[mode]} is MaxText's nearest "
                     "policy (it saves every matmul output"
                     + (" and the attention context)" if mode is Recompute.NONE else ")"))
    if p.tp > 1 and p.sequence_parallel:
        notes.append("sequence_parallel: MaxText shards norm/residual activations over the tensor "
                     "axis through its logical axis rules; there is no separate switch")
    if p.cp > 1:
        notes.append(f"cp_comm={p.cp_comm.value}: context_parallel_strategy "
                     f"{CP_STRATEGY[p.cp_comm]} (MaxText's default all-gathers K/V)")
    if p.ep > 1:
        notes.append(f"ep={p.ep}: the expert axis shards the experts and, for the other layers, "
                     f"the batch (with data/fsdp = dp/ep = {p.dp // p.ep})")
    return notes + _launch(ctx)


def render(ctx: ExportContext) -> str:
    """``maxtext.yml``: header comments, then the config over base.yml."""
    config = maxtext_config(ctx)
    body = yaml.safe_dump(config, sort_keys=False, default_flow_style=False)
    return comment_block(header_lines(ctx, FRAMEWORK) + _notes(ctx)) + "\n" + body
