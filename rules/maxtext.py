"""MaxText 0.2.5's rules: what a plan must satisfy to run from a MaxText YAML config, and the
framework facts both the rules and the exporter (paraplan/export/maxtext.py) need: the model
configs of the same shape (``MODELS``), the mesh order and its ici/dcn split (``mesh_split``)."""

from __future__ import annotations

from dataclasses import replace
from math import prod

from paraplan.cost import Axis, Plan, Precision
from paraplan.rules.base import (
    Draft,
    Fix,
    Refusal,
    RuleContext,
    SearchLimits,
    micro_batch_repairs,
    order_fixes,
    repair,
)
from paraplan.rules.checks import (
    check_dense_model,
    check_expert_tp_is_tp,
    layer_kinds,
    loss_chunks_rule,
    megatron_offload_modules_rule,
    megatron_recompute_modules_rule,
    partial_recompute_rule,
    uniform_recompute_rule,
)
from paraplan.rules.launch_env import check_allocator
from paraplan.rules.moe_fusion import fusion_rule
from paraplan.rules.moe_state import state_rules
from paraplan.rules.plans import order_matches
from paraplan.rules.pp_schedule import schedule_refusal_rule

__all__ = [
    "RULES",
    "SEARCH",
    "MODEL_RULES",
    "LAYOUT_RULES",
    "ZERO_RULES",
    "MODELS",
    "maxtext_order",
    "mesh_split",
    "slices",
]


MODELS = {
    name: name
    for name in (
        "llama2-7b",
        "llama2-13b",
        "llama2-70b",
        "llama3-8b",
        "llama3-70b",
        "llama3.1-8b",
        "llama3.1-70b",
        "llama3.1-405b",
        "mistral-7b",
        "gpt3-175b",
        "mixtral-8x7b",
        "mixtral-8x22b",
        "qwen3-30b-a3b",
        "qwen3-235b-a22b",
        "gpt-oss-120b",
    )
} | {"deepseek-v3": "deepseek3-671b"}
"""paraplan presets -> MaxText ``model_name`` configs of the same shape (MaxText @e591f30
configs/models, the sources of docs/data/models.json)."""


def maxtext_order(plan: Plan) -> tuple[Axis, ...]:
    """MaxText's innermost-first order for the plan's dp flavour (data or fsdp)."""
    if plan.zero == 3:
        return (Axis.TP, Axis.CP, Axis.DP, Axis.PP)
    return (Axis.TP, Axis.CP, Axis.PP, Axis.DP)


def mesh_split(plan: Plan, devices_per_node: int, num_nodes: int) -> dict[Axis | str, tuple[int, int]]:
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
            raise ValueError(
                f"{getattr(axis, 'value', axis)}={degree} after {inner} inner ranks "
                f"straddles the {devices_per_node}-device node boundary unevenly"
            )
        split[axis] = (ici, degree // ici)
        inner *= degree
    ici_product = prod(i for i, _ in split.values())
    if ici_product != devices_per_node or prod(d for _, d in split.values()) != num_nodes:
        raise ValueError(
            f"ICI degrees multiply to {ici_product}, not the {devices_per_node} devices per node"
        )
    return split


# --------------------------------------------------------------------------- rules


def check_zero(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """ZeRO-1 = shard_optimizer_over_data; ZeRO-3 = fsdp axis; nothing shards gradients only."""
    p = draft.plan
    if p.zero != 2:
        return None
    return Refusal(
        "plan.zero=2: MaxText shards optimizer state only (shard_optimizer_over_data, "
        "ZeRO-1) or everything (fsdp axis, ZeRO-3)",
        repair("zero -> 1", draft, replace(p, zero=1)) + repair("zero -> 3", draft, replace(p, zero=3)),
    )


def check_uniform_stages(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """stages x repeats x num_layers_per_pipeline_stage == layers: every stage alike."""
    p = draft.plan
    if len(set(p.layers_per_stage)) == 1 and p.layers_per_stage[0] % p.vp == 0:
        return None
    layers = sum(p.layers_per_stage)
    fixes: tuple[Fix, ...] = ()
    if layers % p.pp == 0:
        even = (layers // p.pp,) * p.pp
        vp = p.vp if (layers // p.pp) % p.vp == 0 else 1
        fixes = repair(f"layers_per_stage -> {list(even)}", draft, replace(p, layers_per_stage=even, vp=vp))
    return Refusal(
        f"layers_per_stage={list(p.layers_per_stage)}: MaxText pipelines need "
        "stages x repeats x num_layers_per_pipeline_stage == layers, so every stage "
        "holds the same number of layers, a multiple of the repeats (vp)",
        fixes,
    )


def check_pipeline_micro_batches(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """num_pipeline_microbatches % number of stages == 0."""
    p, gb = draft.plan, ctx.job.global_batch
    if p.pp == 1:
        return None
    n = gb // (p.micro_batch * p.dp)
    if n % p.pp == 0:
        return None
    return Refusal(
        f"num_pipeline_microbatches={n} must be a multiple of the pp={p.pp} stages",
        micro_batch_repairs(draft, gb, lambda count: count % p.pp == 0),
    )


check_uniform_recompute = uniform_recompute_rule("remat_policy applies to every layer")


def check_rank_order(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """The plan's order must be mesh_axes' order (tensor, context, fsdp|stage, stage|data)."""
    order = maxtext_order(draft.plan)
    if order_matches(draft.plan, order):
        return None
    name = "-".join(a.value for a in order)
    return Refusal(
        f"plan.order={'-'.join(a.value for a in draft.plan.order)}: MaxText's "
        f"mesh_axes place ranks as {name} (innermost first)",
        order_fixes(draft, [(name, order)]),
    )


def slices(ctx: RuleContext) -> tuple[int, int, str]:
    """(devices per slice, slices, what a slice is): a TPU slice on TPU clusters, else a node."""
    c = ctx.cluster
    if c.torus is not None:
        return c.torus.slice_chips, c.torus.num_slices, f"{c.name} slice"
    return c.devices_per_node, c.num_nodes, "node"


def check_node_boundary(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """ICI product == devices per slice and DCN product == slices (mesh creation)."""
    per_slice, num, what = slices(ctx)
    try:
        mesh_split(draft.plan, per_slice, num)
    except ValueError as e:
        return Refusal(
            f"the mesh cannot be cut into ici (inside a {per_slice}-device {what}) and "
            f"dcn (across {num} of them) parts: {e}"
        )
    return None


def check_fp8_accumulation(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """MaxText: "FP8 quantization is not compatible with gradient accumulation"."""
    p = draft.plan
    accumulation = 1 if p.pp > 1 else ctx.job.global_batch // (p.micro_batch * p.dp)
    if draft.precision is not Precision.FP8 or accumulation == 1:
        return None
    whole = ctx.job.global_batch // p.dp
    fixes = (
        repair(f"micro_batch -> {whole} (no accumulation)", draft, replace(p, micro_batch=whole))
        if whole >= 1
        else ()
    )  # a draft with dp above the global batch (a layout the filter probes) has no such repair
    fixes += (Fix("precision -> bf16", replace(draft, precision=Precision.BF16)),)
    return Refusal(
        f"precision fp8 with gradient_accumulation_steps={accumulation}: MaxText "
        'refuses it ("FP8 quantization is not compatible with gradient '
        'accumulation"); run one micro-batch per step or bf16',
        fixes,
    )


def check_expert_axis(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """The expert mesh axis is innermost: it holds the plan's EP group only when tp = cp = 1
    and dp is the innermost remaining axis (pp = 1 or fsdp)."""
    p = draft.plan
    if p.ep == 1 or (p.tp == 1 and p.cp == 1 and (p.pp == 1 or p.zero == 3)):
        return None
    return Refusal(
        f"plan.ep={p.ep}: MaxText's expert axis is innermost in mesh_axes, inside "
        f"tensor (tp={p.tp}), context (cp={p.cp}) and stage (pp={p.pp}, unless dp is "
        "the fsdp axis), so it cannot hold the plan's expert-parallel group",
        repair("ep -> 1", draft, replace(p, ep=1)),
    )


def check_model_keys(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """A model without a MaxText model_name must be expressible in the shape keys written here:
    no latent attention, no interleaved dense/MoE layers, shared experts of the expert width."""
    s = ctx.spec
    if ctx.model_preset in MODELS:
        return None
    odd = [
        what
        for what, on in (
            ("multi-head latent attention", s.is_mla),
            *((what, True) for what in layer_kinds(s).values()),
            ("an MoE layer pattern", bool(s.moe_pattern)),
            (f"moe_layer_freq={s.moe_layer_freq}", s.moe_layer_freq > 1),
            (
                "shared experts of another width",
                s.shared_ffn_hidden and s.shared_ffn_hidden != s.num_shared_experts * s.moe_ffn_hidden,
            ),
        )
        if on
    ]
    if not odd:
        return None
    return Refusal(
        f"model {s.name}: {', '.join(odd)} has no key in this export (use a MaxText model config that has it)"
    )


# MaxText shards expert weights over the tensor axis like the dense MLP: expert TP = tp
check_expert_tp = check_expert_tp_is_tp("MaxText has no separate expert tensor-parallel degree")


check_recompute_layers = partial_recompute_rule(
    "MaxText's remat_policy applies to every layer of the scanned decoder; no number of layers"
)

MOE_STATE_RULES = state_rules("maxtext")
"""plan.moe_dispatcher, plan.moe_overlap, plan.cuda_graphs, job.moe_routing (rules/moe_state.py)."""

check_recompute_modules = megatron_recompute_modules_rule("maxtext")
"""job.recompute_modules: Megatron-only (rules/checks.py)."""
check_offload_modules = megatron_offload_modules_rule("maxtext")
"""job.offload_modules: Megatron-only (rules/checks.py)."""
check_loss_chunks = loss_chunks_rule("maxtext", "is exported with no chunked loss by paraplan")
"""job.loss_chunks: torchtitan only (rules/checks.py)."""

check_pp_schedule = schedule_refusal_rule("maxtext")
"""plan.pp_schedule: the schedules maxtext runs (rules/pp_schedule.py)."""

check_moe_fusion = fusion_rule(
    "maxtext",
    "is exported with no router or permute fusion setting by paraplan",
)
"""job.moe_router_fusion / moe_permute_fusion: megatron and nemo only (rules/moe_fusion.py)."""

RULES = (
    check_moe_fusion,
    check_recompute_modules,
    check_offload_modules,
    check_loss_chunks,
    check_allocator,
    check_dense_model,
    check_expert_tp,
    check_model_keys,
    check_zero,
    check_uniform_stages,
    check_pipeline_micro_batches,
    check_uniform_recompute,
    check_recompute_layers,
    check_rank_order,
    check_expert_axis,
    check_node_boundary,
    check_fp8_accumulation,
    *MOE_STATE_RULES,
    check_pp_schedule,
)

SEARCH = SearchLimits(even_stages=True)
"""solver.target=maxtext: num_layers_per_pipeline_stage: every stage alike; one remat_policy."""
MODEL_RULES = (
    check_moe_fusion,
    check_recompute_modules,
    check_offload_modules,
    check_loss_chunks,
    check_allocator,
    check_model_keys,
    MOE_STATE_RULES[3],
)  # + moe_routing
"""The RULES that read only the model and job (solver.target checks them once, first)."""
LAYOUT_RULES = (check_zero, check_rank_order, check_node_boundary, check_expert_axis)
"""The RULES that read the ZeRO stage or the rank order, which the solver picks per layout; the
others give one verdict for a whole layout family (solver.target checks those once per family)."""
ZERO_RULES = (check_zero, check_expert_axis)
"""The LAYOUT_RULES that read the ZeRO stage but neither the rank order nor the slice shape: one
verdict for every placement of a family with its ZeRO stage (rules/filter.py asks them once per
such family, and the solver drops a family they refuse before bounding it)."""
