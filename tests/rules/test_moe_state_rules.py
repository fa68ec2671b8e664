"""The MoE software state per framework (rules/moe_state.py): each framework's rules refuse what
it cannot run, naming the field, the value and the frameworks that do run it; Megatron's and
torchtitan's own combination checks; the routing rule is a model rule."""

from __future__ import annotations

import pytest
from paraplan.cost import CudaGraphs, Job, MoEDispatcher, MoERouting, Plan, Precision, Recompute
from paraplan.graph import preset
from paraplan.hardware import build_cluster
from paraplan.rules import FRAMEWORKS, Draft, RuleContext, first_refusal, rules_of
from paraplan.rules.moe_state import FIELDS, SUPPORT, runs


def _ctx(model: str = "qwen3-30b-a3b", **job: object) -> RuleContext:
    base = Job(global_batch=256, seq_len=4096, precision=Precision.BF16, **job)  # type: ignore[arg-type]
    return RuleContext(preset(model), base, build_cluster("dgx-h100", nodes=2), model)


def _plan(**knobs: object) -> Plan:
    base: dict[str, object] = dict(
        dp=16, tp=1, pp=1, ep=8, micro_batch=1, recompute=(Recompute.SELECTIVE,), layers_per_stage=(48,)
    )
    base.update(knobs)
    return Plan(**base)  # type: ignore[arg-type]


def _state_refusal(framework: str, ctx: RuleContext, plan: Plan) -> str | None:
    """The first refusal of the framework's rules that names a MoE software-state field."""
    rules = [r for r in rules_of(framework).rules if r.__module__ == "paraplan.rules.moe_state"]
    refusal = first_refusal(ctx, Draft(plan, ctx.precision), rules)
    return None if refusal is None else refusal.rule


def test_the_defaults_run_everywhere() -> None:
    for name in FRAMEWORKS:
        assert _state_refusal(name, _ctx(), _plan()) is None, name


def test_runs_names_the_frameworks_of_each_setting() -> None:
    assert runs("plan.moe_dispatcher", MoEDispatcher.DEEPEP) == ("megatron", "nemo")
    assert runs("plan.cuda_graphs", CudaGraphs.FULL) == ("megatron", "nemo", "torchtitan")
    assert runs("job.moe_routing", MoERouting.FORCE_BALANCED) == ("megatron", "nemo", "torchtitan")
    assert runs("plan.moe_overlap", False) == tuple(SUPPORT)
    with pytest.raises(ValueError, match="plan.moe_dispatch"):
        runs("plan.moe_dispatch", "deepep")
    assert set(SUPPORT) == set(FRAMEWORKS) and len(FIELDS) == 4


@pytest.mark.parametrize(
    "framework,knobs,words",
    [
        (
            "torchtitan",
            {"moe_dispatcher": MoEDispatcher.HYBRIDEP},
            "plan.moe_dispatcher=hybridep: torchtitan",
        ),
        ("torchtitan", {"moe_overlap": True}, "plan.moe_overlap=true: torchtitan"),
        ("torchtitan", {"cuda_graphs": CudaGraphs.PARTIAL}, "plan.cuda_graphs=partial: torchtitan"),
        ("deepspeed", {"cuda_graphs": CudaGraphs.FULL}, "plan.cuda_graphs=full: DeepSpeed 0.19.8"),
        ("maxtext", {"moe_dispatcher": MoEDispatcher.DEEPEP}, "plan.moe_dispatcher=deepep: MaxText"),
        ("torch", {"cuda_graphs": CudaGraphs.PARTIAL}, "plan.cuda_graphs=partial: the PyTorch-native"),
    ],
)
def test_a_framework_refuses_what_it_cannot_run_by_name(framework: str, knobs: dict, words: str) -> None:
    rule = _state_refusal(framework, _ctx(), _plan(**knobs))
    assert rule is not None and rule.startswith(words)
    field, value = rule.split(":")[0].split("=")
    assert "run by: " + ", ".join(runs(field, {"true": True}.get(value, value))) in rule


def test_refusals_repair_to_the_default() -> None:
    ctx, plan = _ctx(), _plan(moe_dispatcher=MoEDispatcher.DEEPEP, cuda_graphs=CudaGraphs.PARTIAL)
    refusal = first_refusal(ctx, Draft(plan, ctx.precision), rules_of("torchtitan").rules)
    assert refusal is not None and refusal.rule.startswith("plan.moe_dispatcher=deepep")
    assert [f.change for f in refusal.fixes] == ["moe_dispatcher -> alltoall"]
    assert refusal.fixes[0].draft.plan.moe_dispatcher is MoEDispatcher.ALLTOALL


def test_routing_is_a_model_rule_and_a_dense_model_has_none() -> None:
    capacity = _ctx(moe_routing=MoERouting.CAPACITY, moe_capacity_factor=1.25)
    for name in ("deepspeed", "torchtitan", "maxtext"):
        model_rules = rules_of(name).model_rules
        refusal = first_refusal(capacity, Draft(_plan(), capacity.precision), model_rules)
        assert refusal is not None and refusal.rule.startswith("job.moe_routing=capacity"), name
        assert refusal.rule.endswith("run by: megatron, nemo")
    assert _state_refusal("megatron", capacity, _plan()) is None
    dense = _ctx("llama3.1-8b", moe_routing=MoERouting.CAPACITY, moe_capacity_factor=1.25)
    dense_plan = _plan(ep=1, layers_per_stage=(32,), moe_dispatcher=MoEDispatcher.DEEPEP)
    assert _state_refusal("torchtitan", dense, dense_plan) is None  # no experts: nothing to dispatch


@pytest.mark.parametrize(
    "knobs,words",
    [
        ({"ep": 1, "dp": 16}, "needs expert parallelism"),
        ({"moe_dispatcher": MoEDispatcher.ALLGATHER}, "alltoall or flex dispatcher"),
        ({"pp": 2, "dp": 8, "layers_per_stage": (24, 24)}, "needs virtual pipeline stages"),
        ({"recompute": (Recompute.FULL,)}, "refuses full recompute"),
    ],
)
def test_megatron_checks_what_ep_overlap_needs(knobs: dict, words: str) -> None:
    rule = _state_refusal("nemo", _ctx(), _plan(moe_overlap=True, **knobs))
    assert rule is not None and words in rule and "--overlap-moe-expert-parallel-comm" in rule
    ok = _plan(moe_overlap=True, pp=2, dp=8, vp=2, layers_per_stage=(24, 24))
    assert _state_refusal("megatron", _ctx(), ok) is None


def test_megatron_checks_partial_cuda_graphs() -> None:
    partial = {"cuda_graphs": CudaGraphs.PARTIAL}
    full_recompute = _state_refusal("megatron", _ctx(), _plan(recompute=(Recompute.FULL,), **partial))
    assert full_recompute is not None and "full-iteration CUDA graphs" in full_recompute
    capacity = _ctx(moe_routing=MoERouting.CAPACITY, moe_capacity_factor=1.0)
    preprocess = _state_refusal("megatron", capacity, _plan(**partial))
    assert preprocess is not None and "MoE preprocess" in preprocess
    assert _state_refusal("megatron", capacity, _plan(moe_dispatcher=MoEDispatcher.DEEPEP, **partial)) is None
    full = _plan(recompute=(Recompute.FULL,), cuda_graphs=CudaGraphs.FULL)
    assert _state_refusal("megatron", _ctx(), full) is None


def test_torchtitan_full_graphs_need_no_pipeline_and_no_expert_parallelism() -> None:
    full = {"cuda_graphs": CudaGraphs.FULL}
    with_ep = _state_refusal("torchtitan", _ctx(), _plan(**full))
    assert with_ep is not None and "ep=8" in with_ep
    dense = _ctx("llama3.1-8b")
    pp = _state_refusal("torchtitan", dense, _plan(ep=1, pp=2, dp=8, layers_per_stage=(16, 16), **full))
    assert pp is not None and "pipeline parallelism" in pp
    assert _state_refusal("torchtitan", dense, _plan(ep=1, layers_per_stage=(32,), **full)) is None


def test_the_state_rules_read_only_what_the_filter_keys_their_verdicts_by() -> None:
    """rules/filter.py remembers the state rules' verdicts (and the recompute modes they allow,
    ``limits_for``) by moe_state.STATE_RULE_READS alone (issue 22 item 7: the solver asks them of
    every state of every family): that is exact only when no rule defined in rules/moe_state.py
    reads another plan field. Plans equal in those fields get one verdict from each rule; plans
    that differ in them do not always (the check can fail)."""
    from dataclasses import replace
    from itertools import product

    from paraplan.cost import Axis
    from paraplan.rules.moe_state import STATE_RULE_READS

    assert set(STATE_RULE_READS) >= {"moe_dispatcher", "moe_overlap", "cuda_graphs"}
    others = [
        {"dp": 4, "tp": 2, "etp": 1},
        {"dp": 2, "tp": 2, "cp": 2, "sequence_parallel": False},
        {"zero": 3, "micro_batch": 2},
        {"zero": 0, "order": (Axis.TP, Axis.DP, Axis.CP, Axis.PP)},
    ]
    ctxs = [_ctx(), _ctx(moe_routing=MoERouting.CAPACITY, moe_capacity_factor=1.0)]
    differ = checked = 0
    for ctx, name in product(ctxs, FRAMEWORKS):
        rules = [r for r in rules_of(name).rules if r.__module__ == "paraplan.rules.moe_state"]
        seen: set[bool] = set()
        for d, o, g, ep, (pp, vp), mode in product(
            MoEDispatcher, (False, True), CudaGraphs, (1, 8), ((1, 1), (2, 1), (2, 2)), Recompute
        ):
            base = _plan(
                moe_dispatcher=d, moe_overlap=o, cuda_graphs=g, ep=ep, pp=pp, vp=vp, dp=16 // pp,
                layers_per_stage=(48 // pp,) * pp, recompute=(mode,) * pp,
            )  # fmt: skip
            for rule in rules:
                verdict = rule(ctx, Draft(base, ctx.precision)) is None
                seen.add(verdict)
                for knobs in others:
                    variant = replace(base, **knobs)  # type: ignore[arg-type]
                    assert (rule(ctx, Draft(variant, ctx.precision)) is None) == verdict, (name, rule, knobs)
                    checked += 1
        differ += len(seen) > 1
    assert checked > 10_000 and differ >= 2 * 4  # every framework but the dense script refuses some state
