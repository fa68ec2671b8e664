"""solver.target checks a framework's family rules once per layout family and only its
LAYOUT_RULES per layout (rules/filter.py ``FrameworkFilter``): that is exact only when every
other rule gives one verdict for all ZeRO stages and rank orders of a family. This checks the
declarations over the families the solver enumerates, dense and mixture-of-experts."""

from __future__ import annotations

import random
from dataclasses import replace
from itertools import permutations

import pytest
from paraplan.cost import DEFAULT_ORDER, Job, Plan, Precision, Recompute
from paraplan.cost.plan import PartialPlan, even_split, plan_key
from paraplan.graph import preset
from paraplan.hardware import build_cluster
from paraplan.rules import FRAMEWORKS, Draft, RuleContext, rules_of
from paraplan.rules.filter import LAYOUT_RULES_IGNORE
from paraplan.solver import Options
from paraplan.solver.space import families

ORDERS = list(permutations(DEFAULT_ORDER))


def _variants(family: Plan, rng: random.Random, count: int) -> list[Plan]:
    """``family`` at some ZeRO stages and rank orders (those a Plan takes)."""
    out = []
    for zero, order in rng.sample([(z, o) for z in range(4) for o in ORDERS], count):
        try:
            out.append(replace(family, zero=zero, order=order))
        except ValueError:  # e.g. an expert group the order cannot hold
            continue
    return out


@pytest.mark.parametrize("model", ["llama3.1-8b", "qwen3-30b-a3b"])
def test_family_rules_ignore_the_zero_stage_and_rank_order(model: str) -> None:
    spec = preset(model)
    cluster = build_cluster("dgx-h100", nodes=2)
    job = Job(global_batch=64, seq_len=4096, precision=Precision.BF16)
    ctx = RuleContext(spec, job, cluster, model)
    space = families(spec, cluster, job.seq_len, job.global_batch, PartialPlan(), Options(layout_filter=bool))
    rng = random.Random(0)
    checked = 0
    for family in rng.sample(space, min(40, len(space))):
        split = even_split(spec.num_layers, family.pp)  # the filter's representative split and mode
        plan = family.plan(split, (Recompute.NONE,) * family.pp)
        variants = _variants(plan, rng, 12)
        for name in FRAMEWORKS:
            for rule in rules_of(name).family_rules:
                verdicts = {rule(ctx, Draft(v, ctx.precision)) is None for v in variants}
                assert len(verdicts) <= 1, (name, rule, family)
                checked += 1
    assert checked > 1000


def test_every_framework_names_its_layout_rules() -> None:
    for name in FRAMEWORKS:
        rules = rules_of(name)
        assert rules.layout_rules and set(rules.layout_rules) <= set(rules.rules), name
        assert set(rules.family_rules).isdisjoint(rules.layout_rules)


@pytest.mark.parametrize(
    ("model", "cluster_preset"), [("llama3.1-8b", "dgx-h100"), ("qwen3-30b-a3b", "dgx-h100")]
)
def test_layout_rules_ignore_what_the_filter_shares_their_verdict_over(
    model: str, cluster_preset: str
) -> None:
    """rules/filter.py remembers each framework's LAYOUT_RULES verdict per layout less
    LAYOUT_RULES_IGNORE (issue 26: the runnable default's speed); that is exact only when no
    layout rule reads those fields: layouts equal but for them get one verdict."""
    spec = preset(model)
    cluster = build_cluster(cluster_preset, nodes=2)
    job = Job(global_batch=64, seq_len=4096, precision=Precision.BF16)
    ctx = RuleContext(spec, job, cluster, model)
    space = families(spec, cluster, job.seq_len, job.global_batch, PartialPlan(), Options(layout_filter=bool))
    groups: dict[tuple[object, ...], list[Plan]] = {}
    for family in space:
        split = even_split(spec.num_layers, family.pp)  # the filter's representative split and mode
        try:
            plan = family.plan(split, (Recompute.NONE,) * family.pp)
        except ValueError:
            continue
        groups.setdefault(plan_key(family, LAYOUT_RULES_IGNORE), []).append(plan)
    shared = [g for g in groups.values() if len(g) > 1]
    assert len(shared) > 10
    rng = random.Random(0)
    checked = 0
    for group in rng.sample(shared, min(40, len(shared))):
        for zero, order in rng.sample([(z, o) for z in range(4) for o in ORDERS], 8):
            try:
                variants = [replace(p, zero=zero, order=order) for p in group]
            except ValueError:  # e.g. an expert group the order cannot hold
                continue
            for name in FRAMEWORKS:
                for rule in rules_of(name).layout_rules:
                    verdicts = {rule(ctx, Draft(v, ctx.precision)) is None for v in variants}
                    assert len(verdicts) <= 1, (name, rule, group[0], zero, order)
                    checked += 1
    assert checked > 500


@pytest.mark.parametrize(
    ("model", "cluster_preset"), [("llama3.1-8b", "dgx-h100"), ("qwen3-30b-a3b", "dgx-h100")]
)
def test_zero_rules_read_no_rank_order(model: str, cluster_preset: str) -> None:
    """rules/filter.py asks a framework's ZERO_RULES once per family with its ZeRO stage, and the
    solver drops a family and ZeRO stage they refuse before bounding it (issue 26: the runnable
    default's speed); that is exact only when no ZERO_RULE reads the rank order: every order of
    one layout gets one verdict."""
    spec = preset(model)
    cluster = build_cluster(cluster_preset, nodes=2)
    job = Job(global_batch=64, seq_len=4096, precision=Precision.BF16)
    ctx = RuleContext(spec, job, cluster, model)
    space = families(spec, cluster, job.seq_len, job.global_batch, PartialPlan(), Options(layout_filter=bool))
    rng = random.Random(0)
    checked = refused = 0
    for family in rng.sample(space, min(60, len(space))):
        split = even_split(spec.num_layers, family.pp)  # the filter's representative split and mode
        for zero in range(4):
            try:
                plan = replace(family.plan(split, (Recompute.NONE,) * family.pp), zero=zero)
            except ValueError:
                continue
            variants = _orders_of(plan)
            for name in FRAMEWORKS:
                rules = rules_of(name)
                assert set(rules.zero_rules) <= set(rules.layout_rules), name
                for rule in rules.zero_rules:
                    verdicts = {rule(ctx, Draft(v, ctx.precision)) is None for v in variants}
                    assert len(verdicts) <= 1, (name, rule, plan)
                    checked += 1
                    refused += False in verdicts
    assert checked > 300 and refused > 10


def _orders_of(plan: Plan) -> list[Plan]:
    """``plan`` under every rank order it takes."""
    out = []
    for order in ORDERS:
        try:
            out.append(replace(plan, order=order))
        except ValueError:  # e.g. an expert group the order cannot hold
            continue
    return out
