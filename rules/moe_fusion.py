"""The MoE router and permute fusion (``job.moe_router_fusion``, ``job.moe_permute_fusion``; cost:
cost/host.py ``fusion_launch_s``): which framework runs the fused kernels, and the rule that
refuses them by name elsewhere.

Read in the installed releases: megatron-core 0.19.2 ``TransformerConfig.moe_router_fusion`` and
``moe_permute_fusion`` (both default False; Megatron-LM's ``--moe-router-fusion`` /
``--moe-permute-fusion``) switch moe_utils.py's ``topk_routing_with_score_function``,
``compute_routing_scores_for_aux_loss``, the aux loss and ``permute`` / ``unpermute`` /
``sort_chunks_by_idxs`` to Transformer Engine's fused kernels (TE >= 2.7 for the router, >= 2.1
for the permute); Megatron-Bridge 0.6.2 builds the same TransformerConfig. The others run their
own router in PyTorch and have no such switch: torchtitan 0.3.0's ``TokenChoiceTopKRouter`` (no
fusion option in its config), DeepSpeed 0.19.8's ``TopKGate`` (model code), and paraplan's MaxText
and PyTorch-script exports write none. So ``false`` (the default) runs everywhere and ``true``
only on megatron and nemo.
"""

from __future__ import annotations

from paraplan.rules.base import Draft, Refusal, Rule, RuleContext

__all__ = ["FUSION_FIELDS", "RUNS_FUSED", "fusion_rule"]

FUSION_FIELDS = ("moe_router_fusion", "moe_permute_fusion")
"""The job fields (cost.Job) of the router and permute fusion."""
RUNS_FUSED = ("megatron", "nemo")
"""The frameworks (rules_of names) that run Transformer Engine's fused router and permute."""


def fusion_rule(framework: str, why: str) -> Rule:
    """A MODEL_RULE refusing ``job.moe_router_fusion`` / ``job.moe_permute_fusion`` true on a MoE
    model for a framework that has no fused router or permute (``why`` says what it runs)."""

    def check_moe_fusion(ctx: RuleContext, draft: Draft) -> Refusal | None:
        on = [f for f in FUSION_FIELDS if getattr(ctx.job, f)]
        if not ctx.spec.is_moe or not on:
            return None
        return Refusal(
            f"job.{on[0]}=true: {framework} {why} (run by: {', '.join(RUNS_FUSED)}; Transformer "
            f"Engine's fused kernels); use {on[0]}: false"
        )

    return check_moe_fusion
