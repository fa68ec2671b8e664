"""A user's first hour (issue 15): runnable plans by default, results that round-trip and travel,
presets listed, HF configs refused where paraplan does not model them, caps named or raised."""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
import yaml
from paraplan.graph import from_hf_config

import paraplan
from paraplan.errors import ConfigError
from paraplan.export import export_text
from paraplan.planning import TARGETS

ROOT = Path(__file__).resolve().parents[2]
QUICK_START = ROOT / "examples" / "llama3-70b-64xh100.yaml"
HF = ROOT / "graph" / "data" / "hf"
LLAMA8B_16 = {
    "model": {"preset": "llama3-8b"},
    "cluster": {"preset": "dgx-h100", "nodes": 2},
    "job": {"seq_len": 8192, "global_batch": 64, "precision": "bf16"},
}
# Llama 3.1 405B on 128 H100 at 4K x 128: the unrestricted optimum (ZeRO-2, pp 8 x vp 4, rank
# order cp-tp-dp-pp) runs on no framework; torchtitan runs the fastest runnable plan
LLAMA405B_128 = {
    "model": {"preset": "llama3.1-405b"},
    "cluster": {"preset": "dgx-h100", "nodes": 16},
    "job": {"seq_len": 4096, "global_batch": 128, "precision": "bf16"},
}


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "paraplan.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def _with(scenario: dict, **solver: object) -> dict:
    return {**scenario, "solver": {**scenario.get("solver", {}), **solver}}


@cache
def _solve(scenario_yaml: str) -> paraplan.Result:
    return paraplan.solve(yaml.safe_load(scenario_yaml), time_limit_s=120)


def solve(scenario: dict) -> paraplan.Result:
    return _solve(yaml.safe_dump(scenario, sort_keys=True))


# --------------------------------------------------------------------------- runnable by default


def test_default_plan_names_the_frameworks_that_run_it_and_each_exports_it() -> None:
    r = solve(yaml.safe_load(QUICK_START.read_text()))
    assert r.solver.target is None and r.runs_on
    for name in r.runs_on:
        assert export_text(r, name)  # no ExportError
    for name in set(TARGETS) - set(r.runs_on):
        with pytest.raises(paraplan.ExportError):
            export_text(r, name)


def test_default_is_the_fastest_plan_over_every_frameworks_own_search() -> None:
    default = solve(LLAMA8B_16)
    per_target = {t: solve(_with(LLAMA8B_16, target=t)).predicted.step_time_s for t in TARGETS}
    fastest = min(per_target.values())
    assert default.predicted.step_time_s == pytest.approx(fastest, rel=1e-6)
    assert {t for t, s in per_target.items() if s <= fastest * (1 + 1e-6)} & set(default.runs_on)


@pytest.mark.slow
def test_default_is_one_search_and_as_fast_as_every_frameworks_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 26: the runnable default is one branch and bound over the union of the frameworks'
    spaces (one solver call), and its optimum is the fastest over every framework's own search."""
    import paraplan.planning as search

    real, calls = search.solve_instance, []

    def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(search, "solve_instance", counted)
    r = paraplan.solve(LLAMA405B_128, time_limit_s=120)
    assert len(calls) == 1
    monkeypatch.setattr(search, "solve_instance", real)
    own = []
    for t in TARGETS:
        try:
            own.append(solve(_with(LLAMA405B_128, target=t)).predicted.step_time_s)
        except paraplan.InfeasibleError:  # e.g. torchtitan's 405B trains in float8 only
            continue
    fastest = min(own)
    assert r.runs_on and r.predicted.step_time_s == pytest.approx(fastest, rel=1e-6)
    assert r.solver.status == "OPTIMAL"


def test_default_with_no_runnable_layout_names_each_refusal_and_the_unrestricted_optimum() -> None:
    """A rank order no framework builds, fixed: the one search finds nothing; the error names
    each framework's refusal and the unrestricted optimum (searched only on this failure)."""
    scenario = {**LLAMA8B_16, "plan": {"tp": 2, "pp": 2, "order": ["pp", "dp", "tp", "cp"]}}
    with pytest.raises(paraplan.InfeasibleError) as err:
        paraplan.solve(scenario, time_limit_s=60)
    message = str(err.value)
    assert "no framework runs any layout" in message and "Megatron's rank orders" in message
    assert "nemo refused what megatron refused" in message
    assert "the unrestricted optimum (" in message and "--target any" in message


@pytest.mark.slow
def test_default_refuses_an_unrestricted_optimum_no_framework_runs() -> None:
    # at the edge of memory (no headroom) the unrestricted optimum of this job runs on no
    # framework; under the default headroom (the memory band's margin) it happens to run on two
    edge = _with(LLAMA405B_128, memory_headroom=0)
    free = solve(_with(edge, target="any"))
    assert free.solver.target == "any" and free.runs_on == []
    default = solve(edge)
    assert default.runs_on and default.solver.status == "OPTIMAL"
    own = solve(_with(edge, target=default.runs_on[0]))  # that framework's own optimum
    assert free.predicted.step_time_s < default.predicted.step_time_s
    assert default.predicted.step_time_s == pytest.approx(own.predicted.step_time_s, rel=1e-6)
    assert all(a.runs_on for a in default.alternatives)
    for name in default.runs_on:
        assert export_text(default, name)


@pytest.mark.slow
def test_text_output_says_where_the_plan_runs(tmp_path: Path) -> None:
    r = run("plan", str(QUICK_START))
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("runs on: "))
    names = line.removeprefix("runs on: ").split(", ")
    assert names and set(names) <= set(TARGETS)
    data = json.loads(run("plan", str(QUICK_START), "--json").stdout)
    assert data["runs_on"] == names
    r = run("plan", str(QUICK_START), "--target", "any")
    assert r.returncode == 0 and "unrestricted optimum" in r.stdout


def test_evaluate_reports_runs_on() -> None:
    r = paraplan.evaluate(ROOT / "examples" / "llama3-70b-h100.yaml")
    assert "megatron" in r.runs_on and "nemo" in r.runs_on


# --------------------------------------------------------------------------- sharp edges


def test_a_fixed_vp_above_the_default_cap_raises_the_cap() -> None:
    r = solve({**LLAMA8B_16, "plan": {"pp": 2, "vp": 8}, "solver": {"target": "any"}})
    assert (r.plan.pp, r.plan.vp) == (2, 8)


def test_presets_lists_models_and_clusters() -> None:
    r = run("presets")
    assert r.returncode == 0, r.stderr
    assert "llama3.1-405b" in r.stdout and "dgx-h100" in r.stdout
    data = json.loads(run("presets", "--json").stdout)
    by_name = {m["name"]: m for m in data["models"]}
    llama = by_name["llama3.1-405b"]
    assert (llama["layers"], llama["hidden"], llama["heads"], llama["kv_heads"]) == (126, 16384, 128, 8)
    assert 400e9 < llama["params"] < 410e9 and llama["source"]
    assert by_name["mixtral-8x7b"]["experts"] == 8
    assert {"dgx-h100", "gb200-nvl72"} <= {c["name"] for c in data["clusters"]}


GEMMA = {
    "model_type": "gemma",
    "hidden_size": 3072,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "num_hidden_layers": 28,
    "intermediate_size": 24576,
    "vocab_size": 256000,
    "head_dim": 256,
    "hidden_act": "gelu_pytorch_tanh",
    "hidden_activation": "gelu_pytorch_tanh",
}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({}, "model_type='gemma'"),
        ({"model_type": "llama"}, "hidden_activation"),
        ({"model_type": "llama", "hidden_activation": None, "hidden_act": "gelu"}, "hidden_act"),
    ],
)
def test_hf_import_refuses_gemma(change: dict, field: str) -> None:
    cfg = {k: v for k, v in {**GEMMA, **change}.items() if v is not None}
    with pytest.raises(ValueError, match=rf"model\.hf_config: {field}"):
        from_hf_config(cfg)


def test_hf_import_refuses_unknown_rope_scaling_and_sliding_windows() -> None:
    llama = json.loads((HF / "llama3-8b.json").read_text())
    with pytest.raises(ValueError, match="rope_scaling type 'mrope'"):
        from_hf_config({**llama, "rope_scaling": {"type": "mrope", "factor": 2.0}})
    qwen = {**llama, "model_type": "qwen2", "sliding_window": 4096, "use_sliding_window": True}
    with pytest.raises(ValueError, match="sliding_window=4,096 is not modelled"):
        from_hf_config(qwen)
    assert from_hf_config({**qwen, "use_sliding_window": False}).num_layers == 32
    with pytest.raises(ValueError, match="original_max_positions"):  # incomplete: say so
        from_hf_config({**llama, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}})
    assert from_hf_config(
        {
            **llama,
            "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192},
        }
    )


def test_hf_refusal_is_a_config_error_in_a_scenario(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(GEMMA))
    with pytest.raises(ConfigError, match="model_type='gemma'"):
        paraplan.evaluate(
            {
                "model": {"hf_config": str(cfg)},
                "cluster": {"preset": "dgx-h100", "nodes": 1},
                "job": {"seq_len": 4096, "global_batch": 8},
                "plan": {"dp": 8, "tp": 1, "pp": 1, "micro_batch": 1, "zero": 1, "recompute": "full"},
            }
        )


# --------------------------------------------------------------------------- results travel


def test_result_file_is_self_contained(tmp_path: Path) -> None:
    """A result keeps absolute config paths, so `paraplan export` works from another folder."""
    work = tmp_path / "project"
    work.mkdir()
    (work / "config.json").write_text((HF / "llama3-8b.json").read_text())
    (work / "job.yaml").write_text(
        yaml.safe_dump(
            {
                "model": {"hf_config": "config.json"},
                "cluster": {"preset": "dgx-h100", "nodes": 1},
                "job": {"seq_len": 8192, "global_batch": 64},
            }
        )
    )
    r = run("plan", "job.yaml", "--json", cwd=work)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert Path(result["scenario"]["model"]["hf_config"]).is_absolute()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "r.json").write_text(r.stdout)
    name = result["runs_on"][0]
    r = run("export", "r.json", "--to", name, cwd=elsewhere)
    assert r.returncode == 0, r.stderr
    r = run("evaluate", "r.json", "--json", cwd=elsewhere)
    assert r.returncode == 0, r.stderr
    again = json.loads(r.stdout)
    assert again["predicted"]["step_time_s"] == result["predicted"]["step_time_s"]
    assert again["plan"] == result["plan"]


def test_result_plan_with_wrong_derived_values_is_refused() -> None:
    r = solve(LLAMA8B_16)
    plan = r.plan.model_dump()
    with pytest.raises(ConfigError, match="plan.grad_accum"):
        paraplan.evaluate({**r.scenario, "plan": {**plan, "grad_accum": plan["grad_accum"] + 1}})
    with pytest.raises(ConfigError, match="plan.num_devices"):
        paraplan.evaluate({**r.scenario, "plan": {**plan, "num_devices": 2 * plan["num_devices"]}})
    other = "full" if plan["recompute"] != "full" else "none"
    with pytest.raises(ConfigError, match="plan.recompute_per_stage"):
        paraplan.evaluate({**r.scenario, "plan": {**plan, "recompute": other}})


FAST_BENCHMARKS = sorted(
    p
    for p in (ROOT / "benchmarks" / "scenarios").glob("*.yaml")
    if any(k in p.name for k in ("-8-", "-16-", "-32-", "mixed", "qwen3-30b", "gb200-144-s8k"))
)


@pytest.mark.parametrize("path", FAST_BENCHMARKS, ids=lambda p: p.stem)
def test_result_plan_round_trips_as_a_scenario_plan(path: Path) -> None:
    """Issue 12: evaluate of the scenario with `plan:` = result.plan as returned (no key stripped)
    gives the same step time, for the plan of each runnable default and the unrestricted one;
    issue 15: the default plan exports to every framework in its runs_on, and it names one."""
    scenario = yaml.safe_load(path.read_text())
    scenario.pop("bench", None)
    for target in (None, "any"):
        r = solve(_with(scenario, target=target) if target else scenario)
        again = paraplan.evaluate({**r.scenario, "plan": r.plan.model_dump()})
        assert again.predicted.step_time_s == r.predicted.step_time_s
        assert again.plan == r.plan and again.runs_on == r.runs_on
        assert paraplan.evaluate(r).predicted.step_time_s == r.predicted.step_time_s
    assert solve(scenario).runs_on
    for name in solve(scenario).runs_on:  # the default plan exports to each framework it names
        assert export_text(solve(scenario), name)


SOLVE_ROUND_TRIP = [
    "llama3-8b-h100-8-s8k-b128",  # dense GPU
    "qwen3-30b-a3b-h100-16-s4k-b512",  # mixture of experts (its dispatcher, overlap, CUDA graphs)
    "llama3-8b-mixed-h100-a100-64-s4k-b512",  # pooled cluster (stage_pools)
    "llama3-8b-tpu-v5e-256-s8k-b256",  # TPU slice (torus_shape)
]


@pytest.mark.parametrize("name", SOLVE_ROUND_TRIP)
def test_result_plan_round_trips_through_solve(name: str) -> None:
    """Issue 26: solve of the scenario with `plan:` = result.plan as returned (every knob, empty
    lists included) gives the same plan and step time, for the default and the unrestricted
    optimum; empty torus_shape / stage_pools on a GPU / single-pool cluster mean none."""
    scenario = yaml.safe_load((ROOT / "benchmarks" / "scenarios" / f"{name}.yaml").read_text())
    scenario.pop("bench", None)
    for target in (None, "any"):
        r = solve(_with(scenario, target=target) if target else scenario)
        fixed = r.plan.model_dump()
        assert set(fixed) >= {"torus_shape", "stage_pools", "moe_dispatcher", "moe_overlap", "cuda_graphs"}
        again = paraplan.solve({**r.scenario, "plan": fixed}, time_limit_s=120)
        assert again.plan == r.plan, name
        assert again.predicted.step_time_s == r.predicted.step_time_s, name
        assert again.runs_on == r.runs_on


def test_a_calibrated_result_keeps_its_profile(tmp_path: Path) -> None:
    """--calibration PROFILE is recorded (absolute) in the result's scenario, so exports and
    `paraplan evaluate RESULT.json` from elsewhere score the same calibrated plan."""
    (tmp_path / "p.yaml").write_text(
        yaml.safe_dump({"accelerators": {"hopper": {"parameters": {"gemm_bf16": 0.3}}}})
    )
    scenario = {
        **LLAMA8B_16,
        "cluster": {"preset": "dgx-h100", "nodes": 1},
        "plan": {"dp": 8, "tp": 1, "pp": 1, "micro_batch": 1, "zero": 1, "recompute": "none"},
    }
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(scenario))
    r = run("evaluate", "s.yaml", "--calibration", "p.yaml", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    calibrated = json.loads(r.stdout)
    assert calibrated["scenario"]["calibration"] == str(tmp_path / "p.yaml")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "r.json").write_text(r.stdout)
    r = run("evaluate", "r.json", "--json", cwd=elsewhere)
    assert r.returncode == 0, r.stderr
    again = json.loads(r.stdout)["predicted"]["step_time_s"]
    assert again == calibrated["predicted"]["step_time_s"]
    assert again > 1.2 * paraplan.evaluate(scenario).predicted.step_time_s
