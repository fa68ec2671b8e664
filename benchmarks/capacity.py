"""Capacity planning's speed table (issue 25): cluster searches and sweep throughput, measured.

    python -m benchmarks.capacity [--sweep N] [--jobs J] [--out benchmarks/results/capacity.md]

1. Cluster searches (``paraplan.solve`` with ``cluster.choose``, 2 CP-SAT workers): Llama 3 70B
   (examples/capacity-llama3-70b.yaml) and Llama 3.1 405B over H100, B200 and GB200 from 1,024 to
   16,384 GPUs (``step: double``, and every whole node under a 120 s limit), with the clusters
   solved, pruned and the status.
2. A sweep of N scenarios (default 1,000) in J local worker processes (default 2): Llama 3 8B on
   one DGX H100 node, the plan searched (one CP-SAT worker each), over global batch, restart time
   and failure rate; scenarios per second.
Every number is measured by the run: wall-clock seconds and the process CPU seconds.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

import yaml

import paraplan
from paraplan.capacity.sweep import load_sweep, run_sweep

SEARCHES = {
    "llama3-70b, 3 types, 256-2,048 GPUs, cost, 90-day deadline": "examples/capacity-llama3-70b.yaml",
    "llama3.1-405b, 3 types, 1,024-16,384 GPUs (double), time_to_train": {
        "model": {"preset": "llama3.1-405b"},
        "cluster": {
            "choose": {
                "presets": ["dgx-h100", "dgx-b200", "gb200-nvl72"],
                "min_gpus": 1024,
                "max_gpus": 16384,
                "step": "double",
            }
        },
        "job": {"seq_len": 8192, "global_batch": 2048, "tokens": 15.6e12},
        "objective": "time_to_train",
    },
}
SEARCHES["llama3.1-405b, 3 types, 1,024-16,384 GPUs (every node), time_to_train, 120 s limit"] = {
    **SEARCHES["llama3.1-405b, 3 types, 1,024-16,384 GPUs (double), time_to_train"],  # type: ignore[dict-item]
    "cluster": {
        "choose": {
            "presets": ["dgx-h100", "dgx-b200", "gb200-nvl72"],
            "min_gpus": 1024,
            "max_gpus": 16384,
            "step": "node",
        }
    },
}
LIMITS_S = {label: 120.0 if "120 s limit" in label else 600.0 for label in SEARCHES}


def _searches() -> list[str]:
    rows = [
        "| search | choice | days | cost | status | clusters | solved | wall s | CPU s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, scenario in SEARCHES.items():
        wall, cpu = time.perf_counter(), time.process_time()
        r = paraplan.solve(scenario, time_limit_s=LIMITS_S[label], workers=2)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        c, cap, p = r.cluster, r.capacity, r.predicted
        assert c is not None and cap is not None and p.time_to_train_days is not None
        cost = f"${p.cost_usd / 1e6:,.1f}M" if p.cost_usd is not None else "-"
        status = cap.status if cap.status == "OPTIMAL" else f"{cap.status}, gap {cap.gap:.1%}"
        rows.append(
            f"| {label} | {c.preset} x {c.gpus:,} | {p.time_to_train_days:,.1f} | {cost} | {status} | "
            f"{cap.candidates:,} | {cap.solved} | {wall:.1f} | {cpu:.1f} |"
        )
    return rows


def _sweep(count: int, jobs: int) -> list[str]:
    batches = [32, 64, 128, 256, 512]
    restarts = [60, 300, 600, 900, 1200]
    rates = [1e-5 * (1 + i) for i in range(max(1, count // (len(batches) * len(restarts))))]
    grid = {
        "base": {
            "model": {"preset": "llama3-8b"},
            "cluster": {"preset": "dgx-h100", "nodes": 1},
            "job": {"seq_len": 4096, "global_batch": 64, "tokens": 1e11},
        },
        "grid": {
            "job.global_batch": batches,
            "reliability.restart_s": restarts,
            "reliability.failure_rate_per_gpu_hour": rates,
        },
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "grid.yaml"
        path.write_text(yaml.safe_dump(grid))
        sweep = load_sweep(path)
        cpu = time.process_time()
        ran, _, wall = run_sweep(sweep, Path(tmp) / "out.csv", jobs=jobs, progress=False)
        cpu = time.process_time() - cpu
    return [
        "| sweep | scenarios | worker processes | wall s | scenarios/s |",
        "|---|---|---|---|---|",
        f"| llama3-8b on 8 H100, plan searched | {ran:,} | {jobs} | {wall:.1f} | {ran / wall:.2f} |",
        "",
        f"(parent process CPU {cpu:.1f} s; the workers' CPU is theirs)",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", type=int, default=1000, help="scenarios in the sweep (default 1,000; 0: none)")
    ap.add_argument("--jobs", type=int, default=2, help="local worker processes (default 2)")
    ap.add_argument("--out", default=None, help="write the tables to this Markdown file")
    args = ap.parse_args()
    lines = [
        "# Capacity planning: measured speed",
        "",
        f"`python -m benchmarks.capacity --sweep {args.sweep} --jobs {args.jobs}` on "
        f"{platform.machine()} ({platform.python_version()}), {time.strftime('%Y-%m-%d')}; the machine "
        "is shared (2 cores), so times are upper bounds.",
        "",
        *_searches(),
        "",
        *(_sweep(args.sweep, args.jobs) if args.sweep else ["(no sweep: --sweep 0)"]),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
