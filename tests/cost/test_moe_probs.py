"""job.moe_probs_applied (issue 22, "none predicted out of memory"): where the router's
probabilities multiply the routed copies decides whether the routed output is kept for the
backward (cost/ep.py routed_output_kept_elems); auto resolves by solver.target
(rules/moe_probs.py), Megatron-Core -> activation, torchtitan and the rest -> combine."""

from __future__ import annotations

from dataclasses import replace

import pytest
from paraplan.cost import Job, Layout, MoEProbs
from paraplan.cost.compute import ACTIVATION_BYTES, tokens_per_device
from paraplan.cost.ep import expert_stored_bytes, routed_output_kept_elems
from paraplan.graph import build_graph, preset
from paraplan.rules import FRAMEWORKS
from paraplan.rules.moe_probs import PROBS_APPLIED, resolve_moe_probs

import paraplan
from paraplan.errors import ConfigError, ExportError, InfeasibleError
from paraplan.export import export_text
from paraplan.instance import build_instance

MOE = {
    "model": {"preset": "mixtral-8x7b"},
    "cluster": {"preset": "dgx-h100", "gpus": 16},
    "job": {"seq_len": 4096, "global_batch": 64},
    "plan": {"dp": 8, "tp": 2, "pp": 1, "ep": 8, "micro_batch": 1, "zero": 1, "recompute": "selective"},
}


def _scenario(target: str | None = None, probs: str | None = None, model: str = "mixtral-8x7b") -> dict:
    job = {**MOE["job"], **({"moe_probs_applied": probs} if probs else {})}
    solver = {"target": target} if target else {}
    return {**MOE, "model": {"preset": model}, "job": job, "solver": solver}


def _experts():
    graph = build_graph(preset("mixtral-8x7b"))
    return next(layer.experts for layer in graph.layers() if layer.experts is not None)


def test_combine_keeps_the_routed_output_and_activation_does_not() -> None:
    """stored(combine) - stored(activation) = c' * d / etp * 2 B, c' = n * top_k * etp / tp the
    copies a device runs, d = hidden (Mixtral: 4096); per layer and micro-batch."""
    experts = _experts()
    layout = Layout(dp=8, tp=2, pp=1, ep=8, micro_batch=1)
    combine = Job(seq_len=4096, global_batch=64, moe_probs_applied=MoEProbs.COMBINE)
    activation = replace(combine, moe_probs_applied=MoEProbs.ACTIVATION)
    copies = tokens_per_device(layout, combine) * experts.top_k * layout.expert_tp / layout.tp
    expected = copies * 4096 / layout.expert_tp * ACTIVATION_BYTES
    diff = expert_stored_bytes(experts, layout, combine) - expert_stored_bytes(experts, layout, activation)
    assert diff == pytest.approx(expected)
    assert routed_output_kept_elems(experts, combine) == 4096
    assert routed_output_kept_elems(experts, activation) == 0.0


def test_the_term_is_the_frameworks() -> None:
    """Fails if the routed output is dropped for torchtitan (or DeepSpeed, MaxText, torch) or kept
    for Megatron / NeMo: auto resolves by solver.target, and the peak follows."""
    peaks = {}
    for name in FRAMEWORKS:
        inst = build_instance(paraplan.load_scenario(_scenario(target=name)))
        assert inst.job.moe_probs_applied is PROBS_APPLIED[name]
        peaks[name] = paraplan.evaluate(_scenario(target=name)).predicted.peak_memory_bytes
    assert PROBS_APPLIED["megatron"] is PROBS_APPLIED["nemo"] is MoEProbs.ACTIVATION
    assert PROBS_APPLIED["torchtitan"] is MoEProbs.COMBINE
    assert peaks["megatron"] == pytest.approx(peaks["nemo"])
    assert peaks["torchtitan"] == pytest.approx(peaks["deepspeed"])
    assert peaks["torchtitan"] > peaks["megatron"] * 1.01


@pytest.mark.parametrize("target", [None, "any"])
def test_auto_without_a_framework_counts_the_routed_output(target) -> None:
    """No framework named (the runnable default, or any): combine, the heavier, so a plan the
    search keeps fits on every framework that would run it."""
    inst = build_instance(paraplan.load_scenario(_scenario(target=target)))
    assert inst.job.moe_probs_applied is MoEProbs.COMBINE and not inst.job.is_moe_probs_given
    assert resolve_moe_probs("activation", None) is MoEProbs.ACTIVATION
    assert resolve_moe_probs("combine", "megatron") is MoEProbs.COMBINE


def test_a_bad_value_is_a_config_error_naming_the_field() -> None:
    with pytest.raises(ConfigError, match="job.moe_probs_applied"):
        paraplan.load_scenario(_scenario(probs="router"))


def test_torchtitan_refuses_activation_by_name() -> None:
    with pytest.raises(InfeasibleError, match="job.moe_probs_applied=activation"):
        paraplan.solve(_scenario(target="torchtitan", probs="activation"), time_limit_s=30)


def test_megatron_refuses_an_explicit_combine_but_not_auto() -> None:
    with pytest.raises(InfeasibleError, match="job.moe_probs_applied=combine"):
        paraplan.solve(_scenario(target="megatron", probs="combine"), time_limit_s=30)
    result = paraplan.evaluate(_scenario())  # auto, no framework: combine, Megatron still runs it
    assert "--expert-model-parallel-size 8" in export_text(result, "megatron")


def test_a_plan_costed_for_megatron_does_not_export_to_torchtitan() -> None:
    """The routed output torchtitan keeps was not in the plan's memory."""
    result = paraplan.evaluate(_scenario(target="megatron"))
    with pytest.raises(ExportError, match="job.moe_probs_applied=activation"):
        export_text(result, "torchtitan")


def test_a_dense_model_takes_either_setting() -> None:
    dense = _scenario(target="torchtitan", probs="activation", model="llama3-8b")
    dense["plan"] = {**MOE["plan"], "ep": 1}
    paraplan.evaluate(dense)
