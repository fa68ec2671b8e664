"""A layer graph built in Python plans like a scenario file: ``paraplan.solve`` takes a
``LayerGraph`` (or the ``ModelSpec`` it is built from) as ``model``, and a plan's
``layers_per_stage`` fixes exactly which consecutive layers each stage holds."""

from __future__ import annotations

import pytest
import yaml
from paraplan.cost.plan import Plan, kind_counts
from paraplan.graph import Activation, LayerGraph, ModelSpec, build_graph
from paraplan.graph.spec import Mamba

import paraplan
from paraplan.errors import ConfigError

SPEC = ModelSpec(
    name="py-hybrid",
    num_layers=12,
    hidden=2048,
    ffn_hidden=8192,
    num_heads=16,
    num_kv_heads=8,
    vocab=32000,
    activation=Activation.RELU2,
    position_embedding="none",
    layer_pattern="M-M*-M-M*-M-",
    mamba=Mamba(version=2, num_heads=64, head_dim=64, state_dim=128, num_groups=8),
)
CLUSTER = {"preset": "dgx-h100", "gpus": 8}
JOB = {"seq_len": 4096, "global_batch": 64}


def test_a_layer_graph_built_in_python_plans_to_proven_optimality() -> None:
    graph = build_graph(SPEC)
    assert len(graph.kind_blocks) == 3  # Mamba, MLP, attention
    res = paraplan.solve({"model": graph, "cluster": CLUSTER, "job": JOB, "plan": {"pp": 2}})
    assert res.solver.status == "OPTIMAL"
    assert sum(res.plan.layers_per_stage) == 12
    same = paraplan.solve({"model": SPEC, "cluster": CLUSTER, "job": JOB, "plan": {"pp": 2}})
    assert same.plan == res.plan


def test_the_same_model_from_yaml_plans_alike() -> None:
    text = f"""
model:
  name: py-hybrid
  layers: 12
  hidden: 2048
  ffn_hidden: 8192
  heads: 16
  kv_heads: 8
  vocab: 32000
  activation: relu2
  position_embedding: none
  layer_pattern: "{SPEC.layer_pattern}"
  mamba: {{version: 2, num_heads: 64, head_dim: 64, state_dim: 128, num_groups: 8}}
cluster: {{preset: dgx-h100, gpus: 8}}
job: {{seq_len: 4096, global_batch: 64}}
plan: {{pp: 2}}
"""
    from_yaml = paraplan.solve(yaml.safe_load(text))
    from_python = paraplan.solve(
        {"model": build_graph(SPEC), "cluster": CLUSTER, "job": JOB, "plan": {"pp": 2}}
    )
    assert from_yaml.solver.status == "OPTIMAL"
    assert from_yaml.plan.layers_per_stage == from_python.plan.layers_per_stage
    assert from_yaml.solver.objective_s == pytest.approx(from_python.solver.objective_s)


def test_layers_per_stage_fixes_which_layers_each_stage_holds() -> None:
    graph = build_graph(SPEC)
    fixed = {"dp": 4, "tp": 1, "pp": 2, "micro_batch": 1, "zero": 1, "recompute": "none"}

    def step(split: list[int]) -> float:
        plan = {**fixed, "layers_per_stage": split}
        return paraplan.evaluate(
            {"model": graph, "cluster": CLUSTER, "job": JOB, "plan": plan}
        ).predicted.step_time_s

    # the first 7 blocks "M-M*-M-" hold 3 Mamba, 3 MLP, 1 attention; the last 5 "M*-M-" 2, 2, 1
    kinds = graph.block_kinds
    plan = Plan(dp=4, tp=1, pp=2, layers_per_stage=(7, 5), recompute=(paraplan.cost.Recompute.NONE,) * 2)
    mamba, mlp, attention = kinds[0], kinds[1], kinds[3]
    counts = kind_counts(kinds, plan)
    assert (counts[0][mamba], counts[0][mlp], counts[0][attention]) == (3, 3, 1)
    assert (counts[1][mamba], counts[1][mlp], counts[1][attention]) == (2, 2, 1)
    assert step([7, 5]) != step([6, 6]) != step([5, 7])


def test_a_graph_that_is_not_its_specs_is_refused() -> None:
    graph = build_graph(SPEC)
    other = LayerGraph(
        SPEC, build_graph(ModelSpec(**{**_fields(SPEC), "layer_pattern": "M-M-M-M-M-M-"})).graph
    )
    with pytest.raises(ConfigError, match="build_graph"):
        paraplan.solve({"model": other, "cluster": CLUSTER, "job": JOB})
    assert graph.spec is SPEC


def _fields(spec: ModelSpec) -> dict:
    from dataclasses import fields

    return {f.name: getattr(spec, f.name) for f in fields(spec)}
