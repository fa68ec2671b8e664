"""Rules several frameworks share, each made for one framework by its note."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from paraplan.cost import Axis, Recompute
from paraplan.cost.recompute_layers import uniform_recompute_layers
from paraplan.graph import ModelSpec
from paraplan.rules.base import Draft, Refusal, Rule, RuleContext, order_fixes, recompute_fixes, repair
from paraplan.rules.plans import order_matches, regroup, uniform_recompute
from paraplan.rules.validity import cp_splits_sequence, ep_splits_experts

__all__ = [
    "dense_model_rule",
    "check_dense_model",
    "check_no_expert_parallel",
    "check_expert_tp_is_tp",
    "uniform_recompute_rule",
    "context_split_rule",
    "rank_order_rule",
    "partial_recompute_rule",
    "transformer_layers_rule",
    "megatron_recompute_modules_rule",
    "megatron_offload_modules_rule",
    "loss_chunks_rule",
]


def dense_model_rule(rule_text: str) -> Rule:
    """A rule refusing expert parallelism the model cannot take (validity.ep_splits_experts);
    ``rule_text`` names the rule in the framework's words."""

    def check_dense_model(ctx: RuleContext, draft: Draft) -> Refusal | None:
        p, s = draft.plan, ctx.spec
        if ep_splits_experts(s, p.ep):
            return None
        what = f"{s.name} is dense" if not s.is_moe else f"{s.name} has {s.num_experts} experts"
        return Refusal(
            f"plan.ep={p.ep} needs a mixture-of-experts model ({rule_text}) but {what}",
            repair("ep -> 1", draft, replace(p, ep=1)),
        )

    return check_dense_model


check_dense_model = dense_model_rule("num_experts % ep == 0")
"""Expert parallelism needs experts, and num_experts % ep == 0."""


def check_no_expert_parallel(framework_note: str) -> Rule:
    """A rule refusing ep > 1 for targets whose config cannot express expert parallelism."""

    def check_expert_parallel_expressible(ctx: RuleContext, draft: Draft) -> Refusal | None:
        if draft.plan.ep == 1:
            return None
        return Refusal(
            f"plan.ep={draft.plan.ep}: {framework_note}", repair("ep -> 1", draft, replace(draft.plan, ep=1))
        )

    return check_expert_parallel_expressible


def check_expert_tp_is_tp(framework_note: str) -> Rule:
    """A rule refusing etp != tp for targets with no separate expert tensor-parallel degree."""

    def check_expert_tp(ctx: RuleContext, draft: Draft) -> Refusal | None:
        p = draft.plan
        if p.expert_tp == p.tp:
            return None
        return Refusal(
            f"plan.etp={p.etp} with tp={p.tp}: {framework_note}",
            repair(f"etp -> {p.tp}", draft, replace(p, etp=p.tp)),
        )

    return check_expert_tp


def uniform_recompute_rule(framework_note: str) -> Rule:
    """A rule refusing per-stage recompute for targets whose recompute setting covers every
    stage alike (``framework_note`` says which setting)."""

    def check_recompute_uniform(ctx: RuleContext, draft: Draft) -> Refusal | None:
        if uniform_recompute(draft.plan) is not None:
            return None
        modes = [r.value for r in draft.plan.recompute]
        return Refusal(f"recompute differs per stage ({modes}); {framework_note}", recompute_fixes(draft))

    return check_recompute_uniform


def context_split_rule(seq_len_field: str, balancer: str) -> Rule:
    """A rule refusing a sequence the context-parallel load balancer cannot cut into 2 x cp
    chunks (validity.cp_splits_sequence); ``seq_len_field`` is the framework's name of the
    sequence length, ``balancer`` its name of the balancer."""

    def check_context_split(ctx: RuleContext, draft: Draft) -> Refusal | None:
        cp, seq = draft.plan.cp, ctx.job.seq_len
        if cp_splits_sequence(ctx.job, cp):
            return None
        return Refusal(
            f"{seq_len_field}={seq} must be divisible by 2*cp = {2 * cp} ({balancer})",
            repair("cp -> 1, dp absorbs it", draft, regroup(draft.plan, cp=1)),
        )

    return check_context_split


def rank_order_rule(order: Sequence[Axis], mesh_note: str) -> Rule:
    """A rule refusing a plan whose ranks the framework's one rank ``order`` (innermost first)
    does not place; ``mesh_note`` says how the framework builds its mesh."""
    name = "-".join(a.value for a in order)

    def check_rank_order(ctx: RuleContext, draft: Draft) -> Refusal | None:
        if order_matches(draft.plan, order):
            return None
        return Refusal(
            f"plan.order={'-'.join(a.value for a in draft.plan.order)}: {mesh_note}",
            order_fixes(draft, [(name, order)]),
        )

    return check_rank_order


LAYER_KINDS = ("hybrid", "vision", "mtp", "window", "chunked", "latent_moe")


def partial_recompute_rule(framework_note: str, one_n: bool = False) -> Rule:
    """A rule on partial (block) recompute (Plan.recompute_layers, cost/recompute_layers.py):
    ``one_n``: the framework takes one N for every rank (Megatron's --recompute-num-layers), so
    the plan must have one (uniform_recompute_layers); else it has none at all. The repair is
    full recompute of every layer (the nearest plan that fits wherever this one does)."""

    def check_partial_recompute(ctx: RuleContext, draft: Draft) -> Refusal | None:
        p = draft.plan
        if not p.recompute_layers or (one_n and uniform_recompute_layers(p) is not None):
            return None
        return Refusal(
            f"plan.recompute_layers={list(p.recompute_layers)}: {framework_note}",
            repair(
                "recompute -> full on every layer",
                draft,
                p.with_recompute(Recompute.FULL),
            ),
        )

    return check_partial_recompute


"""Layer kinds beyond attention + MLP/MoE blocks (graph/layers.py) an export may or may not build."""


def layer_kinds(spec: ModelSpec) -> dict[str, str]:
    """The model's layer kinds beyond attention + MLP/MoE blocks, each with how to say it."""
    found = {
        "hybrid": (bool(spec.layer_pattern), "a hybrid layer pattern (Mamba/attention/MLP layers)"),
        "vision": (spec.vision.num_layers > 0, "a vision encoder"),
        "mtp": (spec.mtp_layers > 0, f"{spec.mtp_layers} MTP layers"),
        "window": (spec.sliding_window > 0, f"sliding-window attention (window {spec.sliding_window})"),
        "chunked": (spec.attention_chunk > 0, f"chunked local attention (chunk {spec.attention_chunk})"),
        "latent_moe": (spec.moe_latent_dim > 0, f"LatentMoE (experts at latent width {spec.moe_latent_dim})"),
    }
    return {kind: what for kind, (on, what) in found.items() if on}


def layer_kinds_rule(builder: str, builds: frozenset[str]) -> Rule:
    """A rule refusing a model with a layer kind (LAYER_KINDS) the export ``builder`` does not
    build or express: the framework would train another model than the one planned."""

    def check_layer_kinds_built(ctx: RuleContext, draft: Draft) -> Refusal | None:
        missing = {kind: what for kind, what in layer_kinds(ctx.spec).items() if kind not in builds}
        if not missing:
            return None
        fix = " (plan the model with mtp_layers: 0 to train it without)" if "mtp" in missing else ""
        return Refusal(
            f"model {ctx.spec.name} has {', '.join(missing.values())}, which {builder} does not build{fix}"
        )

    return check_layer_kinds_built


def transformer_layers_rule(builder: str) -> Rule:
    """``layer_kinds_rule`` for a framework whose model code (``builder``) has transformer blocks
    only: it refuses a hybrid layer pattern, MTP layers and LatentMoE (windows and chunks are its
    configs')."""
    return layer_kinds_rule(builder, frozenset(LAYER_KINDS) - {"hybrid", "mtp", "latent_moe"})


def _megatron_modules_rule(field: str, flags: str, framework: str, hint: str) -> Rule:
    """A rule refusing the job's module list ``field`` (Megatron's ``flags``) on ``framework``,
    which has no such setting; ``hint``: what to do instead."""

    def check_modules(ctx: RuleContext, draft: Draft) -> Refusal | None:
        modules = getattr(ctx.job, field)
        if not modules:
            return None
        shown = ", ".join(sorted(m.value for m in modules))
        return Refusal(
            f"job.{field}=[{shown}] is Megatron's {flags}; {framework} has no such setting "
            f"(run by: megatron, nemo); {hint}"
        )

    return check_modules


def megatron_recompute_modules_rule(framework: str) -> Rule:
    """A rule refusing ``job.recompute_modules`` (Megatron's ``--recompute-modules``,
    cost/recompute_modules.py) on a framework that has no such setting: its selective recompute
    is its own policy (job.selective_policy)."""
    return _megatron_modules_rule(
        "recompute_modules", "--recompute-modules", framework, "leave it empty for the framework's own policy"
    )


def megatron_offload_modules_rule(framework: str) -> Rule:
    """A rule refusing ``job.offload_modules`` (Megatron's ``--fine-grained-activation-offloading
    --offload-modules``, cost/offload.py) on a framework that has no such setting."""
    return _megatron_modules_rule(
        "offload_modules",
        "--fine-grained-activation-offloading --offload-modules",
        framework,
        "leave it empty",
    )


def loss_chunks_rule(framework: str, why: str = "has no chunked loss") -> Rule:
    """A rule refusing ``job.loss_chunks`` above 1 (the loss over sequence chunks, cost/memory.py
    chunked_loss_bytes) on a framework with no chunked loss: Megatron-Core 0.19.2 and NeMo /
    Megatron-Bridge fuse the cross entropy (``--cross-entropy-loss-fusion``) without chunking it;
    DeepSpeed's config and paraplan's torch script have no such setting; paraplan's MaxText export
    writes none (``why`` says so). torchtitan 0.3.0 exports it (``--loss.num-chunks``)."""

    def check_loss_chunks(ctx: RuleContext, draft: Draft) -> Refusal | None:
        if ctx.job.loss_chunks <= 1:
            return None
        return Refusal(
            f"job.loss_chunks={ctx.job.loss_chunks}: {framework} {why} "
            "(run by: torchtitan, ChunkedLossWrapper --loss.num-chunks); use loss_chunks: 1"
        )

    return check_loss_chunks
