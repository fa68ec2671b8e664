"""Where each framework multiplies the routed copies by the router's probabilities
(``job.moe_probs_applied``; what it costs: cost/ep.py ``routed_output_kept_elems``), how ``auto``
resolves, and the rules that refuse a setting a framework does not run.

``PROBS_APPLIED`` is the one table. Sources read (the installed wheels):

- megatron-core 0.16.1 and 0.19.2 ``transformer/moe/experts.py``: the grouped MLP's activation
  takes the probabilities ("Activation and post-multiply probs": ``weighted_bias_swiglu_impl``,
  ``activation_func_with_probs``) and every dispatcher's combine calls ``moe_utils.unpermute``
  without ``probs`` (token_dispatcher.py): ``activation``. Its only other option,
  ``--moe-apply-probs-on-input``, multiplies the expert's input and needs top-1; paraplan writes
  no flag for either. Megatron-Bridge / NeMo build the same modules.
- torchtitan 0.3.0 ``models/common/token_dispatcher.py``: every dispatcher's ``combine`` computes
  ``routed_output.to(float32) * topk_scores_experts_sorted``: ``combine``.
- DeepSpeed 0.19.8 ``moe/sharded_moe.py`` ``_sparse_decode``: ``routed * gates`` over the gathered
  expert output: ``combine``.
- MaxText: not installed here, not read: ``combine``, the heavier, kept as the assumption.
  paraplan's PyTorch script: its reference model is dense, and a MoE block written in plain
  torch weights the expert outputs at the combine: ``combine``.

``auto`` resolves by ``solver.target``; with no framework named (the runnable default, or
``any``) it resolves to ``combine``: the routed output is then counted, so no plan fits that a
framework which would run it cannot hold (a Megatron run of it holds less than predicted).
"""

from __future__ import annotations

from paraplan.cost import MoEProbs
from paraplan.rules.base import Draft, Refusal, Rule, RuleContext

__all__ = [
    "PROBS_APPLIED",
    "AUTO",
    "resolve_moe_probs",
    "check_probs_in_activation",
    "check_probs_at_combine",
    "probs_rule",
]

AUTO = "auto"
"""The scenario's ``job.moe_probs_applied`` default: resolved by the framework (module docstring)."""

PROBS_APPLIED: dict[str, MoEProbs] = {
    "megatron": MoEProbs.ACTIVATION,
    "nemo": MoEProbs.ACTIVATION,
    "deepspeed": MoEProbs.COMBINE,
    "torchtitan": MoEProbs.COMBINE,
    "maxtext": MoEProbs.COMBINE,
    "torch": MoEProbs.COMBINE,
}
"""Where each framework (rules/frameworks.py FRAMEWORKS) applies the router's probabilities."""


def resolve_moe_probs(given: str, target: str | None) -> MoEProbs:
    """The cost model's value of the scenario's ``job.moe_probs_applied`` (``given``): itself when
    set; ``auto``: the framework of ``solver.target``, else (none, or ``any``) ``combine``."""
    if given != AUTO:
        return MoEProbs(given)
    return PROBS_APPLIED.get(target or "", MoEProbs.COMBINE)


def _runners(value: MoEProbs) -> str:
    return ", ".join(name for name, v in PROBS_APPLIED.items() if v is value)


def check_probs_at_combine(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """A framework that multiplies at the combine keeps the routed output: it refuses a MoE job
    costed without it (``activation``, set or resolved for another target), whose memory it
    would exceed."""
    if not ctx.spec.is_moe or ctx.job.moe_probs_applied is not MoEProbs.ACTIVATION:
        return None
    how = "" if ctx.job.is_moe_probs_given else " (auto, resolved for solver.target)"
    return Refusal(
        f"job.moe_probs_applied=activation{how}: this framework multiplies the routed output by the "
        "router's probabilities at the combine and keeps that output for the backward, which the "
        f"plan was not costed with (activation is run by: {_runners(MoEProbs.ACTIVATION)}); "
        "use moe_probs_applied: combine or auto"
    )


def check_probs_in_activation(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """A framework that applies the probabilities in the experts' activation refuses a MoE job
    that sets ``combine`` (``auto`` resolving to it, the unnamed framework's bound, passes: it
    over-counts the memory this framework holds)."""
    job = ctx.job
    if not ctx.spec.is_moe or job.moe_probs_applied is not MoEProbs.COMBINE or not job.is_moe_probs_given:
        return None
    return Refusal(
        "job.moe_probs_applied=combine: megatron-core applies the router's probabilities inside the "
        "experts' activation (experts.py weighted_bias_swiglu_impl) and has no setting to multiply at "
        f"the combine (combine is run by: {_runners(MoEProbs.COMBINE)}); use activation or auto"
    )


def probs_rule(name: str) -> Rule:
    """Framework ``name``'s rule for the setting: one of the two above, shared by the frameworks
    that apply the probabilities alike."""
    if PROBS_APPLIED[name] is MoEProbs.ACTIVATION:  # name known: frameworks.launch_rules asks
        return check_probs_in_activation
    return check_probs_at_combine
