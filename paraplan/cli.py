"""The ``paraplan`` command: evaluate, plan, export, presets, calibrate, profile (STYLE.md Sec. 6).

Exit codes: 0 plan found, 1 invalid input or usage, 2 proven infeasible, 3 no plan within the
time limit, 4 export not supported by the target, 70 internal error (a bug: please report it; the
traceback with ``--debug``). Human output goes to stdout, progress and errors to stderr.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import traceback
from pathlib import Path
from typing import NoReturn, get_args

from paraplan.calibration.cli import HANDLERS as CALIBRATE_HANDLERS
from paraplan.calibration.cli import add_parsers as add_calibrate_parsers
from paraplan.errors import ConfigError, ParaplanError
from paraplan.result import paraplan_version
from paraplan.rules.frameworks import FRAMEWORKS
from paraplan.scenario.schema import SolverTarget

__all__ = ["main", "build_parser", "EXIT_USAGE", "EXIT_INTERNAL"]

EXIT_USAGE = 1  # same as invalid input: 2 means "proven infeasible"
EXIT_INTERNAL = 70  # EX_SOFTWARE (sysexits.h)


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors exiting 1 (argparse's own 2 is "proven infeasible" here)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="paraplan", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="show the traceback of an internal error")
    parser.add_argument("--version", action="version", version=f"paraplan {paraplan_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    ev = sub.add_parser("evaluate", help="step time and memory of a fully fixed plan")
    ev.add_argument("scenario", help="scenario YAML/JSON file, or a RESULT.json (its plan)")
    ev.add_argument("--json", action="store_true", help="print one JSON object")
    ev.add_argument("--calibration", default=None, help="calibration profile (paraplan calibrate)")
    ev.add_argument(
        "--report",
        default=None,
        metavar="FILE.html",
        help="also write a self-contained HTML report of the result",
    )

    pl = sub.add_parser("plan", help="find the fastest plan (CP-SAT, proven optimal)")
    pl.add_argument("scenario", help="scenario YAML/JSON file")
    pl.add_argument("--json", action="store_true", help="print one JSON object")
    pl.add_argument("--time-limit", type=float, default=30.0, help="seconds (default 30)")
    pl.add_argument("--workers", type=int, default=2, help="CP-SAT workers (default 2)")
    pl.add_argument(
        "--top",
        type=int,
        default=None,
        help="list the K best plans that differ in a degree or mode (default 1; 3 with --report)",
    )
    pl.add_argument("--seed", type=int, default=0, help="CP-SAT random seed (default 0)")
    pl.add_argument(
        "--more-headroom",
        action="store_true",
        help="for a plan at the edge of memory, one more search: the fastest plan keeping more free",
    )
    pl.add_argument(
        "--verbose",
        action="store_true",
        help="log every incumbent plan on stderr (default: one progress line on a terminal)",
    )
    pl.add_argument("--export", default=None, help="comma-separated targets to export")
    pl.add_argument("--out", default=None, help="directory for --export files (default .)")
    pl.add_argument(
        "--target",
        default=None,
        choices=get_args(SolverTarget),
        help="search only plans this framework can run (sets solver.target); any: "
        "the unrestricted optimum (default: plans at least one framework runs)",
    )
    pl.add_argument("--calibration", default=None, help="calibration profile (paraplan calibrate)")
    pl.add_argument(
        "--report",
        default=None,
        metavar="FILE.html",
        help="also write a self-contained HTML report (lists 3 plans unless --top)",
    )

    ex = sub.add_parser("export", help="write a result (from --json) for a framework")
    ex.add_argument("result", help="RESULT.json as printed by `paraplan plan --json`")
    ex.add_argument("--to", required=True, help="|".join(FRAMEWORKS))
    ex.add_argument("--out", default=None, help="directory to write into (default: stdout)")
    pr = sub.add_parser("presets", help="list the model and cluster presets")
    pr.add_argument(
        "--json", action="store_true", help="print one JSON object: {models: [...], clusters: [...]}"
    )
    sw = sub.add_parser("sweep", help="solve a grid of scenarios into a CSV (local processes or Ray)")
    sw.add_argument("grid", help="GRID.yaml: base + grid (dotted paths to lists), or scenarios")
    sw.add_argument("--out", required=True, help="CSV to write (resumed when it exists)")
    sw.add_argument("--jobs", type=int, default=None, help="local worker processes (default: CPUs)")
    sw.add_argument("--ray", default=None, metavar="local|auto|ADDRESS", help="run on Ray ([ray] extra)")
    sw.add_argument("--time-limit", type=float, default=30.0, help="seconds per scenario (default 30)")
    sw.add_argument("--seed", type=int, default=0, help="CP-SAT random seed (default 0)")
    sw.add_argument(
        "--report",
        default=None,
        metavar="FILE.html",
        help="also write time against cost with the Pareto front",
    )
    add_calibrate_parsers(sub)
    for command in sub.choices.values():  # `paraplan plan X --debug` as well as `paraplan --debug`
        command.add_argument(
            "--debug",
            action="store_true",
            default=argparse.SUPPRESS,
            help="show the traceback of an internal error",
        )
    return parser


def _print_result(result, as_json: bool) -> None:
    from paraplan.reports.text import render_result

    if as_json:
        print(json.dumps(result.model_dump(mode="json"), allow_nan=False))  # strict JSON
    elif getattr(result, "kind", None) == "serving":  # paraplan.serving.ServingResult
        from paraplan.serving.report import render_serving

        print(render_serving(result))
    else:
        from paraplan.capacity.report import render_capacity

        print(render_result(result) + render_capacity(result))


def _refuse_for_serving(args: argparse.Namespace) -> None:
    """Training-only flags on a serving scenario (``workload:``): ConfigError naming the flag."""
    from paraplan.serving.schema import is_serving

    if not is_serving(args.scenario):
        return
    for flag, value in (
        ("--target", getattr(args, "target", None)),
        ("--report", args.report),
        ("--calibration", args.calibration),
    ):
        if value:
            raise ConfigError(
                f"{flag} is for training scenarios; a serving scenario (workload:) takes none yet"
            )


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from paraplan.api import evaluate

    if args.report:
        from paraplan.reports.html import check_report_path

        check_report_path(args.report)
    _refuse_for_serving(args)
    result = evaluate(args.scenario, calibration=args.calibration)
    _print_result(result, args.json)
    _write_report(result, args.report)
    return 0


def _write_report(result, path: str | None) -> None:
    """``--report FILE.html``: the HTML report of ``result`` (paraplan/reports/html.py)."""
    if path:
        from paraplan.reports.html import write_report

        print(f"wrote {write_report(result, path)}", file=sys.stderr)


def _cmd_plan(args: argparse.Namespace) -> int:
    from paraplan.api import solve

    progress = _progress(args.verbose, args.json)
    _refuse_for_serving(args)
    if args.export:  # a misspelt target fails before the solve, not after it
        from paraplan.export import EXPORTERS
        from paraplan.export.registry import SERVING_EXPORTS

        known = [*EXPORTERS, *SERVING_EXPORTS]
        unknown = [n for n in args.export.split(",") if n.strip().lower() not in known]
        if unknown:
            raise ConfigError(
                f"--export {','.join(unknown)}: unknown target; choose from " + ", ".join(known)
            )
    elif args.out is not None:
        raise ConfigError("--out names the directory for --export files; add --export TARGETS")
    top = 1 if args.top is None else args.top
    if args.report:  # a bad path fails before the solve; the report shows runner-ups
        from paraplan.reports.html import REPORT_TOP, check_report_path

        check_report_path(args.report)
        top = REPORT_TOP if args.top is None else top
    scenario = args.scenario
    if args.target:
        from paraplan.scenario.schema import load_scenario

        scenario = load_scenario(args.scenario)
        solver = scenario.solver.model_copy(update={"target": args.target})
        scenario = scenario.model_copy(update={"solver": solver})
    try:
        result = solve(
            scenario,
            time_limit_s=args.time_limit,
            workers=args.workers,
            top=top,
            seed=args.seed,
            progress=progress,
            calibration=args.calibration,
            more_headroom=args.more_headroom,
        )
    finally:
        if progress is not None:
            progress.done()
    _print_result(result, args.json)
    _write_report(result, args.report)
    if args.export:
        from paraplan.export import write_exports

        for path in write_exports(result, args.export.split(","), Path(args.out or ".")):
            print(f"wrote {path}", file=sys.stderr)
    return 0


class _ProgressLine:
    """``paraplan plan``'s search progress on stderr: every line with ``--verbose`` (the
    incumbent log); else, on a terminal, one line rewritten in place (best, bound, gap,
    elapsed: each incumbent CP-SAT finds), cleared before the plan is printed."""

    def __init__(self, in_place: bool) -> None:
        self._in_place = in_place
        self._shown = False

    def __call__(self, line: str) -> None:
        if not self._in_place:
            print(line, file=sys.stderr, flush=True)
            return
        width = max(20, shutil.get_terminal_size().columns - 1)
        print("\r\033[K" + " ".join(line.split())[:width], end="", file=sys.stderr, flush=True)
        self._shown = True

    def done(self) -> None:
        """Clear the progress line (the plan follows)."""
        if self._shown:
            print("\r\033[K", end="", file=sys.stderr, flush=True)
            self._shown = False


def _progress(verbose: bool, as_json: bool) -> _ProgressLine | None:
    """The progress reporter of ``paraplan plan`` (``_ProgressLine``): None when piped (stdout
    or stderr not a terminal) or with ``--json``, unless ``--verbose`` asks for the log."""
    if verbose:
        return _ProgressLine(in_place=False)
    if as_json or not (sys.stdout.isatty() and sys.stderr.isatty()):
        return None
    return _ProgressLine(in_place=True)


def _cmd_export(args: argparse.Namespace) -> int:
    from paraplan.export import export_text, load_result, write_exports

    result = load_result(args.result)
    if args.out is None:
        print(export_text(result, args.to))
    else:
        for path in write_exports(result, [args.to], Path(args.out)):
            print(f"wrote {path}", file=sys.stderr)
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from paraplan.capacity.sweep import load_sweep, run_sweep

    if args.jobs is not None and args.jobs < 1:
        raise ConfigError(f"--jobs {args.jobs} must be at least 1")
    if not 0 < args.time_limit <= 86_400:  # also refuses nan
        raise ConfigError(f"--time-limit {args.time_limit} must be above 0 and at most 86,400 s")
    if args.report:
        from paraplan.reports.html import check_report_path

        check_report_path(args.report)
    sweep = load_sweep(args.grid)
    ran, kept, wall_s = run_sweep(
        sweep, args.out, jobs=args.jobs, ray=args.ray, time_limit_s=args.time_limit, seed=args.seed
    )
    rate = f", {ran / wall_s:.2f} scenarios/s" if ran and wall_s > 0 else ""
    print(f"wrote {args.out}: {ran:,} scenarios run, {kept:,} already there ({wall_s:.1f} s{rate})")
    if args.report:
        import csv

        from paraplan.capacity.html import sweep_report_html

        with open(args.out, newline="") as f:
            rows = list(csv.DictReader(f))
        Path(args.report).write_text(sweep_report_html(rows, sweep.paths), encoding="utf-8")
        print(f"wrote {args.report}", file=sys.stderr)
    return 0


def _cmd_presets(args: argparse.Namespace) -> int:
    from paraplan.presets import cluster_rows, model_rows, render_presets

    if args.json:
        print(json.dumps({"models": model_rows(), "clusters": cluster_rows()}))
    else:
        print(render_presets())
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = {
        "evaluate": _cmd_evaluate,
        "plan": _cmd_plan,
        "export": _cmd_export,
        "presets": _cmd_presets,
        "sweep": _cmd_sweep,
        **CALIBRATE_HANDLERS,
    }[args.command]
    try:
        return handler(args)
    except ParaplanError as e:
        print(f"paraplan {args.command}: {e}", file=sys.stderr)
        return e.exit_code
    except BrokenPipeError:  # e.g. `paraplan plan ... | head -1`: the reader left, not an error
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print(f"paraplan {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - the one place that turns a bug into an exit code
        if args.debug:
            traceback.print_exc()
        first = (str(e).splitlines() or [""])[0][:300]
        print(
            f"paraplan {args.command}: internal error: {type(e).__name__}: {first} "
            f"(please report it with the scenario; --debug shows the traceback)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
