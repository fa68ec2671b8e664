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


# --- model.layers as a pattern or a list (graph/scenario_layers.py; issue 13 item 1) -----------

LAYERS_TOY = """
model:
  name: toy-moe
  hidden: 2048
  ffn_hidden: 8192
  heads: 16
  kv_heads: 4
  vocab: 32000
  experts: 8
  top_k: 2
  moe_ffn_hidden: 1024
  sliding_window: 512
  layers:
    - {attention: window, mlp: dense}
    - {attention: full, mlp: dense}
    - {repeat: 3, layers: [{attention: window, mlp: moe}, {attention: full, mlp: moe}]}
    - {mtp: true}
cluster: {preset: dgx-h100, gpus: 8}
job: {seq_len: 4096, global_batch: 32}
plan: {pp: 2}
solver: {max_micro_batch: 2, max_vp: 1}
"""


def test_a_model_from_a_yaml_layer_list_plans_to_proven_optimality_like_from_layers() -> None:
    from paraplan.graph import Attention, Block, Mtp, repeat

    scenario = yaml.safe_load(LAYERS_TOY)
    result = paraplan.solve(scenario, time_limit_s=30, workers=1)
    assert result.solver.status == "OPTIMAL"
    assert sum(result.plan.layers_per_stage) == 8
    # the scenario a result records holds the compiled fields, so it re-evaluates as it is
    model = result.scenario["model"]
    assert (model["layers"], model["first_dense_layers"], model["full_attention_every"]) == (8, 2, 2)
    assert model["mtp_layers"] == 1
    graph = LayerGraph.from_layers(
        [
            Block(Attention(window=512)),
            Block(),
            repeat(3, Block(Attention(window=512), "moe"), Block(mlp="moe")),
            Mtp(),
        ],
        name="toy-moe", hidden=2048, ffn_hidden=8192, num_heads=16, num_kv_heads=4, vocab=32000,
        num_experts=8, top_k=2, moe_ffn_hidden=1024,
    )  # fmt: skip
    from_python = paraplan.solve({**scenario, "model": graph}, time_limit_s=30, workers=1)
    assert from_python.plan == result.plan
    assert from_python.solver.objective_s == pytest.approx(result.solver.objective_s)


def test_a_pattern_with_the_default_legend_is_megatrons_hybrid_pattern() -> None:
    explicit = yaml.safe_load(yaml.safe_dump({"model": _scenario_model(SPEC)}))["model"]
    pattern = {**explicit, "layers": {"pattern": "M-M*- M-M*-M-"}}  # spaces are ignored
    del pattern["layer_pattern"]
    fixed = {"dp": 4, "tp": 1, "pp": 2, "micro_batch": 1, "zero": 1, "recompute": "none"}
    a = paraplan.evaluate({"model": pattern, "cluster": CLUSTER, "job": JOB, "plan": fixed})
    b = paraplan.evaluate({"model": SPEC, "cluster": CLUSTER, "job": JOB, "plan": fixed})
    assert a.predicted.step_time_s == b.predicted.step_time_s
    assert a.scenario["model"]["layer_pattern"] == SPEC.layer_pattern


def test_a_legend_names_blocks_of_its_own() -> None:
    model = {
        "name": "gemma-like",
        "hidden": 1024,
        "ffn_hidden": 4096,
        "heads": 8,
        "vocab": 32000,
        "activation": "geglu",
        "layers": {
            "pattern": "LLLLLG" * 2 + "LL",
            "legend": {
                "L": {"attention": {"window": 256}, "mlp": "dense"},
                "G": {"attention": "full", "mlp": "dense"},
            },
        },
    }
    res = paraplan.evaluate(
        {"model": model, "cluster": CLUSTER, "job": JOB, "plan": {**_FIXED, "pp": 1, "dp": 8}}
    )
    m = res.scenario["model"]
    assert (m["layers"], m["sliding_window"], m["full_attention_every"]) == (14, 256, 6)


_FIXED = {"dp": 4, "tp": 1, "pp": 2, "micro_batch": 1, "zero": 1, "recompute": "none"}


@pytest.mark.parametrize(
    ("layers", "extra", "match"),
    [
        ([{"attention": "full", "mlp": "sparse"}], {}, r"model\.layers\[0\]\.mlp='sparse' is not one of"),
        (
            [{"attention": "window", "mlp": "dense"}],
            {},
            r"model\.layers\[0\]\.attention=window needs model\.sliding_window",
        ),
        (
            [{"attention": {"window": 64}, "mlp": "dense"}, {"attention": {"window": 128}, "mlp": "dense"}],
            {},
            r"model\.layers\[1\]\.attention \(layer 1\): Attention\.window=128 differs from 64",
        ),
        (
            [
                {"repeat": 2, "layers": [{"attention": "full", "mlp": "dense"}]},
                {"attention": "full", "mlp": "moe"},
            ],
            {},
            r"model\.layers\[1\]\.mlp \(layer 2\): a MoE layer needs its experts",
        ),
        (
            [{"attention": "full", "mlp": "dense", "heads": 4}],
            {},
            r"model\.layers\[0\]\.heads is not a layer key",
        ),
        ({"pattern": "M-X"}, {}, r"model\.layers\.pattern\[2\] \('X'\) is not in the legend"),
        (
            {"pattern": "*-", "legend": {"WW": {"attention": "full"}}},
            {},
            "legend key 'WW' must be one character",
        ),
        ([{"attention": "full", "mlp": "dense", "repeat": 0}], {}, r"model\.layers\[0\]\.repeat=0 must be"),
        ([{"attention": "full", "mlp": "dense", "repeat": 10**6}], {}, "exceeds paraplan's limit"),
        (
            [{"attention": "full", "mlp": "dense"}],
            {"layer_pattern": "*-"},
            "model.layer_pattern is set by the layers list",
        ),
        ("twelve", {}, r"model\.layers: Input should be a valid integer"),
    ],
)
def test_a_bad_layer_list_is_refused_with_its_path_and_rule(layers, extra, match) -> None:
    model = {"hidden": 1024, "ffn_hidden": 4096, "heads": 8, "vocab": 32000, "layers": layers, **extra}
    with pytest.raises(ConfigError, match=match):
        paraplan.solve({"model": model, "cluster": CLUSTER, "job": JOB})


def test_the_cli_reports_a_bad_layer_list_without_a_traceback(tmp_path, capsys) -> None:
    from paraplan.cli import main

    scenario = yaml.safe_load(LAYERS_TOY)
    scenario["model"]["layers"][2]["layers"][0]["mlp"] = "sparse"
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario))
    assert main(["plan", str(path)]) == 1  # exit code 1: invalid input
    err = capsys.readouterr().err
    assert "model.layers[2].layers[0].mlp='sparse' is not one of 'dense', 'moe'" in err
    assert "Traceback" not in err


def _scenario_model(spec: ModelSpec) -> dict:
    from paraplan.graph import to_fields

    return to_fields(spec)
