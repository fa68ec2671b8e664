"""``paraplan sweep GRID.yaml --out results.csv``: many scenarios, one CSV row each.

GRID.yaml holds ``base:`` (a scenario) with ``grid:`` (dotted field paths to lists of values,
swept as their product, e.g. ``model.preset: [llama3-8b, llama3-70b]``, ``cluster.gpus: [16,
64]``; setting ``cluster.gpus`` drops the base's ``cluster.nodes`` and the other way round), or
``scenarios:`` (a list, each merged over ``base`` when one is given), or both (each listed
scenario, times the grid). Each scenario is solved (``paraplan.solve``, one CP-SAT worker, a
fixed seed) or evaluated when its plan is fully fixed, in local worker processes by default or
as one Ray task each (``--ray local|auto|ADDRESS``; the ``[ray]`` extra). Rows are written as
they finish (a scenario's ``id`` is a hash of its content), so a sweep that stops resumes where it
was: rows already in the CSV are not run again. Columns: ``id``, ``index``, the grid's paths, the
outcome (``status``: ok | infeasible | timeout | invalid, and ``error``), the chosen cluster, the
capacity names of the result (time_to_train_days, cost_usd, effective_training_time_ratio,
expected_interruptions, checkpoint_interval_s), the step time, throughput, memory and the plan's
degrees. No timing column: the same sweep gives the same rows, locally and on Ray.
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any, TextIO

from paraplan.errors import ConfigError, InfeasibleError, ParaplanError, SolveTimeout
from paraplan.scenario.scenario_file import read_document

__all__ = ["Sweep", "load_sweep", "run_sweep", "run_one", "COLUMNS", "MAX_SCENARIOS"]

MAX_SCENARIOS = 1_000_000
SECTIONS = ("model", "cluster", "job", "plan", "solver", "reliability", "objective", "calibration")
RESULT_COLUMNS = (
    "status",
    "error",
    "preset",
    "gpus",
    "nodes",
    "time_to_train_days",
    "cost_usd",
    "effective_training_time_ratio",
    "expected_interruptions",
    "checkpoint_interval_s",
    "step_time_s",
    "tokens_per_s_per_gpu",
    "mfu",
    "peak_memory_bytes",
    "fits_memory",
    "solver_status",
    "gap",
    "dp",
    "tp",
    "pp",
    "cp",
    "ep",
    "vp",
    "micro_batch",
    "zero",
    "recompute",
    "sequence_parallel",
)
COLUMNS = ("id", "index")
"""Leading columns; then the grid's paths, then RESULT_COLUMNS."""


class Sweep:
    """The scenarios of a GRID file, each with its grid values, index and content id."""

    def __init__(self, scenarios: list[dict[str, Any]], paths: list[str], values: list[tuple[Any, ...]]):
        self.scenarios = scenarios
        self.paths = paths
        self.values = values

    def __len__(self) -> int:
        return len(self.scenarios)

    @property
    def columns(self) -> list[str]:
        return [*COLUMNS, *self.paths, *RESULT_COLUMNS]

    def scenario_id(self, i: int) -> str:
        text = json.dumps(self.scenarios[i], sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _set_path(data: dict[str, Any], path: str, value: Any) -> None:
    keys = path.split(".")
    node = data
    for k in keys[:-1]:
        child = node.get(k)
        if not isinstance(child, dict):
            child = {}
            node[k] = child
        node = child
    node[keys[-1]] = value
    if keys[0] == "cluster" and len(keys) == 2 and keys[1] in ("gpus", "nodes"):
        node.pop("nodes" if keys[1] == "gpus" else "gpus", None)  # a size replaces the other


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(base))
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_sweep(path: str | Path) -> Sweep:
    """The scenarios of a GRID file; ConfigError naming the key and the rule."""
    where = str(path)
    data = read_document(Path(path))
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: a sweep is a mapping with base: and grid:, or scenarios:")
    unknown = sorted(set(data) - {"base", "grid", "scenarios"})
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; a sweep has base, grid and scenarios")
    base = data.get("base") or {}
    grid = data.get("grid") or {}
    listed = data.get("scenarios")
    if not isinstance(base, dict):
        raise ConfigError(f"{where}: base must be a scenario mapping")
    if not isinstance(grid, dict):
        raise ConfigError(f"{where}: grid maps dotted field paths to lists, e.g. model.preset: [llama3-8b]")
    if listed is None and not base:
        raise ConfigError(f"{where}: give base: (with grid:) or scenarios:")
    if listed is not None and (not isinstance(listed, list) or not all(isinstance(s, dict) for s in listed)):
        raise ConfigError(f"{where}: scenarios must be a list of scenario mappings")
    for key, values in grid.items():
        if not isinstance(key, str) or key.split(".")[0] not in SECTIONS:
            raise ConfigError(
                f"{where}: grid.{key}: a path starts with a scenario section ({', '.join(SECTIONS)})"
            )
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{where}: grid.{key} must be a non-empty list of values")
    starts = [_merge(base, s) for s in listed] if listed is not None else [base]
    paths = list(grid)
    count = len(starts)
    for values in grid.values():
        count *= len(values)
    if count > MAX_SCENARIOS:
        raise ConfigError(f"{where}: {count:,} scenarios exceed the limit of {MAX_SCENARIOS:,}")
    scenarios, combos = [], []
    for start in starts:
        for combo in itertools.product(*grid.values()):
            sc = json.loads(json.dumps(start))
            for p, v in zip(paths, combo, strict=True):
                _set_path(sc, p, v)
            scenarios.append(sc)
            combos.append(combo)
    return Sweep(scenarios, paths, combos)


def _fixed(sc: dict[str, Any]) -> bool:
    from paraplan.instance import REQUIRED_KNOBS

    plan = sc.get("plan") or {}
    return isinstance(plan, dict) and all(plan.get(k) is not None for k in REQUIRED_KNOBS)


def _number(value: Any) -> str:
    """A value as the CSV writes it: floats to 12 significant digits (stable across machines)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.12g}"
    if isinstance(value, list | dict):
        return json.dumps(value)
    return str(value)


def run_one(scenario: dict[str, Any], time_limit_s: float, seed: int) -> dict[str, str]:
    """One scenario's result columns (RESULT_COLUMNS) as strings; never raises for bad input."""
    from paraplan.api import evaluate, solve

    try:
        if _fixed(scenario):
            r = evaluate(scenario)
        else:
            r = solve(scenario, time_limit_s=time_limit_s, workers=1, seed=seed, more_headroom=False)
    except InfeasibleError as e:
        return {"status": "infeasible", "error": str(e)}
    except SolveTimeout as e:
        return {"status": "timeout", "error": str(e)}
    except ParaplanError as e:
        return {"status": "invalid", "error": str(e)}
    p, plan = r.predicted, r.plan
    row: dict[str, Any] = {
        "status": "ok",
        "error": "",
        "preset": r.cluster.preset if r.cluster else (scenario.get("cluster") or {}).get("preset"),
        "gpus": plan.num_devices,
        "nodes": r.cluster.nodes if r.cluster else None,
        "time_to_train_days": p.time_to_train_days,
        "cost_usd": p.cost_usd,
        "effective_training_time_ratio": p.effective_training_time_ratio,
        "expected_interruptions": p.expected_interruptions,
        "checkpoint_interval_s": p.checkpoint_interval_s,
        "step_time_s": p.step_time_s,
        "tokens_per_s_per_gpu": p.tokens_per_s_per_gpu,
        "mfu": p.mfu,
        "peak_memory_bytes": p.peak_memory_bytes,
        "fits_memory": p.fits_memory,
        "solver_status": r.capacity.status if r.capacity else (r.solver.status if r.solver else "EVALUATED"),
        "gap": r.capacity.gap if r.capacity else (r.solver.gap if r.solver else 0.0),
        "dp": plan.dp,
        "tp": plan.tp,
        "pp": plan.pp,
        "cp": plan.cp,
        "ep": plan.ep,
        "vp": plan.vp,
        "micro_batch": plan.micro_batch,
        "zero": plan.zero,
        "recompute": plan.recompute,
        "sequence_parallel": plan.sequence_parallel,
    }
    return {k: _number(v) for k, v in row.items()}


def _done_ids(out: Path, columns: list[str]) -> set[str]:
    """Ids already in the CSV (a resumed sweep); ConfigError if its header is another sweep's."""
    if not out.exists() or out.stat().st_size == 0:
        return set()
    with out.open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header != columns:
            raise ConfigError(
                f"--out {out}: its columns are not this sweep's ({header[:4] if header else []}...); "
                "give another file, or delete it to start again"
            )
        return {row[0] for row in reader if row}


class _Progress:
    """A progress bar on stderr (in place on a terminal, else a line per 10%)."""

    def __init__(self, total: int, done: int, stream: TextIO = sys.stderr) -> None:
        self.total, self.done, self.start, self.stream = total, done, time.perf_counter(), stream
        self.first, self.tty, self.shown = done, stream.isatty(), -1

    def step(self) -> None:
        self.done += 1
        elapsed = time.perf_counter() - self.start
        rate = (self.done - self.first) / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else 0.0
        width = 30
        filled = int(width * self.done / max(1, self.total))
        line = (
            f"[{'#' * filled}{'-' * (width - filled)}] {self.done:,}/{self.total:,} scenarios, "
            f"{rate:.2f}/s, eta {eta:,.0f} s"
        )
        if self.tty:
            print("\r\033[K" + line, end="", file=self.stream, flush=True)
        elif (tenth := 10 * self.done // max(1, self.total)) > self.shown:
            self.shown = tenth
            print(line, file=self.stream, flush=True)

    def close(self) -> float:
        if self.tty:
            print(file=self.stream)
        return time.perf_counter() - self.start


def _local(
    tasks: list[tuple[int, dict[str, Any]]], jobs: int, time_limit_s: float, seed: int
) -> Iterator[tuple[int, dict[str, str]]]:
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        pending: dict[Future[dict[str, str]], int] = {}
        queue = iter(tasks)
        for i, sc in itertools.islice(queue, 2 * jobs):
            pending[pool.submit(run_one, sc, time_limit_s, seed)] = i
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in finished:
                yield pending.pop(fut), fut.result()
                for i, sc in itertools.islice(queue, 1):
                    pending[pool.submit(run_one, sc, time_limit_s, seed)] = i


def _ray(
    tasks: list[tuple[int, dict[str, Any]]], address: str, time_limit_s: float, seed: int
) -> Iterator[tuple[int, dict[str, str]]]:
    try:
        import ray
    except ImportError:
        raise ConfigError('--ray needs Ray: pip install "paraplan[ray]"') from None
    if not ray.is_initialized():
        if address == "local":
            ray.init(include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
    remote = ray.remote(num_cpus=1)(run_one)  # one CP-SAT worker per task
    refs = {remote.remote(sc, time_limit_s, seed): i for i, sc in tasks}
    while refs:
        ready, _ = ray.wait(list(refs), num_returns=1)
        for ref in ready:
            yield refs.pop(ref), ray.get(ref)


def run_sweep(
    sweep: Sweep,
    out: str | Path,
    *,
    jobs: int | None = None,
    ray: str | None = None,
    time_limit_s: float = 30.0,
    seed: int = 0,
    progress: bool = True,
    on_row: Callable[[dict[str, str]], None] | None = None,
) -> tuple[int, int, float]:
    """Run every scenario not yet in ``out`` and append its row as it finishes. Returns
    (scenarios run, scenarios already there, seconds)."""
    path = Path(out)
    columns = sweep.columns
    done = _done_ids(path, columns)
    ids = [sweep.scenario_id(i) for i in range(len(sweep))]
    tasks = [(i, sweep.scenarios[i]) for i in range(len(sweep)) if ids[i] not in done]
    skipped = len(sweep) - len(tasks)
    bar = _Progress(len(sweep), skipped) if progress else None
    new = not path.exists() or path.stat().st_size == 0
    started = time.perf_counter()
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        if new:
            writer.writeheader()
            f.flush()
        if ray is not None:
            results = _ray(tasks, ray, time_limit_s, seed)
        else:
            results = _local(tasks, jobs or os.cpu_count() or 1, time_limit_s, seed)
        for i, cols in results:
            row = {"id": ids[i], "index": str(i)}
            row.update({p: _number(v) for p, v in zip(sweep.paths, sweep.values[i], strict=True)})
            row.update({k: cols.get(k, "") for k in RESULT_COLUMNS})
            writer.writerow(row)
            f.flush()
            if on_row is not None:
                on_row(row)
            if bar is not None:
                bar.step()
    if bar is not None:
        bar.close()
    return len(tasks), skipped, time.perf_counter() - started
