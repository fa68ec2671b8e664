"""Issue 26: a result's plan document, as returned (nothing stripped: its ``torus_shape: []``,
``stage_pools: []``, ``recompute_per_stage``, ``grad_accum``, ...), fixed as a scenario's
``plan:`` gives the same plan and step time through ``paraplan.evaluate`` and ``paraplan.solve``:
both read the document the one way (plan_knobs.fixed_knobs_of). Over every benchmark scenario (the
large ones marked slow) and over results of the fuzz suite's valid scenarios."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import paraplan
from benchmarks.fuzz_cases import RandomDraw, valid_case
from paraplan.errors import InfeasibleError, ParaplanError
from paraplan.result import Result

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((ROOT / "benchmarks" / "scenarios").glob("*.yaml"))
FAST = frozenset(
    {
        "gpt3-1.3b-a100-40gb-8-s2k-b512",
        "gpt3-1.3b-h100-8-s32k-b32",
        "gpt3-2.7b-a100-40gb-16-s2k-b512",
        "gpt3-2.7b-h100-8-s4k-b256",
        "gpt3-6.7b-a100-80gb-32-s2k-b1024",
        "gpt3-6.7b-b200-16-s8k-b256",
        "gpt3-13b-a100-80gb-64-s2k-b1024",
        "gpt3-13b-h100-128-s4k-b512",
        "llama2-7b-a100-80gb-32-s4k-b512",
        "llama2-7b-h100-8-s4k-b128",
        "llama2-13b-b200-32-s4k-b512",
        "llama2-13b-h100-16-s4k-b128",
        "llama3-8b-b200-8-s8k-b128",
        "llama3-8b-h100-8-s8k-b128",
        "llama3-8b-h100-64-s16k-b128",
        "llama3-8b-h200-32-s32k-b64",
        "llama3-8b-tpu-v5e-256-s8k-b256",  # a TPU slice (torus_shape)
        "llama3.1-8b-h100-16-s32k-b64",
        "llama3.1-70b-h200-64-s8k-b256",
        "llama3-70b-gb200-64-s8k-b128",
        "nemotron3-nano-30b-a3b-b300-8-s8k-b512",  # hybrid Mamba / MoE
    }
)
"""The benchmark scenarios that plan in about a second or two on a loaded 2-core machine
(measured 2026-12-01); the others are marked slow (up to a few minutes: DeepSeek-V3 on 2,048
H800, GPT-1T on 3,072 A100). The pooled and MoE round trips of the fast suite are
tests/cli/test_first_hour.py's."""


def assert_round_trips(r: Result, **solve_args: object) -> None:
    """evaluate and solve of r's scenario with plan: = r.plan as returned give r's plan and step."""
    fixed = r.plan.model_dump()
    assert {"torus_shape", "stage_pools", "recompute_per_stage", "grad_accum", "num_devices"} <= set(fixed)
    scenario = {**r.scenario, "plan": fixed}
    scored = paraplan.evaluate(scenario)
    assert scored.plan == r.plan
    assert scored.predicted.step_time_s == r.predicted.step_time_s
    solved = paraplan.solve(scenario, **{"time_limit_s": 120.0, **solve_args})  # type: ignore[arg-type]
    assert solved.plan == r.plan
    assert solved.predicted.step_time_s == r.predicted.step_time_s
    assert solved.runs_on == r.runs_on


@pytest.mark.parametrize(
    "path",
    [p if p.stem in FAST else pytest.param(p, marks=pytest.mark.slow) for p in SCENARIOS],
    ids=lambda p: p.stem,
)
def test_a_benchmark_result_plan_round_trips(path: Path) -> None:
    scenario = yaml.safe_load(path.read_text())
    scenario.pop("bench", None)
    try:
        r = paraplan.solve(scenario, time_limit_s=600)
    except InfeasibleError as e:
        # only where the default headroom (the memory band's margin) is what refuses every plan
        # (Llama 4 Maverick on 1,024 H100: 75.5 GiB least against 71.6); at the edge it plans
        assert "would fit without the" in str(e) and "solver.memory_headroom" in str(e), e
        scenario["solver"] = {**scenario.get("solver", {}), "memory_headroom": 0}
        r = paraplan.solve(scenario, time_limit_s=600)
    assert_round_trips(r)


def test_the_fast_scenarios_are_benchmark_files() -> None:
    assert FAST <= {p.stem for p in SCENARIOS}


FUZZ_SEEDS = (1, 4, 8, 12, 15, 18, 21, 22)
"""benchmarks/fuzz_cases.valid_case seeds whose scenario solves (dict scenarios, no HF files),
drawn ``consistent`` (no tp or pp the sizes rule out: seed 1 drew tp 5 for 32 devices)."""


@pytest.mark.parametrize("seed", FUZZ_SEEDS)
def test_a_fuzz_result_plan_round_trips(seed: int) -> None:
    case = valid_case(RandomDraw(seed), consistent=True)
    assert isinstance(case.scenario, dict) and not case.files
    try:
        r = paraplan.solve(case.scenario, **case.args)
    except ParaplanError as e:  # the generator changed: the fuzz suite judges that answer
        pytest.skip(f"seed {seed} no longer solves: {e}")
    assert_round_trips(r, workers=case.args["workers"], seed=case.args["seed"])
