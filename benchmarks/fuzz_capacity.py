"""Fuzz cases for capacity planning (issue 25): ``cluster.choose`` scenarios and sweep grids, valid
and invalid, with their checks. Drawn through fuzz_cases' ``Draw`` (fuzz_cases'
``choose_case`` and ``sweep_case`` call them) and run by the long-run driver (benchmarks/fuzz.py kinds
``choose`` and ``sweep``) and tests/capacity/test_capacity_fuzz.py.

A choose case is a scenario whose cluster is chosen: a few node types (sometimes one unknown or
listed twice), a GPU range and step, an objective, a deadline and a budget, prices and a
reliability section; ``refuse`` cases break one field (the answer must be a ConfigError naming it).
A sweep case is a GRID document (``base`` + ``grid`` of dotted paths, or ``scenarios``), sometimes
with one broken part. The properties:
- no crash, no hang: a Result or a ParaplanError, nothing else;
- a broken field: ConfigError naming it (from ``load_scenario`` / ``load_sweep`` alike);
- a chosen cluster is one of the presets, within min_gpus..max_gpus, meets the deadline and the
  budget it was given, and its time to train and cost are positive and finite;
- a grid has the product of its lists' lengths (times its scenarios) as rows, each row a scenario
  with the grid's values at their paths; every row answers (``run_one``) with a row, never a crash.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from benchmarks.fuzz_cases import Case, Draw

__all__ = [
    "draw_choose_case",
    "draw_sweep_case",
    "check_choose",
    "check_choose_input",
    "check_sweep",
    "CHOOSE_PRESETS",
]

CHOOSE_PRESETS = ("dgx-h100", "dgx-b200", "gb200-nvl72", "dgx-a100-80gb", "hgx-h800")
SMALL_MODELS = ("gpt3-1.3b", "llama3-8b", "qwen2.5-7b")

_BAD_CHOOSE: tuple[tuple[str, str, Any], ...] = (
    ("cluster.choose.presets", "presets", []),
    ("cluster.choose.presets", "presets", ["dgx-h100", "dgx-h100"]),
    ("cluster.choose.presets", "presets", ["no-such-node"]),
    ("cluster.choose.min_gpus", "min_gpus", 0),
    ("cluster.choose.min_gpus", "min_gpus", 4096),  # above max_gpus
    ("cluster.choose.max_gpus", "max_gpus", -8),
    ("cluster.choose.max_gpus", "max_gpus", "many"),
    ("cluster.choose.step", "step", 0),
    ("cluster.choose.step", "step", "triple"),
    ("cluster.choose.step", "step", 1.5),
    ("cluster.choose.extra", "extra", 1),
)
_BAD_JOB: tuple[tuple[str, str, Any], ...] = (
    ("job.tokens", "tokens", -1.0),
    ("job.tokens", "tokens", float("nan")),
    ("job.tokens", "tokens", 1e30),
    ("job.deadline_days", "deadline_days", 0.0),
    ("job.deadline_days", "deadline_days", -3.0),
    ("job.budget_usd", "budget_usd", -1.0),
    ("job.budget_usd", "budget_usd", "cheap"),
)
_BAD_OTHER: tuple[tuple[str, tuple[str, ...], Any], ...] = (
    ("objective", ("objective",), "fastest"),
    ("reliability.failure_rate_per_gpu_hour", ("reliability", "failure_rate_per_gpu_hour"), -1.0),
    ("reliability.restart_s", ("reliability", "restart_s"), float("inf")),
    ("reliability.spare_nodes", ("reliability", "spare_nodes"), -2),
    ("reliability.checkpoint_interval_s", ("reliability", "checkpoint_interval_s"), 0.0),
    ("cluster.price_per_gpu_hour", ("cluster", "price_per_gpu_hour"), -2.0),
    ("cluster.price_per_gpu_hour", ("cluster", "price_per_gpu_hour"), {"not-chosen": 3.0}),
    ("cluster.storage", ("cluster", "storage"), {"write_GBps": 0}),
)


def draw_choose_case(d: Draw, *, time_limit_s: float = 10.0) -> Case:
    """A ``cluster.choose`` scenario; ``refuse`` when one field is broken (module docstring)."""
    presets = [p for p in CHOOSE_PRESETS if d.chance(0.5)] or [d.choice(CHOOSE_PRESETS)]
    lo = d.choice((1, 8, 16, 64))
    choose: dict[str, Any] = {"presets": presets, "max_gpus": d.choice((lo, 16, 64, 128))}
    choose["max_gpus"] = max(choose["max_gpus"], lo)
    if d.chance(0.7):
        choose["min_gpus"] = lo
    if d.chance(0.7):
        choose["step"] = d.choice(("node", "double", 8, 16, 72))
    job: dict[str, Any] = {
        "seq_len": d.choice((2048, 4096)),
        "global_batch": d.choice((64, 128, 256)),
        "tokens": d.choice((1e9, 1e11, 2e12)),
    }
    if d.chance(0.3):
        job["deadline_days"] = d.choice((0.5, 30.0, 3650.0))
    if d.chance(0.3):
        job["budget_usd"] = d.choice((1e3, 1e6, 1e9))
    scenario: dict[str, Any] = {
        "model": {"preset": d.choice(SMALL_MODELS)},
        "cluster": {"choose": choose},
        "job": job,
    }
    if d.chance(0.6):
        scenario["objective"] = d.choice(("time_to_train", "cost", "gpus"))
    if d.chance(0.3):
        scenario["cluster"]["price_per_gpu_hour"] = {
            p: d.choice((1.0, 2.5, 6.0)) for p in presets if d.chance(0.7)
        }
    if d.chance(0.3):
        scenario["reliability"] = {
            "failure_rate_per_gpu_hour": d.choice((0.0, 1.97e-5, 1e-3)),
            "restart_s": d.choice((0.0, 600.0)),
            "spare_nodes": d.choice((0, 1)),
        }
    expect: tuple[str, ...] = ()
    refuse = d.chance(0.5)
    if refuse:
        expect = _break(d, scenario)
    args = {"time_limit_s": time_limit_s, "workers": d.choice((1, 2)), "top": d.choice((1, 2)), "seed": 0}
    return Case("choose", scenario, args, expect_keys=expect, tag="choose", refuse=refuse)


def _break(d: Draw, scenario: dict[str, Any]) -> tuple[str, ...]:
    """Break one field of ``scenario`` in place; the names an error must give."""
    family = d.choice(("choose", "job", "other", "missing-tokens"))
    if family == "choose":
        name, key, value = d.choice(_BAD_CHOOSE)
        scenario["cluster"]["choose"][key] = value
        if key == "min_gpus" and value == 4096:
            scenario["cluster"]["choose"]["max_gpus"] = 64
        return name, key
    if family == "job":
        name, key, value = d.choice(_BAD_JOB)
        scenario["job"][key] = value
        return name, key
    if family == "missing-tokens":
        del scenario["job"]["tokens"]
        return ("job.tokens",)
    name, path, value = d.choice(_BAD_OTHER)
    node = scenario
    for k in path[:-1]:
        node = node.setdefault(k, {})
    node[path[-1]] = value
    return name, path[-1]


def draw_sweep_case(d: Draw, *, time_limit_s: float = 5.0) -> Case:
    """A GRID document (``Case.scenario`` is the mapping); ``refuse`` when one part is broken."""
    base: dict[str, Any] = {
        "model": {"preset": d.choice(SMALL_MODELS)},
        "cluster": {"preset": "dgx-h100", "nodes": 1},
        "job": {"seq_len": 4096, "global_batch": 64, "tokens": 1e11},
        "plan": {"dp": 2, "tp": 4, "pp": 1, "micro_batch": 1, "zero": 1, "recompute": "none"},
    }
    axes: dict[str, list[Any]] = {
        "job.global_batch": [32, 64, 128],
        "plan.micro_batch": [1, 2, 3],
        "reliability.restart_s": [60, 600],
        "cluster.gpus": [8, 16],
        "model.preset": list(SMALL_MODELS[:2]),
    }
    grid = {k: v[: d.integer(1, len(v))] for k, v in axes.items() if d.chance(0.5)}
    doc: dict[str, Any] = {"base": base, "grid": grid}
    if d.chance(0.25):
        doc["scenarios"] = [{"job": {"global_batch": d.choice((32, 64))}} for _ in range(d.integer(1, 3))]
    expect: tuple[str, ...] = ()
    refuse = d.chance(0.4)
    if refuse:
        kind = d.choice(("path", "empty", "not-list", "unknown", "no-base", "base-type", "scenarios-type"))
        if kind == "path":
            doc["grid"]["modle.preset"] = ["x"]
            expect = ("grid.modle.preset",)
        elif kind == "empty":
            doc["grid"]["job.seq_len"] = []
            expect = ("grid.job.seq_len",)
        elif kind == "not-list":
            doc["grid"]["job.seq_len"] = 4096
            expect = ("grid.job.seq_len",)
        elif kind == "unknown":
            doc["extra"] = 1
            expect = ("extra",)
        elif kind == "no-base":
            doc = {"grid": doc["grid"] or {"job.seq_len": [1024]}}
            expect = ("base",)
        elif kind == "base-type":
            doc["base"] = ["not", "a", "mapping"]
            expect = ("base",)
        else:
            doc["scenarios"] = "one"
            expect = ("scenarios",)
    return Case("sweep", doc, {"time_limit_s": time_limit_s}, expect_keys=expect, tag="sweep", refuse=refuse)


def _fail(prop: str, message: str) -> None:
    from benchmarks.fuzz_checks import PropertyFailure  # imports fuzz_cases, which imports this lazily

    raise PropertyFailure(prop, message)


def _names(err: Exception, keys: tuple[str, ...]) -> None:
    message = str(err)
    if not message.strip() or (keys and not any(k in message for k in keys)):
        _fail("error", f"{type(err).__name__} does not name any of {list(keys)}: {message[:300]!r}")


def _refused(prop: str, err: Exception, keys: tuple[str, ...], what: str) -> Exception:
    """A refusal must be a ConfigError (``what`` says what gave it) naming one of ``keys``."""
    from paraplan.errors import ConfigError

    if not isinstance(err, ConfigError):
        _fail(prop, f"{what} {type(err).__name__}, not a ConfigError: {err}")
    _names(err, keys)
    return err


def check_choose_input(case: Case) -> Any:
    """The scenario's reading: a broken field is a ConfigError naming it, from ``load_scenario``
    or, for what only the catalog knows (an unknown node type), from ``solve`` before any search;
    a valid one loads. Returns the Scenario or the error (cheap: no search runs)."""
    import paraplan
    from paraplan.errors import ParaplanError
    from paraplan.scenario.schema import load_scenario

    try:
        sc = load_scenario(case.scenario)  # type: ignore[arg-type]
        if case.refuse:  # refused before the search, or accepted by mistake (a property breaks)
            paraplan.solve(case.scenario, **{**case.args, "time_limit_s": 1.0})  # type: ignore[arg-type]
    except ParaplanError as e:
        return _refused("choose-refusal", e, case.expect_keys, "reading gave")
    if case.refuse:
        _fail("choose-refusal", f"a broken field {case.expect_keys[:1]} was accepted")
    return sc


def check_choose(case: Case) -> Any:
    """``check_choose_input``, then the solve (module docstring's properties)."""
    import paraplan
    from paraplan.errors import ConfigError, ParaplanError

    read = check_choose_input(case)
    try:
        result = paraplan.solve(case.scenario, **case.args)  # type: ignore[arg-type]
    except ParaplanError as e:
        if case.refuse and not isinstance(e, ConfigError):
            _fail("choose-refusal", f"a broken field gave {type(e).__name__}, not a ConfigError: {e}")
        _names(e, case.expect_keys if case.refuse else ())
        return e
    if case.refuse or isinstance(read, Exception):
        _fail("choose-refusal", f"a broken field {case.expect_keys[:1]} was accepted")
    _check_chosen(case.scenario, result)  # type: ignore[arg-type]
    return result


def _check_chosen(scenario: dict[str, Any], result: Any) -> None:
    choose, job = scenario["cluster"]["choose"], scenario["job"]
    cluster, p = result.cluster, result.predicted
    if cluster is None or cluster.preset not in choose["presets"]:
        _fail("choose-cluster", f"chose {cluster} outside {choose['presets']}")
    if not choose.get("min_gpus", 1) <= cluster.gpus <= choose["max_gpus"]:
        _fail("choose-range", f"chose {cluster.gpus} GPUs outside the range {choose}")
    days, usd = p.time_to_train_days, p.cost_usd
    if not (days and usd and math.isfinite(days) and math.isfinite(usd) and days > 0 and usd > 0):
        _fail("choose-terms", f"time to train {days} days, cost {usd} USD")
    if "deadline_days" in job and days > job["deadline_days"] * (1 + 1e-9):
        _fail("choose-deadline", f"{days} days past the deadline {job['deadline_days']}")
    if "budget_usd" in job and usd > job["budget_usd"] * (1 + 1e-9):
        _fail("choose-budget", f"{usd} USD over the budget {job['budget_usd']}")


def check_sweep(case: Case, where: Path, run_rows: int = 1) -> Any:
    """Load the GRID (written to ``where``); a broken part is a ConfigError naming it; else the
    rows are the product, each carrying its grid values, and the first ``run_rows`` answer."""
    from paraplan.capacity.sweep import load_sweep, run_one
    from paraplan.errors import ParaplanError

    path = where / "grid.yaml"
    path.write_text(yaml.safe_dump(case.scenario))
    try:
        sweep = load_sweep(path)
    except ParaplanError as e:
        return _refused("sweep-refusal", e, case.expect_keys, "gave")
    if case.refuse:
        _fail("sweep-refusal", f"a broken grid {case.expect_keys[:1]} was accepted")
    doc = case.scenario
    assert isinstance(doc, dict)
    count = len(doc.get("scenarios") or [None])
    for values in doc["grid"].values():
        count *= len(values)
    if len(sweep) != count:
        _fail("sweep-count", f"{len(sweep)} scenarios from a grid of {count}")
    for sc, combo in zip(sweep.scenarios, sweep.values, strict=True):
        for path_, value in zip(sweep.paths, combo, strict=True):
            node: Any = sc
            for k in path_.split("."):
                node = node[k]
            if node != value:
                _fail("sweep-values", f"{path_} is {node!r}, not the grid's {value!r}")
    for sc in sweep.scenarios[:run_rows]:
        row = run_one(sc, case.args["time_limit_s"], 0)
        if not isinstance(row, dict) or not row:
            _fail("sweep-row", f"run_one gave {row!r}")
    return sweep
