"""NeMo 2 / Megatron-Bridge 0.6.2's rules: both build megatron-core configs, so Megatron's rules
apply unchanged (paraplan.rules.megatron), plus Bridge's own: ``dist.use_tp_pp_dp_mapping``
cannot be combined with Megatron-FSDP (ConfigContainer validation)."""

from __future__ import annotations

from dataclasses import replace

from paraplan.rules import megatron as mg
from paraplan.rules.base import Draft, Refusal, RuleContext, repair

__all__ = ["RULES", "SEARCH", "MODEL_RULES"]


def check_bridge_mapping_with_fsdp(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """Bridge: use_tp_pp_dp_mapping is not supported with Megatron-FSDP (ConfigContainer)."""
    p = draft.plan
    if p.zero < 2 or mg.megatron_order(p) != "tp-cp-ep-pp-dp":
        return None
    return Refusal(
        f"Megatron-Bridge rejects dist.use_tp_pp_dp_mapping with Megatron-FSDP (plan.zero={p.zero})",
        repair("zero -> 1", draft, replace(p, zero=1)),
    )


RULES = (*mg.RULES, check_bridge_mapping_with_fsdp)
SEARCH = mg.SEARCH
MODEL_RULES = mg.MODEL_RULES
"""The RULES that read only the model and job (solver.target checks them once, first)."""
