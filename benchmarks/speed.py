"""The planner issue's speed table: solve times on this machine, with 2 CP-SAT workers.

    python -m benchmarks.speed [--quick]

1. Llama-3.1-405B on 16,384 H100 (2,048 DGX nodes), seq 8192, global batch 2048.
2. Every dense preset on 8 to 16,384 GPUs (median and maximum over the grid).
3. A 126-layer model with uneven stages and per-stage recompute free (Llama-3.1-405B on 512 H100).
4. Mixture of experts: DeepSeek-V3 on 2,048 H800 (seq 4096, batch 15360, FP8) and Qwen3-235B-A22B
   on 256 GB200 (4 NVL72 racks of 16 compute trays; seq 4096, batch 2048, FP8), ep/etp free.
5. Exhaustive enumeration of the same spaces, side by side, with the ratio: on the full spaces it
   does not finish within its budget (the ratio is then a lower bound), so it is also timed on
   reduced spaces it can finish (even splits, one recompute mode for every stage), each preset on
   8 and 64 GPUs, where both must find the same optimum.
6. Per framework (``solver.target``): the 405B and DeepSeek-V3 scenarios planned for each target,
   with the step time against the unrestricted optimum.
7. ``--vs-any``: only the runnable default (no ``solver.target``) against ``solver.target: any``
   on the headline scenarios (``VS_ANY``), each solved in turn so both see the same machine load
   (issue 26's goal: the default within 1.3x of ``any``), wall and CPU seconds; ``--only WORD``
   keeps the scenarios whose label contains WORD, ``--repeat N`` keeps the least of N solves.
8. ``--serving``: only the serving scenarios of issue 23 (``SERVING_EXAMPLES``: Llama 3.1 70B on 8
   H200 and Qwen3-235B-A22B on 16 B200, aggregated or disaggregated; DeepSeek-V3 on one GB200
   NVL72 rack, disaggregated), each with its status and candidate count; also run after the
   MoE scenarios of the full run.
Every number is measured by the run; times are wall-clock seconds, model building included, and
the process CPU seconds next to them (CP-SAT's 2 workers count twice; on a loaded machine CPU
seconds are the steadier figure).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time

from paraplan.solver.enumerate import EnumerationBudgetExceeded, enumerate_plans

import paraplan
from paraplan.api import fixed_knobs, search_options
from paraplan.instance import build_instance

PRESETS = [
    "gpt3-1.3b",
    "gpt3-6.7b",
    "llama2-7b",
    "llama3-8b",
    "llama2-13b",
    "gpt3-13b",
    "llama2-70b",
    "llama3-70b",
    "gpt3-175b",
    "llama3.1-405b",
]
NODES = [1, 8, 64, 512, 2048]
MOE_SCENARIOS = {
    "DeepSeek-V3 on 2,048 H800": {
        "model": {"preset": "deepseek-v3"},
        "cluster": {"preset": "hgx-h800", "gpus": 2048},
        "job": {"seq_len": 4096, "global_batch": 15360, "precision": "fp8"},
    },
    "Qwen3-235B-A22B on 256 GB200": {
        "model": {"preset": "qwen3-235b-a22b"},
        "cluster": {"preset": "gb200-nvl72-64", "gpus": 256},
        "job": {"seq_len": 4096, "global_batch": 2048, "precision": "fp8"},
    },
}


def hybrid_128() -> dict:
    """A 128-layer hybrid model (Nemotron-H 56B's Mamba-2 / attention / MLP layers, its pattern
    repeated to 128 layers, hidden 8192) as explicit fields: the issue's heterogeneous bound."""
    from dataclasses import replace

    from paraplan.graph import preset, to_fields

    pattern = (("M-M-M-M*-" * 15)[:126] + "M-")[:128]
    spec = replace(preset("nemotron-h-56b"), name="hybrid-128", num_layers=128, layer_pattern=pattern)
    return to_fields(spec)


HETEROGENEOUS_SCENARIOS = {
    "128-layer hybrid (Mamba-2/attention/MLP) on 1,024 A100 40GB": {
        "model": hybrid_128(),
        "cluster": {"preset": "dgx-a100-40gb", "nodes": 128},
        "job": {"seq_len": 4096, "global_batch": 2048},
    },
    "Nemotron-H 56B on 1,024 H100": {
        "model": {"preset": "nemotron-h-56b"},
        "cluster": {"preset": "dgx-h100", "nodes": 128},
        "job": {"seq_len": 8192, "global_batch": 1024},
    },
    "Llama 4 Maverick on 1,024 H100": {
        "model": {"preset": "llama4-maverick"},
        "cluster": {"preset": "dgx-h100", "nodes": 128},
        "job": {"seq_len": 8192, "global_batch": 1024},
    },
}
"""Models whose layers differ (kinds placed by position, solver/constraints/positions.py)."""


def _vs_any_scenarios() -> dict[str, dict]:
    """The headline scenarios of the default-against-``any`` table (module docstring, 7)."""
    return {
        "Llama 3.1 405B on 16,384 H100": _scenario("llama3.1-405b", 2048, batch=2048),
        "405B (126 layers) on 512 H100": _scenario("llama3.1-405b", 64, batch=512),
        "GPT-3 175B on 1,024 A100": {
            "model": {"preset": "gpt3-175b"},
            "cluster": {"preset": "dgx-a100-80gb", "nodes": 128},
            "job": {"seq_len": 2048, "global_batch": 1536},
        },
        "GPT-3 175B on 64 H100": _scenario("gpt3-175b", 8),
        "Llama 3 70B on 64 H100": {
            "model": {"preset": "llama3-70b"},
            "cluster": {"preset": "dgx-h100", "nodes": 8},
            "job": {"seq_len": 8192, "global_batch": 128, "precision": "fp8"},
        },
        "Llama 4 Scout on 64 H100": {
            "model": {"preset": "llama4-scout"},
            "cluster": {"preset": "dgx-h100", "nodes": 8},
            "job": {"seq_len": 8192, "global_batch": 128},
        },
        **MOE_SCENARIOS,
        **HETEROGENEOUS_SCENARIOS,
    }


def _vs_any(only: str | None, repeat: int = 1) -> None:
    """The runnable default against ``solver.target: any`` (module docstring, 7): after one
    small warm-up solve (imports and caches load once, not in the first scenario's time), each
    scenario solved ``repeat`` times each way in turn, the least wall and CPU seconds kept."""
    _timed_solve(_scenario("gpt3-1.3b", 1))
    print(
        "| scenario | default s | CPU s | status | step s | any s | CPU s | status | step s "
        "| default / any (wall) | (CPU) |\n|---|---|---|---|---|---|---|---|---|---|---|"
    )
    for label, scenario in _vs_any_scenarios().items():
        if only and only.lower() not in label.lower():
            continue
        runs: dict[bool, list[tuple[float, str, float, float]]] = {True: [], False: []}
        for _ in range(repeat):
            runs[True].append(_timed_solve(scenario))
            runs[False].append(_timed_solve({**scenario, "solver": {"target": "any"}}))
        (wall, cpu), (any_wall, any_cpu) = (
            (min(r[0] for r in runs[d]), min(r[3] for r in runs[d])) for d in (True, False)
        )
        _, status, step, _ = runs[True][0]
        _, any_status, any_step, _ = runs[False][0]
        print(
            f"| {label} | {wall:.2f} | {cpu:.2f} | {status} | {step:.4f} | {any_wall:.2f} | {any_cpu:.2f} "
            f"| {any_status} | {any_step:.4f} | {wall / any_wall:.2f}x | {cpu / any_cpu:.2f}x |",
            flush=True,
        )


def _scenario(model: str, nodes: int, seq: int = 8192, batch: int | None = None) -> dict:
    """DGX H100 nodes; global batch one sequence per 4 GPUs, at least 64, unless given."""
    gpus = 8 * nodes
    return {
        "model": {"preset": model},
        "cluster": {"preset": "dgx-h100", "nodes": nodes},
        "job": {"seq_len": seq, "global_batch": batch or max(64, gpus // 4)},
    }


def _solve(scenario: dict, limit: float = 120.0) -> tuple[float, str, float]:
    wall, status, step, _ = _timed_solve(scenario, limit)
    return wall, status, step


def _timed_solve(scenario: dict, limit: float = 120.0) -> tuple[float, str, float, float]:
    """(wall s, status, step s, CPU s) of one solve."""
    t, c = time.perf_counter(), time.process_time()
    try:
        r = paraplan.solve(scenario, time_limit_s=limit, workers=2)
        status, step = r.solver.status, r.predicted.step_time_s
    except paraplan.InfeasibleError:
        status, step = "INFEASIBLE", float("nan")
    except paraplan.SolveTimeout:
        status, step = "TIMEOUT", float("nan")
    return time.perf_counter() - t, status, step, time.process_time() - c


def _enumeration(scenario: dict, budget_s: float) -> tuple[float | None, float]:
    """(wall s or None when over budget, best step s) of exhaustive enumeration of the same
    space as the solver's (the scenario's fixed knobs and solver options)."""
    inst = build_instance(paraplan.load_scenario(scenario), search=True)
    try:
        e = enumerate_plans(
            inst.graph, inst.cluster, inst.job, fixed_knobs(inst), search_options(inst), budget_s
        )
    except EnumerationBudgetExceeded:
        return None, float("nan")
    return e.wall_s, e.best_s if e.best is not None else float("nan")


def _enumerate(scenario: dict, budget_s: float) -> str:
    wall, _ = _enumeration(scenario, budget_s)
    return f"> {budget_s:.0f} s (not finished)" if wall is None else f"{wall:.1f} s"


SERVING_EXAMPLES = {
    "Llama 3.1 70B on 8 H200 (serve)": "examples/serve-llama3-70b-8xh200.yaml",
    "Qwen3-235B-A22B on 16 B200 (serve)": "examples/serve-qwen3-235b-16xb200.yaml",
    "DeepSeek-V3 on 72 GB200, disaggregated (serve)": "examples/serve-deepseek-v3-72xgb200-disagg.yaml",
}


def _serving() -> None:
    """The serving scenarios: wall and CPU seconds of ``paraplan.solve`` (issue 23 targets:
    OPTIMAL in <= 2 s for the first two, <= 10 s for DeepSeek-V3 disaggregated)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    print("\n| serving scenario | solve s | CPU s | status | candidates | plan |\n|---|---|---|---|---|---|")
    for label, path in SERVING_EXAMPLES.items():
        from paraplan.serving.explain import serving_summary
        from paraplan.serving.result import plan_from_out

        start, cpu0 = time.perf_counter(), time.process_time()
        r = paraplan.solve(str(root / path), time_limit_s=60.0, workers=2)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
        assert r.solver is not None
        print(
            f"| {label} | {wall:.2f} | {cpu:.2f} | {r.solver.status} | {r.solver.num_candidates:,} | "
            f"{serving_summary(plan_from_out(r.plan))} |",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few grid points only")
    parser.add_argument("--enumeration-budget", type=float, default=120.0)
    parser.add_argument("--vs-any", action="store_true", help="only the default against target: any")
    parser.add_argument("--only", help="with --vs-any: the scenarios whose label contains this")
    parser.add_argument("--repeat", type=int, default=1, help="with --vs-any: solves each way, least kept")
    parser.add_argument("--serving", action="store_true", help="only the serving scenarios (issue 23)")
    args = parser.parse_args(argv)
    print(
        f"# paraplan {paraplan.__version__} speed, {platform.processor() or platform.machine()}, "
        f"{time.strftime('%Y-%m-%d')}, 2 CP-SAT workers\n"
    )
    if args.vs_any:
        _vs_any(args.only, args.repeat)
        return 0
    if args.serving:
        _serving()
        return 0

    flagship = _scenario("llama3.1-405b", 2048, batch=2048)
    wall, status, step = _solve(flagship)
    print(
        f"405B on 16,384 H100: {wall:.2f} s, {status}, step {step:.3f} s; enumeration "
        f"{_enumerate(flagship, args.enumeration_budget)}"
    )

    uneven = _scenario("llama3.1-405b", 64, batch=512)
    wall, status, step = _solve(uneven)
    print(f"126 layers, uneven stages + per-stage recompute, 512 H100: {wall:.2f} s, {status}")

    for label, scenario in MOE_SCENARIOS.items():
        wall, status, step = _solve(scenario)
        print(f"{label}: {wall:.2f} s, {status}, step {step:.3f} s")
    _serving()
    if not args.quick:
        for label, scenario in HETEROGENEOUS_SCENARIOS.items():
            wall, status, step = _solve(scenario)
            print(f"{label}: {wall:.2f} s, {status}, step {step:.3f} s")

    grid = [(m, n) for m in PRESETS for n in NODES]
    if args.quick:
        grid = [("llama3-8b", 1), ("llama3-70b", 8), ("gpt3-175b", 64)]
    times, cpus = [], []
    print("\n| model | GPUs | solve s | CPU s | status | step s |\n|---|---|---|---|---|---|")
    for model, nodes in grid:
        wall, status, step, cpu = _timed_solve(_scenario(model, nodes))
        times.append(wall)
        cpus.append(cpu)
        print(f"| {model} | {8 * nodes} | {wall:.2f} | {cpu:.2f} | {status} | {step:.3f} |", flush=True)
    print(
        f"\npresets x 8..16,384 GPUs: median {statistics.median(times):.2f} s, "
        f"max {max(times):.2f} s over {len(times)} solves (CPU: median "
        f"{statistics.median(cpus):.2f} s, max {max(cpus):.2f} s)"
    )
    _side_by_side(grid if args.quick else [(m, n) for m in PRESETS for n in (1, 8)], args.enumeration_budget)
    _per_target(
        {
            "405B on 16,384 H100": flagship,
            **(
                {}
                if args.quick
                else {"DeepSeek-V3 on 2,048 H800": MOE_SCENARIOS["DeepSeek-V3 on 2,048 H800"]}
            ),
        }
    )
    return 0


def _per_target(scenarios: dict[str, dict]) -> None:
    """Each scenario planned for each framework (module docstring, 6)."""
    from paraplan.planning import TARGETS

    print(
        "\nPer framework (solver.target: only plans it runs, proven optimal over those):\n\n"
        "| scenario | target | solve s | CPU s | status | step s | vs unrestricted |\n"
        "|---|---|---|---|---|---|---|"
    )
    for label, scenario in scenarios.items():
        _, _, free, _ = _timed_solve(scenario)
        for target in TARGETS:
            wall, status, step, cpu = _timed_solve({**scenario, "solver": {"target": target}})
            cells = f"{step:.3f} | {step / free:.3f}x" if step == step else "- | -"
            print(f"| {label} | {target} | {wall:.2f} | {cpu:.2f} | {status} | {cells} |", flush=True)


def _side_by_side(grid: list[tuple[str, int]], budget_s: float) -> None:
    """Solver and enumeration on reduced spaces enumeration can finish (module docstring, 4)."""
    print(
        "\nReduced spaces (even split, one recompute mode for all stages):\n\n"
        "| model | GPUs | solve s | enumeration s | ratio | same optimum |\n|---|---|---|---|---|---|"
    )
    for model, nodes in grid:
        scenario = {
            **_scenario(model, nodes),
            "solver": {"allow_uneven_stages": False},
            "plan": {"recompute": "full"},
        }
        wall, _, step, _ = _timed_solve(scenario)
        enum_s, enum_step = _enumeration(scenario, budget_s)
        if enum_s is None:
            cells = f"> {budget_s:.0f} | > {budget_s / wall:.0f}x | -"
        else:
            same = (step != step and enum_step != enum_step) or abs(step - enum_step) <= 1e-6 * step
            cells = f"{enum_s:.1f} | {enum_s / wall:.0f}x | {'yes' if same else 'NO'}"
        print(f"| {model} | {8 * nodes} | {wall:.2f} | {cells} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
