"""The framework registry: which frameworks paraplan plans for, and what each one launches at
all, whatever the plan's degrees: the precisions it has a setting for and whether it runs a
mixed-GPU cluster (cluster.pools). The MoE software state each one runs is ``moe_state.SUPPORT``
(checked here to name the same frameworks); the per-plan rules are in each framework's module.

``launch_rules(name)`` states these facts as rules, which ``rules_of`` puts first in every
framework's RULES (and, those that read only the job and cluster, its MODEL_RULES): the search's
layout filter (rules/filter.py), ``runs_on`` (paraplan/targets.py) and the exporters' ``enforce``
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

__all__ = [
    "FRAMEWORKS",
    "EXPORTED_PRECISIONS",
    "BLOCK_SCALED_FRAMEWORKS",
    "POOLED_FRAMEWORKS",
    "runs_precision",
    "precision_refusal",
    "runs_pools",
    "pool_refusal",
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
    used = {cluster.pools[p].devices_per_node for p in set(stage_pools)}
    if len(used) > 1:
        return (
            f"{name} cannot launch pools with different GPUs per node {sorted(used)} in one "
            "torchrun job (--nproc-per-node is one number)"
        )
    return None


def launch_rules(name: str) -> tuple[tuple[Rule, ...], tuple[Rule, ...]]:
    """Framework ``name``'s launch facts as rules: (all of them, those that read only the job and
    the cluster, i.e. its MODEL_RULES)."""
    _known(name)

    def check_precision(ctx: RuleContext, draft: Draft) -> Refusal | None:
        why = precision_refusal(name, draft.precision)
        return None if why is None else Refusal(why)

    def check_mesh(ctx: RuleContext, draft: Draft) -> Refusal | None:
        why = pool_refusal(name, ctx.cluster)  # no stages placed yet: the cluster alone
        return None if why is None else Refusal(why)

    def check_pool_launch(ctx: RuleContext, draft: Draft) -> Refusal | None:
        why = pool_refusal(name, ctx.cluster, draft.plan.stage_pools)
        return None if why is None else Refusal(why)

    return (check_precision, check_mesh, check_pool_launch), (check_precision, check_mesh)
