"""Long-run fuzz driver (issue 16, item 2): thousands of scenarios, each checked in a worker
process under a memory cap and a watchdog, classified and written out with minimal reproducers.

    python -m benchmarks.fuzz --n 10000 --seed 1 --out benchmarks/results/tmp/fuzz --jobs 2

Cases (benchmarks/fuzz_cases.py; properties: benchmarks/fuzz_checks.py): valid scenarios (every
property; a ``--deep`` share of them also neighbours, enumeration, top=1 vs top=3 and 1 vs 2
workers; a ``--large`` share presets on 96-4,608 devices), ``evaluate`` of fully fixed plans,
malformed documents (huge, deep and alias-bomb ones included) and odd API arguments. Each case is
classified as

- ``ok``: a Result or a ParaplanError that passed every check (``ok:Result``, ``ok:ConfigError``...);
- ``violation``: a property broke (``violation:neighbour``, ``violation:time``, ...);
- ``crash``: any other exception, by type and deepest project frame; ``died``: the worker process
  exited (memory cap, signal);
- ``hang``: no answer within the watchdog (each solve's time limit x 1.2 + 1 s, times the solves
  the case makes, + ``--grace``); the faulthandler dump names the frame it was stuck in.

Writes OUT/cases.jsonl (one line per case), OUT/summary.json, OUT/summary.md and, for the first
case of each distinct signature, OUT/repros/<signature>.yaml (shrunk: optional keys removed while
the signature stays; a header says how to reproduce) with its Hugging Face config beside it.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import multiprocessing as mp
import re
import resource
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

__all__ = ["main", "make_case", "classify", "shrink"]

ROOT = Path(__file__).resolve().parents[1]
PROJECT_DIRS = ("paraplan/", "graph/", "hardware/", "cost/", "solver/")
KIND_WEIGHTS = (
    ("valid", 42),
    ("evaluate", 9),
    ("malformed", 30),
    ("api-args", 12),
    ("serving", 7),
    ("choose", 4),  # cluster.choose scenarios (benchmarks/fuzz_capacity.py, issue 25)
    ("sweep", 2),  # sweep GRID documents
)


def make_case(
    seed: int, *, time_limit_s: float, deep_share: float, large_share: float = 0.0
) -> tuple[Any, bool]:
    """(case, deep) drawn from ``seed``."""
    from benchmarks.fuzz_cases import (
        RandomDraw,
        api_args,
        choose_case,
        evaluate_case,
        malformed_case,
        serving_case,
        sweep_case,
        valid_case,
    )

    d = RandomDraw(seed)
    pick = d.integer(1, sum(w for _, w in KIND_WEIGHTS))
    kind = KIND_WEIGHTS[-1][0]
    for name, weight in KIND_WEIGHTS:
        if pick <= weight:
            kind = name
            break
        pick -= weight
    if kind == "valid":
        large = d.chance(large_share)
        return (
            valid_case(d, time_limit_s=time_limit_s * (3 if large else 1), large=large),
            d.chance(deep_share),
        )
    if kind == "evaluate":
        return evaluate_case(d), False
    if kind == "malformed":
        return malformed_case(d, extreme=True, known_bad=True, time_limit_s=time_limit_s), False
    if kind == "serving":
        return serving_case(d, time_limit_s=time_limit_s), False
    if kind == "choose":
        return choose_case(d, time_limit_s=time_limit_s), False
    if kind == "sweep":
        return sweep_case(d, time_limit_s=time_limit_s), False
    return api_args(d, known_bad=True), False


def _project_frame(frames: list[tuple[str, int, str]]) -> str:
    """The deepest frame in the project's packages (not benchmarks/), as 'dir/file.py:line (fn)'."""
    for filename, line, name in reversed(frames):
        rel = filename.replace("\\", "/")
        if str(ROOT) in rel:
            rel = rel.split(str(ROOT).replace("\\", "/") + "/", 1)[-1]
        if rel.startswith(PROJECT_DIRS):
            return f"{rel}:{line} ({name})"
    if frames:  # e.g. a hang deep in PyYAML whose project caller is past the dump's 100 frames
        filename, line, name = frames[-1]
        return "/".join(Path(filename).parts[-2:]) + f":{line} ({name}; no project frame)"
    return "outside the project"


def _calls(case: Any, deep: bool) -> int:
    return 3 if deep else 1


def _limit(case: Any) -> float:
    t = case.args.get("time_limit_s", 30.0)
    return t if isinstance(t, float | int) and 0 < t < 60 else 10.0


def classify(case: Any, deep: bool, where: Path) -> dict[str, Any]:
    """Run one case in this process; the record of its outcome (module docstring)."""
    from benchmarks.fuzz_checks import PropertyFailure, run_case
    from paraplan.errors import ParaplanError

    start = time.perf_counter()
    try:
        out = run_case(case, where, deep=deep)
        cls = "ok:Result" if not isinstance(out, ParaplanError) else f"ok:{type(out).__name__}"
        status = getattr(getattr(out, "solver", None), "status", None)
        return {"class": cls, "signature": cls, "status": status, "elapsed_s": time.perf_counter() - start}
    except PropertyFailure as e:
        frames = [(f.filename, f.lineno, f.name) for f in traceback.extract_tb(e.__traceback__)]
        return {
            "class": f"violation:{e.prop}",
            "signature": f"violation:{e.prop}@{case.tag}",
            "message": str(e)[:2000],
            "frame": _project_frame(frames),
            "elapsed_s": time.perf_counter() - start,
        }
    except (Exception, RecursionError) as e:  # noqa: BLE001 - classifying is the point
        frames = [(f.filename, f.lineno or 0, f.name) for f in traceback.extract_tb(e.__traceback__)]
        frame = _project_frame(frames)
        return {
            "class": "crash",
            "signature": f"crash:{type(e).__name__}@{frame}",
            "message": f"{type(e).__name__}: {str(e)[:1500]}",
            "frame": frame,
            "elapsed_s": time.perf_counter() - start,
        }


def _worker(conn: Any, mem_bytes: int, dump_path: str) -> None:
    """Answer (case, deep) requests until told to stop; memory capped, hangs dumped."""
    from benchmarks import fuzz_checks

    if mem_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
    sys.setrecursionlimit(10_000)
    dump = open(dump_path, "w")  # noqa: SIM115 - lives as long as the worker

    def before(limit: float) -> None:
        t = limit if isinstance(limit, float | int) and 0 < limit < 1e6 else 30.0
        dump.seek(0)
        dump.truncate()
        faulthandler.dump_traceback_later(
            t * fuzz_checks.TIME_FACTOR + fuzz_checks.TIME_MARGIN_S + 1, file=dump
        )

    fuzz_checks.WATCH.append((before, faulthandler.cancel_dump_traceback_later))
    while True:
        msg = conn.recv()
        if msg is None:
            return
        case, deep = msg
        with tempfile.TemporaryDirectory() as where:
            try:
                record = classify(case, deep, Path(where))
            except MemoryError:
                record = {
                    "class": "crash",
                    "signature": "crash:MemoryError@?",
                    "message": "MemoryError (memory cap)",
                    "frame": "?",
                }
        conn.send(record)


class _Pool:
    """Worker processes with a watchdog: one case at a time per worker, killed on a hang."""

    def __init__(self, jobs: int, mem_bytes: int, out: Path) -> None:
        self.ctx = mp.get_context("spawn")
        self.mem_bytes, self.out = mem_bytes, out
        self.slots: list[dict[str, Any]] = [self._start(i) for i in range(jobs)]

    def _start(self, i: int) -> dict[str, Any]:
        parent, child = self.ctx.Pipe()
        dump = str(self.out / f".hang-dump-{i}.txt")
        proc = self.ctx.Process(target=_worker, args=(child, self.mem_bytes, dump), daemon=True)
        proc.start()
        return {"proc": proc, "conn": parent, "dump": dump, "job": None, "i": i}

    def run(self, jobs: list[tuple[Any, Any, bool, float]], done: Any) -> None:
        """``jobs``: (key, case, deep, watchdog seconds); ``done(key, case, deep, record)``."""
        pending = list(reversed(jobs))
        while pending or any(s["job"] for s in self.slots):
            for n, slot in enumerate(self.slots):
                if slot["job"] is None and pending:
                    key, case, deep, watchdog = pending.pop()
                    slot["job"] = (key, case, deep, time.monotonic() + watchdog, watchdog)
                    slot["conn"].send((case, deep))
                if slot["job"] is None:
                    continue
                key, case, deep, deadline, watchdog = slot["job"]
                if slot["conn"].poll(0.02):
                    try:
                        record = slot["conn"].recv()
                    except EOFError:
                        record = self._died(slot)
                        self.slots[n] = slot = self._start(slot["i"])
                    slot["job"] = None
                    done(key, case, deep, record)
                elif not slot["proc"].is_alive():
                    record = self._died(slot)
                    self.slots[n] = self._start(slot["i"])
                    done(key, case, deep, record)
                elif time.monotonic() > deadline:
                    slot["proc"].kill()
                    slot["proc"].join()
                    frame, stack = _hang_frame(slot["dump"])
                    self.slots[n] = self._start(slot["i"])
                    done(
                        key,
                        case,
                        deep,
                        {
                            "class": "hang",
                            "signature": f"hang@{frame}",
                            "message": f"no answer after {watchdog:.0f} s; stack: {stack}",
                            "frame": frame,
                        },
                    )

    @staticmethod
    def _died(slot: dict[str, Any]) -> dict[str, Any]:
        slot["proc"].join(5)
        code = slot["proc"].exitcode
        return {
            "class": "crash",
            "signature": f"died:exit {code}",
            "message": f"the worker exited with {code} (memory cap or signal)",
            "frame": "?",
        }

    def close(self) -> None:
        for slot in self.slots:
            try:
                slot["conn"].send(None)
            except (BrokenPipeError, OSError):
                pass
            slot["proc"].join(5)
            if slot["proc"].is_alive():
                slot["proc"].kill()


def _hang_frame(dump_path: str) -> tuple[str, str]:
    """Deepest project frame of the main thread in a faulthandler dump."""
    try:
        text = Path(dump_path).read_text()
    except OSError:
        return "unknown", ""
    blocks = re.split(r"\n(?=Thread 0x|Current thread 0x)", text)
    main = next((b for b in blocks if 'File "' in b), text)
    frames = re.findall(r'File "([^"]+)", line (\d+) in (\S+)', main)
    ordered = [(f, int(n), fn) for f, n, fn in reversed(frames)]  # dumps are innermost first
    chain = " <- ".join(f"{Path(f).name}:{n}" for f, n, _ in ordered[::-1][:6])
    return _project_frame(ordered), chain


# ------------------------------------------------------------------------------------- shrinking


def _without(scenario: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    out = json.loads(json.dumps(scenario))
    target = out
    for p in path[:-1]:
        target = target[p]
    del target[path[-1]]
    if len(path) > 1 and not target:
        del out[path[0]]
    return out


def _removable(scenario: dict[str, Any]) -> list[tuple[str, ...]]:
    paths: list[tuple[str, ...]] = [(s,) for s in ("plan", "solver") if s in scenario]
    for section in ("plan", "solver", "job", "model"):
        value = scenario.get(section)
        if isinstance(value, dict):
            required = {
                "job": ("seq_len", "global_batch"),
                "model": (
                    "layers",
                    "hidden",
                    "heads",
                    "vocab",
                    "ffn_hidden",
                    "preset",
                    "hf_config",
                    "experts",
                    "top_k",
                    "moe_ffn_hidden",
                ),
            }.get(section, ())
            paths += [(section, k) for k in value if k not in required]
    return paths


def _run_one(pool: _Pool, case: Any, deep: bool, watchdog: float) -> dict[str, Any]:
    result: list[dict[str, Any]] = []
    pool.run([(0, case, deep, watchdog)], lambda *a: result.append(a[3]))
    return result[0]


def shrink(
    pool: _Pool, case: Any, deep: bool, record: dict[str, Any], watchdog: float, budget: int
) -> tuple[Any, bool]:
    """Remove optional keys (plan/solver sections, then single knobs) and simplify the API
    arguments while the signature stays; at most ``budget`` re-runs."""
    if not isinstance(case.scenario, dict):
        return case, deep
    signature = record["signature"]
    tries = 0
    candidates: list[Any] = []

    def propose() -> None:
        candidates.clear()
        candidates.extend(
            replace(case, scenario=_without(case.scenario, p)) for p in _removable(case.scenario)
        )
        for key, simple in (("top", 1), ("seed", 0), ("workers", 2)):
            if case.args.get(key) != simple and not (case.kind == "api-args"):
                candidates.append(replace(case, args={**case.args, key: simple}))

    propose()
    while candidates and tries < budget:
        cand = candidates.pop(0)
        tries += 1
        result = _run_one(pool, cand, deep, watchdog)
        if result["signature"] == signature:
            case = cand
            propose()
    return case, deep


# ---------------------------------------------------------------------------------------- output


def _slug(signature: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", signature)[:120].strip("_")


def write_repro(out: Path, case: Any, deep: bool, record: dict[str, Any], seed: int) -> Path:
    import yaml

    repro_dir = out / "repros"
    repro_dir.mkdir(parents=True, exist_ok=True)
    slug = _slug(record["signature"])
    scenario = case.scenario
    for name, value in (case.files or {}).items():
        target = repro_dir / f"{slug}.{name}"
        if value == "<dir>":
            target.mkdir(exist_ok=True)
        elif isinstance(value, bytes):
            target.write_bytes(value)
        else:
            target.write_text(json.dumps(value, indent=1))
        if isinstance(scenario, dict) and scenario.get("model", {}).get("hf_config") == name:
            scenario = {**scenario, "model": {**scenario["model"], "hf_config": target.name}}
    header = [
        f"fuzz reproducer: {record['signature']}",
        f"case seed {seed}, tag {case.tag}, deep={deep}",
        f"message: {record.get('message', '')[:600]!r}",
        f"API arguments: {case.args!r}",
        "reproduce: paraplan.solve(THIS_FILE, **API arguments), or the case itself:",
        f"  python -m benchmarks.fuzz --one {seed}",
    ]
    text = "".join(f"# {line}\n" for line in header)
    path = repro_dir / f"{slug}.yaml"
    if isinstance(scenario, dict):
        path.write_text(text + yaml.safe_dump(scenario, sort_keys=False))
    else:
        raw = scenario if isinstance(scenario, bytes) else scenario.encode()
        (repro_dir / f"{slug}.txt").write_text(text)
        if len(raw) > 1_000_000:
            raw = raw[:1_000_000]  # the header's --one reproduces the whole document
        path.write_bytes(raw)
    return path


def _summary(
    out: Path, records: list[dict[str, Any]], repros: dict[str, Path], args: argparse.Namespace, wall_s: float
) -> None:
    classes = Counter(
        r["class"].split(":")[0] if r["class"].startswith("ok") else r["class"] for r in records
    )
    detail = Counter(r["class"] for r in records)
    bad = Counter(r["signature"] for r in records if not r["class"].startswith("ok"))
    first = {}
    for r in records:
        first.setdefault(r["signature"], r)
    summary = {
        "n": len(records),
        "seed": args.seed,
        "jobs": args.jobs,
        "wall_s": round(wall_s, 1),
        "time_limit_s": args.time_limit,
        "classes": dict(classes),
        "outcomes": dict(detail),
        "failures": {
            s: {
                "count": c,
                "seed": first[s]["seed"],
                "tag": first[s]["tag"],
                "message": first[s].get("message", "")[:400],
                "repro": str(repros.get(s, "")),
            }
            for s, c in bad.most_common()
        },
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    lines = [
        f"# fuzz run: {len(records)} cases, seed {args.seed}, {args.jobs} jobs, {wall_s / 60:.1f} min",
        "",
        "| outcome | cases |",
        "|---|---|",
    ]
    lines += [f"| {k} | {v} |" for k, v in sorted(detail.items())]
    lines += ["", f"## {sum(bad.values())} failing cases, {len(bad)} distinct signatures", ""]
    for s, c in bad.most_common():
        r = first[s]
        lines += [
            f"- **{s}** x{c} (first: seed {r['seed']}, {r['tag']}): "
            f"{r.get('message', '')[:300]!r} -> `{repros.get(s, '')}`"
        ]
    (out / "summary.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fuzz", description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1000, help="cases (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="run seed (case i uses seed*10^6+i)")
    parser.add_argument("--out", default="benchmarks/results/tmp/fuzz", help="output directory")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--time-limit", type=float, default=3.0, help="time_limit_s of valid cases")
    parser.add_argument(
        "--deep",
        type=float,
        default=0.3,
        help="share of valid cases also checked against neighbours, top and workers (default 0.3)",
    )
    parser.add_argument(
        "--large",
        type=float,
        default=0.2,
        help="share of valid cases on 96-4,608 devices, limit x 3 (default 0.2)",
    )
    parser.add_argument("--mem-gib", type=float, default=6.0, help="memory cap per worker")
    parser.add_argument("--grace", type=float, default=20.0, help="watchdog seconds over the limits")
    parser.add_argument("--shrink", type=int, default=25, help="re-runs to shrink each signature")
    parser.add_argument("--one", type=int, default=None, help="run the case of this seed here")
    args = parser.parse_args(argv)

    if args.one is not None:
        case, deep = make_case(
            args.one, time_limit_s=args.time_limit, deep_share=args.deep, large_share=args.large
        )
        print(f"case {args.one}: {case.tag} deep={deep} args={case.args}")
        with tempfile.TemporaryDirectory() as where:
            print(json.dumps(classify(case, deep, Path(where)), indent=1))
        return 0

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pool = _Pool(args.jobs, int(args.mem_gib * 2**30), out)
    records: list[dict[str, Any]] = []
    repros: dict[str, Path] = {}
    failing: dict[str, tuple[Any, bool, dict[str, Any], int, float]] = {}
    start = time.monotonic()
    with open(out / "cases.jsonl", "w") as log:

        def done(key: int, case: Any, deep: bool, record: dict[str, Any]) -> None:
            record = {**record, "seed": key, "kind": case.kind, "tag": case.tag, "deep": deep}
            records.append(record)
            log.write(json.dumps(record) + "\n")
            log.flush()
            if not record["class"].startswith("ok") and record["signature"] not in failing:
                failing[record["signature"]] = (case, deep, record, key, watchdogs[key])
                print(
                    f"[{len(records)}/{args.n}] {record['signature']}: {record.get('message', '')[:160]!r}",
                    flush=True,
                )
            if len(records) % 100 == 0:
                print(
                    f"[{len(records)}/{args.n}] {time.monotonic() - start:.0f} s, "
                    f"{sum(not r['class'].startswith('ok') for r in records)} failing",
                    flush=True,
                )

        jobs, watchdogs = [], {}
        for i in range(args.n):
            seed = args.seed * 10**6 + i
            case, deep = make_case(
                seed, time_limit_s=args.time_limit, deep_share=args.deep, large_share=args.large
            )
            watchdog = _calls(case, deep) * (_limit(case) * 1.2 + 1) + args.grace
            watchdogs[seed] = watchdog
            jobs.append((seed, case, deep, watchdog))
        pool.run(jobs, done)
    wall = time.monotonic() - start
    for signature, (case, deep, record, seed, watchdog) in failing.items():
        slow = signature.startswith(("hang", "violation:time"))  # each re-run costs the limit
        budget = min(args.shrink, 6) if slow else args.shrink
        small, deep = shrink(pool, case, deep, record, watchdog, budget)
        repros[signature] = write_repro(out, small, deep, record, seed)
    pool.close()
    _summary(out, records, repros, args, wall)
    print((out / "summary.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
