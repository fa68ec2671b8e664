"""The ``calibrate`` and ``profile`` subcommands of ``paraplan`` (kept apart from cli.py).

paraplan calibrate RECORDS --out PROFILE.yaml   # fit efficiencies to measured steps
paraplan profile --out DIR                      # microbenchmarks -> DIR/records.jsonl
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

__all__ = ["add_parsers", "HANDLERS", "render_profile"]


def add_parsers(sub: Any) -> None:
    """Add ``calibrate`` and ``profile`` to the ``paraplan`` subparsers."""
    ca = sub.add_parser("calibrate", help="fit efficiency parameters to measured runs")
    ca.add_argument("records", help="records file: YAML list or JSON Lines (.jsonl)")
    ca.add_argument("--out", required=True, help="calibration profile YAML to write")
    pr = sub.add_parser("profile", help="microbenchmark this machine (needs torch)")
    pr.add_argument("--out", required=True, help="directory for records.jsonl")
    pr.add_argument(
        "--processes",
        type=int,
        default=None,
        help="ranks for the collectives (default: the GPUs, or 2 on CPU)",
    )


def render_profile(data: dict[str, Any]) -> str:
    """Human summary of a profile mapping: per accelerator, what moved and the fit quality."""
    lines = []
    for key, e in data["accelerators"].items():
        cat = e.get("catalog", {})
        moved = ", ".join(f"{n} {cat.get(n, '?')} -> {v}" for n, v in e["parameters"].items())
        fit = e.get("fit", {})
        lines.append(
            f"{key}{' (CPU smoke test, never applied)' if e['smoke_test'] else ''}: "
            f"{moved or 'nothing determined'}"
        )
        if fit:
            lines.append(
                f"  {fit['num_records']} records: median |error| "
                f"{fit['median_abs_error_before']:.1%} -> "
                f"{fit['median_abs_error_after']:.1%}"
            )
        if e["not_determined"]:
            lines.append(f"  not determined (catalog kept): {', '.join(e['not_determined'])}")
    return "\n".join(lines)


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from paraplan.calibration.calibrate import calibrate
    from paraplan.hardware.calibration import profile_to_dict

    data = profile_to_dict(calibrate(args.records))
    out = Path(args.out)
    out.write_text(yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100))
    print(render_profile(data))
    print(f"wrote {out}", file=sys.stderr)
    return 0


def _cmd_profile(args: argparse.Namespace) -> int:
    from paraplan.calibration.profile import run_profile

    path = run_profile(
        Path(args.out), processes=args.processes, log=lambda line: print(line, file=sys.stderr, flush=True)
    )
    smoke = '"smoke_test": true' in path.read_text()
    print(f"wrote {path}" + (" (CPU smoke test: these numbers calibrate no GPU)" if smoke else ""))
    return 0


HANDLERS = {"calibrate": _cmd_calibrate, "profile": _cmd_profile}
