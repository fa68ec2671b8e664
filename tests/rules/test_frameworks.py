"""rules/frameworks.py: the one list of frameworks, and what each launches at all (precisions,
mixed-GPU clusters) as rules every framework's RULES start with, so the search filter, runs_on
and the exporters read the same verdicts."""

from typing import get_args

import pytest
from paraplan.cost import Plan, Precision, Recompute
from paraplan.rules import FRAMEWORKS, Draft, RuleContext, first_refusal, rules_of
from paraplan.rules.frameworks import pool_refusal, precision_refusal, runs_pools, runs_precision
from paraplan.rules.moe_state import SUPPORT

from paraplan.export import EXPORTERS
from paraplan.instance import build_instance
from paraplan.planning import TARGETS, runs_on
from paraplan.scenario.schema import SolverTarget, load_scenario

MIXED_NODES = {
    "model": {"preset": "llama3-8b"},
    "cluster": {"pools": [{"preset": "dgx-h100", "nodes": 8}, {"preset": "gb200-nvl72-64", "nodes": 1}]},
    "job": {"seq_len": 4096, "global_batch": 128},
}


def test_the_frameworks_are_listed_once() -> None:
    assert get_args(SolverTarget) == (*FRAMEWORKS, "any")
    assert TARGETS == FRAMEWORKS
    assert set(EXPORTERS) == {*FRAMEWORKS, "trace"}
    assert set(SUPPORT) == set(FRAMEWORKS)


def test_block_scaled_precisions_run_on_megatron_and_nemo_only() -> None:
    for name in FRAMEWORKS:
        assert runs_precision(name, Precision.BF16) and precision_refusal(name, Precision.FP8) is None
        assert runs_precision(name, Precision.MXFP8) == (name in ("megatron", "nemo"))
    refusal = precision_refusal("torchtitan", Precision.NVFP4)
    assert refusal is not None and "job.precision=nvfp4" in refusal and "megatron or nemo" in refusal
    with pytest.raises(ValueError, match="no framework 'trace'"):
        runs_precision("trace", Precision.BF16)


def test_the_launch_rules_come_first_in_every_frameworks_rules() -> None:
    inst = build_instance(load_scenario(MIXED_NODES))
    ctx = RuleContext(inst.spec, inst.job, inst.cluster, "llama3-8b")
    plan = Plan(dp=8, tp=1, pp=2, micro_batch=1, recompute=(Recompute.NONE,) * 2, layers_per_stage=(16, 16))
    mixed = Plan(
        dp=8,
        tp=1,
        pp=2,
        micro_batch=1,
        recompute=(Recompute.NONE,) * 2,
        layers_per_stage=(16, 16),
        stage_pools=(0, 1),
    )
    for name in FRAMEWORKS:
        refusal = first_refusal(ctx, Draft(plan, Precision.BF16), rules_of(name).model_rules)
        assert (refusal is None) == runs_pools(name), name
    assert runs_pools("megatron") and not runs_pools("torchtitan")
    refusal = first_refusal(ctx, Draft(mixed, Precision.BF16), rules_of("megatron").rules)
    assert refusal is not None and "different GPUs per node [8, 64]" in refusal.rule
    exported = pool_refusal("megatron", inst.cluster, (0, 1))
    assert exported is not None and "different GPUs per node [8, 64]" in exported
    assert pool_refusal("megatron", inst.cluster, (0, 0)) is None
    assert set(rules_of("megatron").rules) <= set(rules_of("nemo").rules)  # nemo runs less
    assert "megatron" not in runs_on(inst, mixed)  # runs_on reads the same rule the exporter raises
