"""Mixture-of-experts through the front door: scenarios with MoE fields, solve with ep free or
fixed, errors that name the rule."""

from __future__ import annotations

import pytest

import paraplan
from paraplan.errors import ConfigError

QWEN_8_H100 = {
    "model": {"preset": "qwen3-30b-a3b"},
    "cluster": {"preset": "dgx-h100", "gpus": 8},
    "job": {"seq_len": 4096, "global_batch": 64, "precision": "bf16"},
    "solver": {"max_micro_batch": 2, "max_vp": 1},
}


def test_solver_weighs_expert_parallelism_for_a_moe_model() -> None:
    # 30B of weights fit 8 x 80 GB only sharded: by ep, or by ZeRO-3 (which shards experts too);
    # whichever the solver picks, no fixed ep does better
    res = paraplan.solve(QWEN_8_H100, time_limit_s=30, workers=1)
    assert res.solver is not None and res.solver.status == "OPTIMAL"
    assert res.plan.ep > 1 or res.plan.zero == 3
    assert res.predicted.fits_memory
    for ep in (2, 8):
        fixed = paraplan.solve({**QWEN_8_H100, "plan": {"ep": ep}}, time_limit_s=30, workers=1)
        assert res.solver.objective_s <= fixed.solver.objective_s * (1 + 1e-9)


def test_fixed_ep_is_respected() -> None:
    res = paraplan.solve({**QWEN_8_H100, "plan": {"ep": 2}}, time_limit_s=30, workers=1)
    assert res.plan.ep == 2


def test_ep_must_divide_the_experts() -> None:
    with pytest.raises(ConfigError, match="plan.ep=3 must divide the model's 128 experts"):
        paraplan.solve({**QWEN_8_H100, "plan": {"ep": 3}}, time_limit_s=5, workers=1)


def test_ep_on_a_dense_model_is_refused() -> None:
    dense = {**QWEN_8_H100, "model": {"preset": "llama3-8b"}, "plan": {"ep": 2}}
    with pytest.raises(ConfigError, match="needs a mixture-of-experts model"):
        paraplan.solve(dense, time_limit_s=5, workers=1)


def test_explicit_moe_fields_match_the_preset() -> None:
    explicit = {
        "name": "qwen3-30b-a3b",
        "layers": 48,
        "hidden": 2048,
        "heads": 32,
        "kv_heads": 4,
        "head_dim": 128,
        "vocab": 151936,
        "experts": 128,
        "top_k": 8,
        "moe_ffn_hidden": 768,
        # the preset's router (its aux loss's scores are kernels of their own when the router is
        # unfused, cost/host.py router_unfused_kernels)
        "router": {"balance": "aux_loss", "aux_loss_coeff": 0.001},
    }
    plan = {"dp": 8, "tp": 1, "pp": 1, "ep": 8, "micro_batch": 1, "zero": 1, "recompute": "none"}
    a = paraplan.evaluate({**QWEN_8_H100, "plan": plan})
    b = paraplan.evaluate({**QWEN_8_H100, "model": explicit, "plan": plan})
    assert a.predicted.step_time_s == pytest.approx(b.predicted.step_time_s)


def test_explicit_moe_model_needs_the_expert_width() -> None:
    bad = {
        **QWEN_8_H100,
        "model": {"layers": 4, "hidden": 256, "heads": 4, "vocab": 1000, "experts": 8, "top_k": 2},
    }
    with pytest.raises(ConfigError, match="moe_ffn_hidden"):
        paraplan.load_scenario(bad)


def test_balanced_routing_is_faster_than_the_default_imbalance() -> None:
    plan = {"dp": 8, "tp": 1, "pp": 1, "ep": 8, "micro_batch": 1, "zero": 1, "recompute": "none"}
    default = paraplan.evaluate({**QWEN_8_H100, "plan": plan})
    balanced = paraplan.evaluate(
        {**QWEN_8_H100, "plan": plan, "job": {**QWEN_8_H100["job"], "expert_imbalance": 1.0}}
    )
    assert balanced.predicted.step_time_s < default.predicted.step_time_s
