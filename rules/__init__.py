"""Framework rules, below the solver: what each training framework can run, as pure functions
of (model, job, cluster, plan).

Imports only graph/, hardware/ and cost/ (docs/DESIGN.md §3). ``base`` holds the types (context,
draft, refusal, search limits) and the repair helpers; ``plans`` the plan helpers rules and
exporters share; ``checks`` the rules several frameworks share; ``validity`` the model/plan facts
they state once; and one module per framework (``megatron``, ``nemo``, ``deepspeed``,
``torchtitan``, ``maxtext``, ``torch``) its ``RULES``, ``SEARCH``, ``MODEL_RULES``, ``LAYOUT_RULES``
and ``ZERO_RULES``, with the framework facts both its rules and its exporter need (Megatron's layer
layouts in ``megatron_layout``); ``moe_state`` which MoE dispatchers, EP overlap, CUDA-graph and
routing modes each framework runs (its rules are in every framework's ``RULES``); ``frameworks`` the
one list of frameworks and what each launches at all (precisions, pooled clusters), whose rules
``rules_of(name)`` puts first in a framework's. ``filter`` turns them into the solver's layout
predicates (``FrameworkFilter``; ``AnyFramework`` for the runnable default, with per-layout limits),
which paraplan/planning.py builds; the exporters (paraplan/export, ``enforce``) call the rules too.
"""

from __future__ import annotations

import importlib

from paraplan.rules.base import (
    Draft,
    Fix,
    Refusal,
    Rule,
    RuleContext,
    SearchLimits,
    TargetRules,
    first_refusal,
    micro_batch_repairs,
    order_fixes,
    recompute_fixes,
    repair,
)
from paraplan.rules.checks import (
    check_dense_model,
    check_expert_tp_is_tp,
    check_no_expert_parallel,
    dense_model_rule,
    uniform_recompute_rule,
)
from paraplan.rules.frameworks import (
    BLOCK_SCALED_FRAMEWORKS,
    EXPORTED_PRECISIONS,
    FRAMEWORKS,
    POOLED_FRAMEWORKS,
    launch_rules,
    pool_refusal,
    precision_refusal,
    runs_pools,
    runs_precision,
)
from paraplan.rules.plans import effective_order, order_matches, regroup, uniform_recompute
from paraplan.rules.validity import (
    batch_splits,
    cp_splits_sequence,
    ep_splits_experts,
    tp_splits_heads,
)

__all__ = [
    "RuleContext",
    "Draft",
    "Fix",
    "Refusal",
    "Rule",
    "SearchLimits",
    "TargetRules",
    "FRAMEWORKS",
    "EXPORTED_PRECISIONS",
    "BLOCK_SCALED_FRAMEWORKS",
    "POOLED_FRAMEWORKS",
    "runs_precision",
    "precision_refusal",
    "runs_pools",
    "pool_refusal",
    "launch_rules",
    "rules_of",
    "repair",
    "order_fixes",
    "recompute_fixes",
    "micro_batch_repairs",
    "first_refusal",
    "check_dense_model",
    "check_no_expert_parallel",
    "check_expert_tp_is_tp",
    "dense_model_rule",
    "uniform_recompute_rule",
    "uniform_recompute",
    "effective_order",
    "order_matches",
    "regroup",
    "tp_splits_heads",
    "ep_splits_experts",
    "batch_splits",
    "cp_splits_sequence",
]

_CACHE: dict[str, TargetRules] = {}


def rules_of(name: str) -> TargetRules:
    """Framework ``name``'s RULES, SEARCH, MODEL_RULES, LAYOUT_RULES and ZERO_RULES, its launch rules
    (frameworks.launch_rules: precision, pooled cluster) first; ValueError when it has none."""
    if name not in FRAMEWORKS:
        raise ValueError(f"no rules for framework {name!r}; known: {', '.join(FRAMEWORKS)}")
    if name not in _CACHE:
        module = importlib.import_module(f"paraplan.rules.{name}")
        launch, launch_model = launch_rules(name)  # what it launches at all (frameworks.py), first
        _CACHE[name] = TargetRules(
            launch + tuple(module.RULES),
            module.SEARCH,
            launch_model + tuple(module.MODEL_RULES),
            tuple(module.LAYOUT_RULES),
            tuple(module.ZERO_RULES),
        )
    return _CACHE[name]
