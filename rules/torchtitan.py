"""torchtitan 0.3.0's rules: what a plan must satisfy to run as a ``torchtitan.train`` launch,
and the framework facts both the rules and the exporter (paraplan/export/torchtitan.py) need:
the config functions that build each model (``CONFIGS``) and the mesh order."""

from __future__ import annotations

from dataclasses import replace

from paraplan.cost import Axis, CPComm, Precision
from paraplan.cost.pp_schedule import PPSchedule, resolved_schedule
from paraplan.graph import ModelSpec, preset
from paraplan.graph.spec import Rope
from paraplan.rules.base import (
    Draft,
    Fix,
    Refusal,
    RuleContext,
    SearchLimits,
    micro_batch_repairs,
    repair,
)
from paraplan.rules.checks import (
    check_dense_model,
    check_expert_tp_is_tp,
    context_split_rule,
    megatron_offload_modules_rule,
    megatron_recompute_modules_rule,
    partial_recompute_rule,
    rank_order_rule,
    transformer_layers_rule,
    uniform_recompute_rule,
)
from paraplan.rules.moe_fusion import fusion_rule
from paraplan.rules.moe_state import TORCHTITAN_STATE_RULES, routing_rule
from paraplan.rules.plans import regroup
from paraplan.rules.pp_schedule import schedule_refusal_rule
from paraplan.rules.validity import batch_splits

__all__ = [
    "RULES",
    "SEARCH",
    "MODEL_RULES",
    "LAYOUT_RULES",
    "ZERO_RULES",
    "CONFIGS",
    "FLOAT8_CONFIGS",
    "ORDER",
    "PARAM_DTYPES",
    "torchtitan_config",
]


PARAM_DTYPES = {Precision.BF16: "bfloat16", Precision.FP8: "bfloat16"}
"""job.precision -> training.mixed_precision_param (torchtitan takes bfloat16 or float32)."""
CONFIGS: dict[str, tuple[str, str]] = {
    "llama3.1-8b": ("llama3", "llama3_8b"),
    "llama3.1-70b": ("llama3", "llama3_70b"),
    "llama3.1-405b": ("llama3", "llama3_405b"),
    "qwen3-32b": ("qwen3", "qwen3_32b"),
    "qwen3-30b-a3b": ("qwen3", "qwen3_30b_a3b"),
    "deepseek-v3": ("deepseek_v3", "deepseek_v3_671b"),
    "gpt-oss-120b": ("gpt_oss", "gpt_oss_120b"),
}
"""paraplan preset -> torchtitan 0.3.0 (module, config_registry function) building the same model
(tests/export/test_torchtitan_oracle.py builds each and compares). torchtitan takes the model
shape only from such a function: a model equal to none of these presets is refused. The llama3
functions build Llama 3.1 (RoPE scaling x8), so Llama 3 without scaling is refused too."""
FLOAT8_CONFIGS = {"llama3_405b"}
"""Config functions that convert linear layers to float8 (Float8LinearConverter in
model_spec; no command-line option removes it): only an fp8 plan may use them."""

ORDER = (Axis.TP, Axis.CP, Axis.DP, Axis.PP)
"""Mesh [pp, dp_replicate, dp_shard, cp, tp], row-major: tp varies fastest."""


# --------------------------------------------------------------------------- rules


def _num_micro_batches(ctx: RuleContext, draft: Draft) -> int:
    p = draft.plan
    return ctx.job.global_batch // (p.micro_batch * p.dp)


def check_batch(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """global_batch_size % (local_batch_size x dp) == 0 (trainer)."""
    p, gb = draft.plan, ctx.job.global_batch
    if batch_splits(ctx.job, p):
        return None
    return Refusal(
        f"training.global_batch_size={gb} must be divisible by local batch x dp = {p.micro_batch}*{p.dp}",
        micro_batch_repairs(draft, gb),
    )


def check_schedule(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """torch 2.13: 1F1B needs n >= stages; Interleaved1F1B and InterleavedZeroBubble need
    n % max(1, n // pp) == 0 (DualPipeV's n >= 2 pp is cost.validity's check_plan)."""
    p = draft.plan
    if p.pp == 1:
        return None
    n = _num_micro_batches(ctx, draft)
    if p.vp == 1 and n < p.pp:
        return Refusal(
            f"Schedule1F1B needs at least pp={p.pp} micro-batches per step; the plan has {n}",
            repair("pp -> 1, dp absorbs it", draft, regroup(p, pp=1)),
        )
    looped = resolved_schedule(p.pp_schedule, p.vp) != PPSchedule.DUALPIPEV  # DualPipeV: n >= 2 pp
    if p.vp > 1 and looped and n % max(1, n // p.pp):
        name = "InterleavedZeroBubble" if p.pp_schedule == PPSchedule.ZB1P else "Interleaved1F1B"
        return Refusal(
            f"Schedule{name} needs the {n} micro-batches to satisfy n % max(1, n // pp) == 0 with pp={p.pp}",
            repair("vp -> 1", draft, replace(p, vp=1)),
        )
    return None


check_uniform_recompute = uniform_recompute_rule(
    "the activation-checkpoint subcommand applies to every stage"
)


check_context_split = context_split_rule("training.seq_len", "head-tail load balancer")
"""The head-tail load balancer cuts the sequence into 2 x cp chunks."""


def check_precision(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """training.mixed_precision_param accepts bfloat16 and float32 only."""
    if draft.precision in PARAM_DTYPES:
        return None
    return Refusal(
        f"job.precision={draft.precision.value}: training.mixed_precision_param takes "
        "bfloat16 or float32 only",
        (Fix("precision -> bf16", replace(draft, precision=Precision.BF16)),),
    )


check_rank_order = rank_order_rule(
    ORDER, "torchtitan's mesh [pp, dp_replicate, dp_shard, cp, tp] places tp innermost, then cp, dp, pp"
)
"""Mesh [pp, dp_replicate, dp_shard, cp, tp]: tp-cp-dp-pp innermost first."""


def check_expert_mesh(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """dp_shard x cp x tp == efsdp x ep with ep innermost: ep ranks inside dp_shard x cp, tp = 1."""
    p = draft.plan
    shard = p.dp if p.zero >= 1 else 1
    if p.ep == 1 or (p.tp == 1 and (shard * p.cp) % p.ep == 0):
        return None
    return Refusal(
        f"plan.ep={p.ep}: torchtitan carves ep out of dp_shard x cp x tp = {shard}*{p.cp}*{p.tp} "
        "innermost first, so the expert-parallel group matches the plan's only with tp=1 and ep "
        "dividing dp_shard x cp",
        repair("tp -> 1, dp absorbs it", draft, regroup(p, tp=1) if p.tp > 1 else None)
        + repair("zero -> 1", draft, replace(p, zero=1) if p.zero == 0 else None)
        + repair("ep -> 1", draft, replace(p, ep=1)),
    )


def check_cp_comm(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """torchtitan 0.3 has no option selecting the K/V exchange (0.2.x had
    context_parallel_rotate_method); only the ring (p2p) plan is exported."""
    p = draft.plan
    if p.cp == 1 or p.cp_comm is CPComm.P2P:
        return None
    return Refusal(
        f"plan.cp_comm={p.cp_comm.value}: torchtitan 0.3 has no option to select the "
        "context-parallel K/V exchange",
        repair("cp_comm -> p2p", draft, replace(p, cp_comm=CPComm.P2P)),
    )


# torchtitan 0.3 dropped 0.2.x's expert_tensor_parallel_degree: expert TP must be the default, tp
check_expert_tp = check_expert_tp_is_tp("torchtitan 0.3 has no expert tensor-parallel option")


def torchtitan_config(spec: ModelSpec) -> tuple[str, str] | None:
    """The (module, config function) whose model equals ``spec`` (any name), or None. A model that
    differs only in its RoPE frequency scaling (Llama 3 beside torchtitan's Llama 3.1 configs)
    counts: shapes, parameters and cost are the same, and the export notes the difference."""
    return next(
        (target for name, target in CONFIGS.items() if _same_but_rope_scaling(built(name), spec)), None
    )


def built(name: str) -> ModelSpec:
    """The model torchtitan's config for preset ``name`` builds: the preset without a
    multi-token-prediction module (torchtitan 0.3.0's deepseek_v3 has none)."""
    return replace(preset(name), mtp_layers=0)


def _same_but_rope_scaling(built: ModelSpec, spec: ModelSpec) -> bool:
    """The same model (any name), or one that differs only between no and llama3 RoPE scaling."""
    if replace(built, name="") == replace(spec, name=""):
        return True  # e.g. deepseek-v3, whose config function builds YaRN scaling as the preset

    def unscaled(m: ModelSpec) -> ModelSpec:
        return replace(m, name="", rope=Rope(theta=m.rope.theta, fraction=m.rope.fraction))

    return (
        unscaled(built) == unscaled(spec)
        and built.rope.scaling in ("", "llama3")
        and spec.rope.scaling in ("", "llama3")
    )


check_transformer_layers = transformer_layers_rule("torchtitan 0.3.0's model code (torchtitan/models)")
"""torchtitan's models are transformer blocks only: no Mamba layers, no MTP module."""


def check_model_config(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """torchtitan builds only the models of its config_registry functions (CONFIGS)."""
    if torchtitan_config(ctx.spec) is not None:
        return None
    same_shape = [n for n in CONFIGS if _shape(built(n)) == _shape(ctx.spec)]
    hint = (
        f"; preset {same_shape[0]} has its shape but another architecture (e.g. RoPE "
        "scaling), so torchtitan would train another model"
        if same_shape
        else ""
    )
    return Refusal(
        f"model {ctx.spec.name} is none of the models torchtitan 0.3.0's config "
        f"functions build ({', '.join(CONFIGS)}): the model shape is Python, not a "
        f"command-line option{hint}"
    )


def check_float8_config(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """llama3_405b converts linear layers to float8: only fp8 plans may use it."""
    target = torchtitan_config(ctx.spec)
    if target is None or target[1] not in FLOAT8_CONFIGS or draft.precision is Precision.FP8:
        return None
    return Refusal(
        f"torchtitan's {target[1]} trains in float8 (Float8LinearConverter, which no "
        f"command-line option removes), not job.precision={draft.precision.value}",
        (Fix("precision -> fp8", replace(draft, precision=Precision.FP8)),),
    )


def _shape(spec: ModelSpec) -> tuple[int, ...]:
    return (
        spec.num_layers,
        spec.hidden,
        spec.ffn_hidden,
        spec.num_heads,
        spec.num_kv_heads,
        spec.vocab,
        spec.num_experts,
    )


check_recompute_layers = partial_recompute_rule(
    "torchtitan 0.3 checkpoints every transformer block alike "
    "(torchtitan/distributed/activation_checkpoint.py, apply: every block of model.layers); "
    "no number of layers"
)

check_moe_routing = routing_rule("torchtitan")
"""job.moe_routing: dropless or debug.moe_force_load_balance (rules/moe_state.py)."""

check_recompute_modules = megatron_recompute_modules_rule("torchtitan")
"""job.recompute_modules: Megatron-only (rules/checks.py)."""
check_offload_modules = megatron_offload_modules_rule("torchtitan")
"""job.offload_modules: Megatron-only (rules/checks.py)."""


def check_loss_chunks(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """ChunkedLossWrapper (torchtitan 0.3.0 components/loss.py) cuts each rank's sequence,
    seq_len / cp tokens, into ``num_chunks`` equal parts: ``torch._check(seq_len % num_chunks == 0)``."""
    chunks, local = ctx.job.loss_chunks, ctx.job.seq_len // draft.plan.cp
    if chunks <= 1 or local % chunks == 0:
        return None
    return Refusal(
        f"job.loss_chunks={chunks}: torchtitan's ChunkedLossWrapper cuts each rank's "
        f"job.seq_len / plan.cp = {local:,} tokens into equal chunks (loss.num_chunks must divide it)"
    )


check_pp_schedule = schedule_refusal_rule("torchtitan")
"""plan.pp_schedule: the schedules torchtitan runs (rules/pp_schedule.py)."""

check_moe_fusion = fusion_rule(
    "torchtitan",
    "runs its own PyTorch router and permute (models/common/moe.py TokenChoiceTopKRouter; no "
    "fusion option in torchtitan 0.3.0's config)",
)
"""job.moe_router_fusion / moe_permute_fusion: megatron and nemo only (rules/moe_fusion.py)."""

RULES = (
    check_moe_fusion,
    check_recompute_modules,
    check_offload_modules,
    check_loss_chunks,
    check_transformer_layers,
    check_model_config,
    check_float8_config,
    check_dense_model,
    check_cp_comm,
    check_expert_tp,
    check_batch,
    check_precision,
    check_context_split,
    check_uniform_recompute,
    check_recompute_layers,
    check_schedule,
    check_rank_order,
    check_expert_mesh,
    *TORCHTITAN_STATE_RULES,
    check_moe_routing,
    check_pp_schedule,
)

SEARCH = SearchLimits()
"""solver.target=torchtitan: module names per stage express any split; one activation-checkpoint setting."""
MODEL_RULES = (
    check_moe_fusion,
    check_recompute_modules,
    check_offload_modules,
    check_transformer_layers,
    check_model_config,
    check_float8_config,
    check_precision,
    check_moe_routing,
)
"""The RULES that read only the model and job (solver.target checks them once, first)."""
LAYOUT_RULES = (check_rank_order, check_expert_mesh)
"""The RULES that read the ZeRO stage or the rank order, which the solver picks per layout; the
others give one verdict for a whole layout family (solver.target checks those once per family)."""
ZERO_RULES = (check_expert_mesh,)
"""The LAYOUT_RULES that read the ZeRO stage but neither the rank order nor the slice shape: one
verdict for every placement of a family with its ZeRO stage (rules/filter.py asks them once per
such family, and the solver drops a family they refuse before bounding it)."""
