"""Mixed-GPU clusters from the front door: scenario errors, the 50/50 H100/A100 done-when check,
determinism, JSON/explain output and exports of a pooled plan."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

import paraplan
from paraplan import ConfigError
from paraplan.errors import ExportError
from paraplan.export import export_text

EXAMPLE = Path(__file__).parent.parent / "examples" / "mixed-h100-a100.yaml"
H100 = {"preset": "dgx-h100", "nodes": 4}
A100 = {"preset": "dgx-a100-80gb", "nodes": 4}
SMALL = {
    "model": {"preset": "llama3-8b"},
    "cluster": {"pools": [{"preset": "dgx-h100", "nodes": 1}, {"preset": "dgx-a100-80gb", "nodes": 1}]},
    "job": {"seq_len": 4096, "global_batch": 64},
}


def _cluster(cluster: dict) -> dict:
    return {**SMALL, "cluster": cluster}


@pytest.mark.parametrize(
    ("cluster", "pattern"),
    [
        ({"pools": []}, r"cluster: .*at least one pool"),
        ({"pools": [H100], "preset": "dgx-h100"}, r"either cluster\.pools or cluster\.preset"),
        ({"pools": [{"preset": "dgx-h100"}]}, r"exactly one of nodes or gpus"),
        (
            {"pools": [H100, {"preset": "dgx-z900", "nodes": 1}]},
            r"cluster\.pools\[1\]\.preset='dgx-z900' is not a known preset",
        ),
        ({"pools": [{"preset": "dgx-h100", "nodes": 0}]}, r"cluster\.pools\.0\.nodes: .*greater than"),
        ({}, r"give cluster\.preset \(with nodes or gpus\) or cluster\.pools"),
    ],
)
def test_bad_pools_name_the_field(cluster: dict, pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern):
        paraplan.solve(_cluster(cluster), time_limit_s=5)


def test_evaluate_rejects_stages_not_matching_pools() -> None:
    scenario = {
        **SMALL,
        "plan": {
            "dp": 1,
            "tp": 8,
            "pp": 2,
            "micro_batch": 1,
            "zero": 1,
            "recompute": "none",
            "stage_pools": [0, 0],
        },
    }
    with pytest.raises(ConfigError, match=r"stage_pools=\[0, 0\]: a used pool hosts all"):
        paraplan.evaluate(scenario)


def test_stage_pools_on_a_single_node_type_is_refused() -> None:
    scenario = {**SMALL, "cluster": H100, "plan": {"stage_pools": [0]}}
    with pytest.raises(ConfigError, match=r"plan\.stage_pools=\[0\] needs a mixed-GPU cluster"):
        paraplan.solve(scenario, time_limit_s=5)


def test_cli_report_shows_the_pool_of_each_stage(capsys: pytest.CaptureFixture[str]) -> None:
    from paraplan.cli import main

    assert main(["plan", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "stage  pool  layers" in out and "stage_pools=[" in out


def test_evaluate_defaults_to_every_pool_in_order() -> None:
    scenario = {
        **SMALL,
        "plan": {
            "dp": 1,
            "tp": 8,
            "pp": 2,
            "micro_batch": 1,
            "zero": 1,
            "recompute": "none",
            "layers_per_stage": [18, 14],
        },
    }
    r = paraplan.evaluate(scenario)
    assert r.plan.stage_pools == [0, 1]
    assert [s.pool for s in r.predicted.stages] == [0, 1]


@cache
def _solved(cluster_key: str) -> paraplan.Result:
    cluster = {"pooled": None, "h100": H100, "a100": A100}[cluster_key]
    if cluster is None:
        return paraplan.solve(EXAMPLE, time_limit_s=120, workers=2)
    scenario = paraplan.load_scenario(EXAMPLE).model_dump(mode="json", exclude_none=True)
    return paraplan.solve({**scenario, "cluster": cluster}, time_limit_s=120, workers=2)


def test_half_h100_half_a100_beats_the_best_single_pool_plan() -> None:
    """Issue 6 done-when: the 50/50 H100/A100 plan is faster in the model than the best plan on
    either pool alone (same solver, same job, the cluster restricted to one pool)."""
    pooled, h100, a100 = _solved("pooled"), _solved("h100"), _solved("a100")
    for r in (pooled, h100, a100):
        assert r.solver is not None and r.solver.status == "OPTIMAL"
    assert pooled.predicted.step_time_s < min(h100.predicted.step_time_s, a100.predicted.step_time_s)
    assert sorted(set(pooled.plan.stage_pools)) == [0, 1]  # it runs on both pools
    # the faster H100s carry more layers per stage than the A100s
    by_pool: dict[int, list[int]] = {0: [], 1: []}
    for s in pooled.predicted.stages:
        assert s.pool is not None
        by_pool[s.pool].append(s.layers)
    assert min(by_pool[0]) > max(by_pool[1])


def test_pooled_plan_is_explained_and_exported() -> None:
    r = _solved("pooled")
    assert any(line.startswith("pools: pool ") for line in r.explanation)
    assert paraplan.Result.model_validate_json(r.model_dump_json()) == r
    script = export_text(r, "megatron")
    assert "mixed-GPU cluster: launch each pool's nodes with these node ranks" in script
    assert "--nnodes 8" in script
    with pytest.raises(ExportError, match="mixed-GPU cluster"):
        export_text(r, "deepspeed")


def test_pooled_solve_is_deterministic_across_workers() -> None:
    one = paraplan.solve(SMALL, time_limit_s=60, workers=1)
    two = paraplan.solve(SMALL, time_limit_s=60, workers=2)
    assert one.plan == two.plan
    assert one.predicted.step_time_s == two.predicted.step_time_s
