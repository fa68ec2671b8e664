"""The rules layer (paraplan.rules) answers from the model, job and cluster alone: no Result, no
scoring, no rendering; the solver's filter and the exporters ask the same functions."""

import pytest
from paraplan.cost import Job, Plan, Precision, Recompute
from paraplan.graph import preset
from paraplan.hardware import build_cluster
from paraplan.rules import (
    FRAMEWORKS,
    Draft,
    RuleContext,
    ep_splits_experts,
    first_refusal,
    rules_of,
    tp_splits_heads,
)


def _ctx(model: str = "llama3.1-8b") -> RuleContext:
    job = Job(global_batch=64, seq_len=4096, precision=Precision.BF16)
    return RuleContext(preset(model), job, build_cluster("dgx-h100", nodes=2), model)


def _plan(**knobs: object) -> Plan:
    base: dict[str, object] = dict(
        dp=2,
        tp=8,
        pp=1,
        micro_batch=1,
        recompute=(Recompute.NONE,),
        layers_per_stage=(32,),
        sequence_parallel=True,
    )
    base.update(knobs)
    return Plan(**base)  # type: ignore[arg-type]


def test_every_framework_has_rules_and_an_unknown_one_is_named() -> None:
    for name in FRAMEWORKS:
        assert rules_of(name).rules, name
    with pytest.raises(ValueError, match="no rules for framework 'jax'"):
        rules_of("jax")


def test_a_plan_every_framework_runs_passes_all_rules() -> None:
    ctx = _ctx()
    draft = Draft(_plan(), ctx.precision)
    assert {n: first_refusal(ctx, draft, rules_of(n).rules) for n in ("megatron", "torchtitan")} == {
        "megatron": None,
        "torchtitan": None,
    }


def test_a_refusal_names_the_values_and_offers_a_repair() -> None:
    ctx = _ctx()
    refusal = first_refusal(ctx, Draft(_plan(ep=2), ctx.precision), rules_of("megatron").rules)
    assert refusal is not None
    assert "plan.ep=2 needs a mixture-of-experts model" in refusal.rule
    assert [f.change for f in refusal.fixes] == ["ep -> 1"]
    assert refusal.fixes[0].draft.plan.ep == 1


def test_validity_predicates_state_the_head_and_expert_splits() -> None:
    llama, moe = preset("llama3.1-8b"), preset("qwen3-30b-a3b")  # 32 heads / 8 kv; 128 experts
    assert tp_splits_heads(llama, 8) and tp_splits_heads(llama, 16)
    assert not tp_splits_heads(llama, 3)
    assert ep_splits_experts(llama, 1) and not ep_splits_experts(llama, 2)
    assert ep_splits_experts(moe, 8) and not ep_splits_experts(moe, 3)
