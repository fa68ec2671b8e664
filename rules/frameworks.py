"""The framework registry: which frameworks paraplan plans for, and what each one launches at
all, whatever the plan's degrees: the precisions it has a setting for, whether it runs a
mixed-GPU cluster (cluster.pools) and where it applies a MoE router's probabilities
(rules/moe_probs.py). The MoE software state each one runs is ``moe_state.SUPPORT``
(checked here to name the same frameworks); the per-plan rules are in each framework's module.

``launch_rules(name)`` states these facts as rules, which ``rules_of`` puts first in every
framework's RULES (and, those that read only the job and cluster, its MODEL_RULES): the search's
layout filter (rules/filter.py), ``runs_on`` (paraplan/planning.py) and the exporters' ``enforce``
read them as they read every other rule. The exporters (paraplan/export) render only; they raise
the refusals of ``precision_refusal`` and ``pool_refusal`` before rendering.

Sources: the settings the exporters write (the mapping table of each paraplan/export/<name>.py);
megatron-core names the block-scaled recipes (``--fp8-recipe blockwise|mxfp8``, ``--fp4-recipe
nvfp4``) and Megatron-Bridge 0.6.2 has a mixed-precision recipe for each. A pooled cluster needs a
pipeline whose stages sit on different node types: Megatron builds one process-group layout over
every rank, launched by torchrun with one ``--nproc-per-node``; the others build one device mesh
of one type.
"""

from __future__ import annotations

from paraplan.cost import Precision
from paraplan.hardware import Cluster
from paraplan.rules.base import Draft, Refusal, Rule, RuleContext
from paraplan.rules.moe_probs import PROBS_APPLIED, probs_rule

__all__ = [
    "FRAMEWORKS",
    "EXPORTED_PRECISIONS",
    "BLOCK_SCALED_FRAMEWORKS",
    "POOLED_FRAMEWORKS",
    "runs_precision",
    "precision_refusal",
    "runs_pools",
    "pool_refusal",
    "check_bf16_fp16_fp8",
    "check_one_mesh",
    "check_one_node_size",
    "launch_rules",
]

FRAMEWORKS: tuple[str, ...] = ("megatron", "nemo", "deepspeed", "torchtitan", "maxtext", "torch")
"""The frameworks paraplan plans for and exports to (``solver.target``, ``runs_on`` order), one
rules module each in this package. The one list: schema, CLI, exporters and rules read it."""

EXPORTED_PRECISIONS: frozenset[Precision] = frozenset({Precision.BF16, Precision.FP16, Precision.FP8})
"""Precisions every framework has a setting for."""
BLOCK_SCALED_FRAMEWORKS: tuple[str, ...] = ("megatron", "nemo")
"""Frameworks that also run the block-scaled precisions (fp8_blockwise, mxfp8, nvfp4): megatron-core
names their recipes (--fp8-recipe blockwise|mxfp8, --fp4-format e2m1 --fp4-recipe nvfp4) and
Megatron-Bridge has a mixed-precision recipe for each; the other frameworks' configs have none."""
POOLED_FRAMEWORKS: tuple[str, ...] = ("megatron",)
"""Frameworks that run a plan on a mixed-GPU cluster (cluster.pools): one Megatron job whose
pipeline stages sit on different node types; the others build one mesh of one device type."""


if set(PROBS_APPLIED) != set(FRAMEWORKS):  # a framework added here but not to rules/moe_probs.py
    raise TypeError(f"moe_probs.PROBS_APPLIED must list {FRAMEWORKS}; lists {tuple(PROBS_APPLIED)}")


def _known(name: str) -> None:
    if name not in FRAMEWORKS:
        raise ValueError(f"no framework {name!r}; known: {', '.join(FRAMEWORKS)}")


def runs_precision(name: str, precision: Precision) -> bool:
    """Whether framework ``name`` has a setting for ``precision``."""
    _known(name)
    return precision in EXPORTED_PRECISIONS or name in BLOCK_SCALED_FRAMEWORKS


def precision_refusal(name: str, precision: Precision) -> str | None:
    """Why ``name`` cannot run ``precision`` (None: it can)."""
    if runs_precision(name, precision):
        return None
    return (
        f"job.precision={precision.value} is modelled but {name} has no setting for it; "
        f"export to {' or '.join(BLOCK_SCALED_FRAMEWORKS)}, or plan with job.precision fp8 or bf16"
    )


def runs_pools(name: str) -> bool:
    """Whether framework ``name`` runs a mixed-GPU cluster (cluster.pools) at all."""
    _known(name)
    return name in POOLED_FRAMEWORKS


def _node_sizes(cluster: Cluster, stage_pools: tuple[int, ...]) -> list[int]:
    """The GPUs per node of the pools the stages use, when they differ (else [])."""
    used = sorted({cluster.pools[p].devices_per_node for p in set(stage_pools)}) if cluster.pools else []
    return used if len(used) > 1 else []


def pool_refusal(name: str, cluster: Cluster, stage_pools: tuple[int, ...] = ()) -> str | None:
    """Why ``name`` cannot launch a plan whose stages sit on ``stage_pools`` of ``cluster``
    (None: it can, or the cluster has no pools): a framework of one mesh refuses every pooled
    cluster; a pooled one refuses pools with different GPUs per node (one torchrun job takes one
    --nproc-per-node)."""
    if not cluster.pools:
        return None
    if not runs_pools(name):
        return (
            f"{name} cannot express a plan on a mixed-GPU cluster (cluster.pools): it builds one "
            f"device mesh of one GPU type; export to {' or '.join(POOLED_FRAMEWORKS)} (stages on "
            "pools, uneven layers) or plan for one pool (cluster.preset)"
        )
    sizes = _node_sizes(cluster, stage_pools)
    if sizes:
        return (
            f"{name} cannot launch pools with different GPUs per node {sizes} in one "
            "torchrun job (--nproc-per-node is one number)"
        )
    return None


def check_bf16_fp16_fp8(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """The framework's config has no block-scaled recipe (fp8_blockwise, mxfp8, nvfp4)."""
    if draft.precision in EXPORTED_PRECISIONS:
        return None
    return Refusal(
        f"job.precision={draft.precision.value} has no setting in its config (only "
        f"{' and '.join(BLOCK_SCALED_FRAMEWORKS)} name the block-scaled recipes); plan with "
        "job.precision fp8 or bf16"
    )


def check_one_mesh(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """The framework builds one device mesh of one GPU type: no mixed-GPU cluster."""
    if not ctx.cluster.pools:
        return None
    return Refusal(
        "a mixed-GPU cluster (cluster.pools) needs pipeline stages on different node types, and "
        f"it builds one device mesh of one GPU type ({' or '.join(POOLED_FRAMEWORKS)} runs it)"
    )


def check_one_node_size(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """One torchrun job takes one --nproc-per-node: the pools the stages use have the same
    GPUs per node."""
    sizes = _node_sizes(ctx.cluster, draft.plan.stage_pools)
    if not sizes:
        return None
    return Refusal(
        f"plan.stage_pools={list(draft.plan.stage_pools)} uses pools with different GPUs per node "
        f"{sizes}, which one torchrun job cannot launch (--nproc-per-node is one number)"
    )


def launch_rules(name: str) -> tuple[tuple[Rule, ...], tuple[Rule, ...]]:
    """Framework ``name``'s launch facts as rules: (all of them, those that read only the job and
    the cluster, i.e. its MODEL_RULES). The rules are shared by the frameworks with the same
    facts, so one framework's rules still include another's (rules/filter.py reads that)."""
    _known(name)
    model: tuple[Rule, ...] = (probs_rule(name),)  # job.moe_probs_applied (rules/moe_probs.py)
    if name not in BLOCK_SCALED_FRAMEWORKS:
        model += (check_bf16_fp16_fp8,)
    if not runs_pools(name):
        model += (check_one_mesh,)
    return (*model, check_one_node_size), model
