"""NeMo 2 / Megatron-Bridge 0.6.2's rules: both build megatron-core configs, so Megatron's rules
apply unchanged (paraplan.rules.megatron), plus Bridge's own: ``dist.use_tp_pp_dp_mapping``
cannot be combined with Megatron-FSDP (ConfigContainer validation), and hybrid models have no
virtual pipeline stages (HybridModelProvider)."""

from __future__ import annotations

from dataclasses import replace

from paraplan.rules import megatron as mg
from paraplan.rules.base import Draft, Refusal, RuleContext, repair

__all__ = ["RULES", "SEARCH", "MODEL_RULES", "LAYOUT_RULES", "ZERO_RULES"]


def check_bridge_mapping_with_fsdp(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """Bridge: use_tp_pp_dp_mapping is not supported with Megatron-FSDP (ConfigContainer)."""
    p = draft.plan
    if p.zero < 2 or mg.megatron_order(p) != "tp-cp-ep-pp-dp":
        return None
    return Refusal(
        f"Megatron-Bridge rejects dist.use_tp_pp_dp_mapping with Megatron-FSDP (plan.zero={p.zero})",
        repair("zero -> 1", draft, replace(p, zero=1)),
    )


def check_hybrid_without_interleaving(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """Bridge 0.6.2's HybridModelProvider.provide asserts no virtual pipeline stages."""
    p = draft.plan
    if p.vp == 1 or mg.hybrid_pattern(ctx.spec) is None:
        return None
    return Refusal(
        f"plan.vp={p.vp}: Megatron-Bridge builds hybrid models without virtual pipeline stages "
        "(HybridModelProvider.provide)",
        repair("vp -> 1", draft, replace(p, vp=1, layers_per_chunk=())),
    )


RULES = (*mg.RULES, check_bridge_mapping_with_fsdp, check_hybrid_without_interleaving)
SEARCH = mg.SEARCH
MODEL_RULES = mg.MODEL_RULES
"""The RULES that read only the model and job (solver.target checks them once, first)."""
LAYOUT_RULES = (*mg.LAYOUT_RULES, check_bridge_mapping_with_fsdp)
"""The RULES that read the ZeRO stage or the rank order, which the solver picks per layout; the
others give one verdict for a whole layout family (solver.target checks those once per family)."""
ZERO_RULES = mg.ZERO_RULES
"""The LAYOUT_RULES that read the ZeRO stage but neither the rank order nor the slice shape: one
verdict for every placement of a family with its ZeRO stage (rules/filter.py asks them once per
such family, and the solver drops a family they refuse before bounding it)."""
