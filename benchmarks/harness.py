"""The harness: load the suite, run every planner in a child process with a hard deadline, time it.

Each measured call runs in a forked child (``run_bounded``): the parent has imported paraplan, so
the child starts warm on imports but cold on every per-instance cache, and a planner that overruns
is killed, not waited for. ``measure`` repeats a call and keeps the median wall time; a call whose
first run exceeds ``Config.repeat_below_s`` is measured once (the report says which).

Three parts, each a list of plain records the report and the plots read:
- ``run_scenarios``: every YAML file of ``benchmarks/scenarios/`` with paraplan and each baseline;
- ``run_calibration``: the fidelity rows, and paraplan's plan against each published plan;
- ``run_sweeps``: planning time against GPU count, layer count and search-space size
  (the sweep definitions are in ``_sweeps``).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from benchmarks.baselines import (
    Attempt,
    Method,
    Outcome,
    exhaustive,
    published,
    rule_of_thumb,
    solve,
    space_size,
)
from benchmarks.calibration_set import Case
from benchmarks.fidelity import constant_mfu_errors, fidelity_rows
from paraplan.api import load_scenario, paraplan_version
from paraplan.instance import build_instance

__all__ = [
    "Config",
    "BenchScenario",
    "ScenarioResult",
    "CalibrationResult",
    "SweepPoint",
    "load_suite",
    "call_in_child",
    "run_bounded",
    "measure",
    "run_scenarios",
    "run_calibration",
    "run_sweeps",
    "run_all",
    "machine_info",
    "Suite",
    "SCENARIO_DIR",
    "SOLVER_METHODS",
    "SWEEP_LABELS",
]

SCENARIO_DIR = Path(__file__).parent / "scenarios"
SOLVER_METHODS = (Method.PARAPLAN, Method.UNIFORM, Method.FIXED_PLACEMENT)
SWEEP_LABELS = {"gpus": "GPUs", "layers": "transformer layers", "space": "plans in the search space"}
_CTX = mp.get_context("fork")


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    out_dir: Path
    is_quick: bool = False
    repeats: int = 3
    time_limit_s: float = 60.0  # paraplan.solve's limit (the solver's own, not a kill)
    # budgets that keep the full suite near 25 minutes on a 2-core machine
    enum_budget_s: float = 2.0  # exhaustive baseline per scenario
    sweep_enum_budget_s: float = 5.0  # exhaustive on the scaling sweeps
    repeat_below_s: float = 10.0  # runs slower than this are measured once
    calibration_limit: int | None = None  # published comparisons to run (None: all)
    workers: int = 2
    seed: int = 0

    @classmethod
    def for_mode(cls, out_dir: Path, *, is_quick: bool, repeats: int | None) -> Config:
        if is_quick:
            return cls(
                out_dir=out_dir,
                is_quick=True,
                repeats=repeats or 1,
                time_limit_s=20.0,
                enum_budget_s=1.0,
                sweep_enum_budget_s=1.5,
                calibration_limit=4,
            )
        return cls(out_dir=out_dir, repeats=repeats or 3)

    def kill_after_s(self, limit_s: float) -> float:
        """Hard deadline of a child: the solver's limit does not bound its table building."""
        return 2 * limit_s + 30


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchScenario:
    """One YAML file: a paraplan scenario plus its ``bench:`` block (stripped before solving)."""

    name: str
    scenario: dict[str, Any]
    description: str = ""
    is_quick: bool = False
    is_flagship: bool = False  # gets a memory breakdown chart
    time_limit_s: float | None = None

    @property
    def num_devices(self) -> int:
        cluster = self.scenario["cluster"]
        if "gpus" in cluster:
            return int(cluster["gpus"])
        return build_instance(load_scenario(self.scenario)).cluster.num_devices  # pools, nodes


@dataclass(frozen=True, slots=True, kw_only=True)
class ScenarioResult:
    bench: BenchScenario
    attempts: dict[str, Attempt]


@dataclass(frozen=True, slots=True, kw_only=True)
class CalibrationResult:
    row_id: int
    label: str
    num_devices: int
    cluster: str
    published_step_s: float
    predicted_s: float  # the published plan on the cost model (fidelity)
    error: float
    fits: bool
    recompute: str
    defaults: tuple[str, ...]
    const_mfu: float  # the single best MFU of the constant-MFU estimate (same on every row)
    const_mfu_error: float
    published: Attempt | None = None  # same plan, as a baseline (None: not compared this run)
    paraplan: Attempt | None = None
    target: str | None = None  # the framework the run used, as a solver.target (SOURCE_TARGETS)
    paraplan_target: Attempt | None = None  # paraplan's plan restricted to what it runs


SOURCE_TARGETS = {
    "megatron_bridge_perf": "nemo",
    "nemo_2407": "nemo",
    "narayanan2021_t1": "megatron",
    "korthikanti2022_t5": "megatron",
    "korthikanti2022_dp8": "megatron",
    "bloom176b": "megatron",
    "mosaic_llmfoundry": "torch",
    "maxtext_tpu": "maxtext",
}
"""Calibration source -> the exporter of the framework it ran on (BLOOM: Megatron-DeepSpeed, as
Megatron; MosaicML llm-foundry: PyTorch FSDP, as the plain-PyTorch script; MaxText's TPU tables:
MaxText)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepPoint:
    sweep: str  # "gpus" | "layers" | "space"
    x: float
    label: str
    space_size: int
    paraplan: Attempt
    exhaustive: Attempt


@dataclass(frozen=True, slots=True, kw_only=True)
class _Sweep:
    name: str
    points: tuple[tuple[float, str, dict[str, Any]], ...]  # (x, label, scenario)
    quick_points: int = 3


def load_suite(directory: Path = SCENARIO_DIR, *, is_quick: bool = False) -> list[BenchScenario]:
    """Every ``*.yaml`` scenario, sorted by device count then name (``--quick``: the quick ones)."""
    suite = []
    for path in sorted(directory.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        bench = data.pop("bench", {}) or {}
        suite.append(
            BenchScenario(
                name=path.stem,
                scenario=data,
                description=bench.get("description", ""),
                is_quick=bool(bench.get("quick", False)),
                is_flagship=bool(bench.get("flagship", False)),
                time_limit_s=bench.get("time_limit_s"),
            )
        )
    suite.sort(key=lambda b: (b.num_devices, b.name))
    return [b for b in suite if b.is_quick] if is_quick else suite


def _child(conn: Any, fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
    try:
        conn.send(("ok", fn(*args, **kwargs)))
    except Exception as e:  # a planner bug is a result to report, not a crash of the suite
        tb = traceback.extract_tb(e.__traceback__)[-1]
        conn.send(("error", f"{type(e).__name__}: {str(e)[:300]} ({Path(tb.filename).name}:{tb.lineno})"))
    finally:
        conn.close()


def call_in_child(
    fn: Callable[..., Any], *args: Any, kill_after_s: float, **kwargs: Any
) -> tuple[str, Any, float]:
    """``fn(*args, **kwargs)`` in a forked child, killed after ``kill_after_s`` seconds.

    Returns (``"ok"``, value, wall_s), (``"error"``, message, wall_s) or (``"killed"``, message,
    wall_s). The parent never runs planner code itself, so every child starts from the same
    state: modules imported, no per-instance or file cache filled."""
    recv, send = _CTX.Pipe(duplex=False)
    start = time.perf_counter()
    proc = _CTX.Process(target=_child, args=(send, fn, args, kwargs), daemon=True)
    proc.start()
    send.close()
    try:
        if recv.poll(kill_after_s):
            status, value = recv.recv()
        else:
            status, value = "killed", f"killed after {kill_after_s:g} s"
    except EOFError:
        status, value = "error", f"child exited with code {proc.exitcode}"
    wall = time.perf_counter() - start
    if proc.is_alive():
        proc.kill()
    proc.join()
    recv.close()
    return status, value, wall


def run_bounded(
    method: str, fn: Callable[..., Attempt], *args: Any, kill_after_s: float, **kwargs: Any
) -> Attempt:
    """One planning attempt in a child; a kill or an exception becomes an Attempt saying so."""
    status, value, wall = call_in_child(fn, *args, kill_after_s=kill_after_s, **kwargs)
    if status == "ok":
        return value
    outcome = Outcome.NOT_FINISHED if status == "killed" else Outcome.ERROR
    return Attempt(method=method, outcome=outcome, wall_s=wall, detail=value)


def measure(
    method: str,
    fn: Callable[..., Attempt],
    *args: Any,
    repeats: int,
    repeat_below_s: float,
    kill_after_s: float,
    **kwargs: Any,
) -> Attempt:
    """Median wall time over up to ``repeats`` runs (one when the first is slower than
    ``repeat_below_s`` or ran out of time); the plans must agree (determinism)."""
    runs = [run_bounded(method, fn, *args, kill_after_s=kill_after_s, **kwargs)]
    # a run that hit its limit measured the limit, not the planner: once is enough
    while (
        len(runs) < repeats
        and runs[0].wall_s < repeat_below_s
        and runs[0].outcome is not Outcome.NOT_FINISHED
    ):
        runs.append(run_bounded(method, fn, *args, kill_after_s=kill_after_s, **kwargs))
    walls = tuple(r.wall_s for r in runs)
    first = runs[0]
    detail = first.detail
    steps = {r.step_time_s for r in runs}
    if len(steps) > 1 or len({json.dumps(r.plan, sort_keys=True) for r in runs}) > 1:
        detail = (detail + "; " if detail else "") + f"NONDETERMINISTIC across repeats: {steps}"
    return replace(first, wall_s=statistics.median(walls), wall_runs_s=walls, detail=detail)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_scenarios(cfg: Config, suite: list[BenchScenario]) -> list[ScenarioResult]:
    """paraplan and every baseline on each scenario, one after the other."""
    out = []
    for i, b in enumerate(suite):
        start = time.perf_counter()
        limit = b.time_limit_s or cfg.time_limit_s
        timing = {"repeats": cfg.repeats, "repeat_below_s": cfg.repeat_below_s}
        attempts: dict[str, Attempt] = {}
        for method in SOLVER_METHODS:
            attempts[method] = measure(
                method,
                solve,
                b.scenario,
                method,
                **timing,
                kill_after_s=cfg.kill_after_s(limit),
                time_limit_s=limit,
                workers=cfg.workers,
                seed=cfg.seed,
            )
        attempts[Method.RULE_OF_THUMB] = measure(
            Method.RULE_OF_THUMB, rule_of_thumb, b.scenario, **timing, kill_after_s=120
        )
        attempts[Method.EXHAUSTIVE] = measure(
            Method.EXHAUSTIVE,
            exhaustive,
            b.scenario,
            cfg.enum_budget_s,
            **timing,
            kill_after_s=cfg.kill_after_s(cfg.enum_budget_s),
        )
        p = attempts[Method.PARAPLAN]
        _log(
            f"[{i + 1:>2}/{len(suite)}] {b.name:<34} {p.outcome:<12} "
            f"{p.step_time_s or float('nan'):8.3f} s/step  solve {p.wall_s:6.2f} s "
            f"({p.solver_status})  total {time.perf_counter() - start:5.1f} s"
        )
        out.append(ScenarioResult(bench=b, attempts=attempts))
    return out


def _quick_cases(cases: list[Case], limit: int) -> list[Case]:
    """Small published runs (<= 16 GPUs), one per source first."""
    small = [c for c in cases if c.scenario["cluster"]["gpus"] <= 16]
    picked: list[Case] = []
    for c in small:
        if c.source_key not in {p.source_key for p in picked}:
            picked.append(c)
    return (picked + [c for c in small if c not in picked])[:limit]


def run_calibration(cfg: Config) -> list[CalibrationResult]:
    """Fidelity of every supported row, and paraplan's plan against each published plan."""
    status, rows, _ = call_in_child(fidelity_rows, kill_after_s=600)
    if status != "ok":
        raise RuntimeError(f"fidelity rows failed: {rows}")
    mfu, const_errors = constant_mfu_errors(rows)
    compare = {
        c.row_id
        for c in (
            _quick_cases([r.case for r in rows], cfg.calibration_limit)
            if cfg.calibration_limit is not None
            else [r.case for r in rows]
        )
    }
    solved: dict[str, Attempt] = {}
    out = []
    for row, const_error in zip(rows, const_errors, strict=True):
        c = row.case
        pub = ours = matched = None
        target = SOURCE_TARGETS.get(c.source_key)
        if c.row_id in compare:
            pub = run_bounded(Method.PUBLISHED, published, c, kill_after_s=120)
            free = {k: v for k, v in c.scenario.items() if k != "plan"}
            key = json.dumps(free, sort_keys=True)
            if key not in solved:  # several rows share model, cluster and batch
                solved[key] = run_bounded(
                    Method.PARAPLAN,
                    solve,
                    free,
                    Method.PARAPLAN,
                    kill_after_s=cfg.kill_after_s(cfg.time_limit_s),
                    time_limit_s=cfg.time_limit_s,
                    workers=cfg.workers,
                    seed=cfg.seed,
                )
                _log(
                    f"  calibration row {c.row_id:>3} {c.label[:40]:<40} "
                    f"{c.scenario['cluster']['gpus']:>5} GPUs: {solved[key].outcome}, "
                    f"solve {solved[key].wall_s:.2f} s"
                )
            ours = solved[key]
            if target is not None:
                tkey = f"{key}|{target}"
                if tkey not in solved:
                    solved[tkey] = run_bounded(
                        Method.PARAPLAN,
                        solve,
                        {**free, "solver": {"target": target}},
                        Method.PARAPLAN,
                        kill_after_s=cfg.kill_after_s(cfg.time_limit_s),
                        time_limit_s=cfg.time_limit_s,
                        workers=cfg.workers,
                        seed=cfg.seed,
                    )
                matched = solved[tkey]
        out.append(
            CalibrationResult(
                row_id=c.row_id,
                label=c.label,
                num_devices=c.scenario["cluster"]["gpus"],
                cluster=c.scenario["cluster"]["preset"],
                published_step_s=c.published_step_s,
                predicted_s=row.predicted_s,
                error=row.error,
                fits=row.fits,
                recompute=row.recompute,
                defaults=c.defaults,
                const_mfu=mfu,
                const_mfu_error=const_error,
                published=pub,
                paraplan=ours,
                target=target,
                paraplan_target=matched,
            )
        )
    return out


def _scenario(
    model: dict[str, Any],
    preset: str,
    gpus: int,
    seq_len: int,
    global_batch: int,
    plan: dict[str, Any] | None = None,
) -> dict[str, Any]:
    sc: dict[str, Any] = {
        "model": model,
        "cluster": {"preset": preset, "gpus": gpus},
        "job": {"seq_len": seq_len, "global_batch": global_batch},
    }
    if plan:
        sc["plan"] = plan
    return sc


def _sweeps() -> list[_Sweep]:
    """GPU count (Llama 3 8B, H100, 4K x 4096 sequences; 1-4 GPUs do not fit, and proving it
    is the answer), layer count (a 4096-wide GPT on 64 H100),
    and search-space size (GPT-3 2.7B on 16 A100, freeing one knob at a time)."""
    gpus = tuple(
        (float(n), f"{n}", _scenario({"preset": "llama3-8b"}, "dgx-h100", n, 4096, 4096))
        for n in (2**k for k in range(17))
    )
    wide = {
        "name": "gpt-4096",
        "hidden": 4096,
        "ffn_hidden": 16384,
        "heads": 32,
        "kv_heads": 32,
        "vocab": 51200,
        "activation": "gelu",
        "norm": "layernorm",
    }
    layers = tuple(
        (float(n), f"{n}", _scenario({**wide, "layers": n}, "dgx-h100", 64, 4096, 512))
        for n in (12, 16, 24, 32, 48, 64, 96, 128, 192, 256)
    )
    base = {
        "dp": 4,
        "tp": 2,
        "pp": 2,
        "cp": 1,
        "vp": 1,
        "micro_batch": 1,
        "zero": 1,
        "order": ["tp", "cp", "dp", "pp"],
        "layers_per_stage": [16, 16],
        "recompute": "none",
    }
    ladder = [("all fixed", ())]
    for freed in (
        ("recompute",),
        ("layers_per_stage",),
        ("zero",),
        ("micro_batch",),
        ("vp",),
        ("order",),
        ("pp", "dp"),
        ("tp",),
        ("cp",),
    ):
        ladder.append(("+" + "/".join(freed), ladder[-1][1] + freed))
    space = tuple(
        (
            float(i),
            name,
            _scenario(
                {"preset": "gpt3-2.7b"},
                "dgx-a100-80gb",
                16,
                2048,
                256,
                {k: v for k, v in base.items() if k not in freed},
            ),
        )
        for i, (name, freed) in enumerate(ladder)
    )
    return [
        _Sweep(name="gpus", points=gpus, quick_points=5),
        _Sweep(name="layers", points=layers, quick_points=3),
        _Sweep(name="space", points=space, quick_points=5),
    ]


def run_sweeps(cfg: Config) -> list[SweepPoint]:
    """Planning time of the solver and of the enumeration along each sweep."""
    out = []
    for sw in _sweeps():
        pts = sw.points[: sw.quick_points] if cfg.is_quick else sw.points
        for x, label, sc in pts:
            ours = measure(
                Method.PARAPLAN,
                solve,
                sc,
                Method.PARAPLAN,
                repeats=cfg.repeats,
                repeat_below_s=cfg.repeat_below_s,
                kill_after_s=cfg.kill_after_s(cfg.time_limit_s),
                time_limit_s=cfg.time_limit_s,
                workers=cfg.workers,
                seed=cfg.seed,
            )
            enum = measure(
                Method.EXHAUSTIVE,
                exhaustive,
                sc,
                cfg.sweep_enum_budget_s,
                repeats=cfg.repeats,
                repeat_below_s=min(2.0, cfg.repeat_below_s),
                kill_after_s=cfg.kill_after_s(cfg.sweep_enum_budget_s),
            )
            size = enum.space_size
            if size is None:  # the enumeration was killed before counting
                status, size, _ = call_in_child(space_size, sc, kill_after_s=600)
                size = size if status == "ok" else 0
            if sw.name == "space":
                x = float(size)
            _log(
                f"  sweep {sw.name:<6} {label:<22} solver {ours.wall_s:7.2f} s ({ours.outcome}); "
                f"enumeration {enum.wall_s:6.2f} s ({enum.outcome}, {enum.num_plans} plans)"
            )
            out.append(
                SweepPoint(sweep=sw.name, x=x, label=label, space_size=size, paraplan=ours, exhaustive=enum)
            )
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Suite:
    """Everything one run measured, with when and where."""

    config: Config
    machine: dict[str, str]
    started: str
    wall_s: float
    scenarios: list[ScenarioResult]
    calibration: list[CalibrationResult]
    sweeps: list[SweepPoint]
    phase_wall_s: dict[str, float]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], capture_output=True, text=True, timeout=10, cwd=Path(__file__).parent
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine_info() -> dict[str, str]:
    """Where the run happened: CPU, cores, memory, OS, Python, OR-Tools, paraplan commit."""
    import ortools

    dirty = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "cpu": _cpu_model(),
        "cores": str(os.cpu_count()),
        "memory": _mem_total(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "ortools": ortools.__version__,
        "paraplan": paraplan_version(),
        "commit": (_git("rev-parse", "--short", "HEAD") or "unknown")
        + (" (working tree modified)" if dirty else ""),
        "load_average": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def run_all(cfg: Config) -> Suite:
    """The whole suite: scenarios, calibration, sweeps."""
    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    machine = machine_info()
    start = time.perf_counter()
    phases: dict[str, float] = {}
    suite = load_suite(is_quick=cfg.is_quick)
    _log(
        f"paraplan benchmarks: {len(suite)} scenarios, repeats {cfg.repeats}, "
        f"solver limit {cfg.time_limit_s:g} s, enumeration budget {cfg.enum_budget_s:g} s"
    )
    t = time.perf_counter()
    scenarios = run_scenarios(cfg, suite)
    phases["scenarios"] = time.perf_counter() - t
    t = time.perf_counter()
    calibration = run_calibration(cfg)
    phases["calibration"] = time.perf_counter() - t
    t = time.perf_counter()
    sweeps = run_sweeps(cfg)
    phases["sweeps"] = time.perf_counter() - t
    machine["load_average_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return Suite(
        config=cfg,
        machine=machine,
        started=started,
        wall_s=time.perf_counter() - start,
        scenarios=scenarios,
        calibration=calibration,
        sweeps=sweeps,
        phase_wall_s=phases,
    )
