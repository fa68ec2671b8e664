"""The MoE residuals grouped by what might explain them.

    python -m benchmarks.moe_residuals [CSV]

Scores the mixture-of-experts rows as ``python -m benchmarks.fidelity --kind moe`` does
(benchmarks/fidelity.py ``scored_rows``) and groups their errors (predicted / published - 1) by
each feature of the run that a systematic term could hang on: the source, the GPU generation,
whether the GPUs' host is a Grace CPU (hardware/data/serving.yaml ``grace_hosted``), the model,
the sequence length, the dispatcher, the EP overlap, the CUDA-graph scope, the EP width, the
local experts per rank, the micro-batch and the precision. The values are those of the plan and
job the row maps to (benchmarks/data/README.md), defaults included. Per group: the runs, the
signed median, the median and the 90th percentile of |error|. A term that is systematically
wrong shows as a feature whose groups differ in sign; a feature whose groups all straddle zero
explains nothing. docs/moe_physics.md Sec. 5 reads these tables.
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

from paraplan.hardware.serving import is_grace_hosted

import paraplan
from benchmarks.calibration_set import CSV_PATH
from benchmarks.fidelity import Row, scored_rows, summary
from paraplan.instance import build_instance, fixed_plan

__all__ = ["FEATURES", "features", "grouped", "Group", "main"]

FEATURES = (
    "source",
    "generation",
    "host",
    "model",
    "seq_len",
    "dispatcher",
    "overlap",
    "cuda_graphs",
    "ep",
    "local_experts",
    "micro_batch",
    "precision",
)


def _seq_bucket(seq_len: int) -> str:
    """4K and 8K as they are; longer runs in the long-context bands the rows fall in."""
    if seq_len <= 8192:
        return f"{seq_len // 1024}K"
    return "16K-32K" if seq_len <= 32768 else "64K-128K"


def features(row: Row) -> dict[str, str]:
    """The value of each of FEATURES for a scored row, read from the plan and job it maps to."""
    case = row.case
    inst = build_instance(paraplan.load_scenario(case.scenario))
    plan, job, accel = fixed_plan(inst), inst.job, inst.cluster.accelerator
    experts = inst.graph.spec.num_experts
    return {
        "source": case.source_key,
        "generation": accel.generation,
        "host": "grace" if is_grace_hosted(accel.key) else "x86",
        "model": case.label.split(":", 1)[-1],
        "seq_len": _seq_bucket(job.seq_len),
        "dispatcher": plan.moe_dispatcher.value,
        "overlap": "on" if plan.moe_overlap else "off",
        "cuda_graphs": plan.cuda_graphs.value,
        "ep": str(plan.ep),
        "local_experts": str(max(1, experts // plan.ep)),
        "micro_batch": str(plan.micro_batch),
        "precision": job.precision.value,
    }


Group = tuple[int, float, float, float]
"""(runs, signed median, median |err|, p90 |err|) of one group."""


def grouped(rows: list[Row], values: list[dict[str, str]]) -> dict[str, dict[str, Group]]:
    """Per feature, per value: the Group of the rows with that value (``values[i]`` are the
    features of ``rows[i]``), the largest groups first."""
    out: dict[str, dict[str, Group]] = {}
    for feature in FEATURES:
        errors: dict[str, list[float]] = defaultdict(list)
        for row, v in zip(rows, values, strict=True):
            errors[v[feature]].append(row.error)
        out[feature] = {
            value: (len(e), statistics.median(e), *summary(e))
            for value, e in sorted(errors.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        }
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    rows, _ = scored_rows(Path(args[0]) if args else CSV_PATH, "moe")
    if not rows:
        print("0 mixture-of-experts runs scored")
        return 1
    table = grouped(rows, [features(r) for r in rows])
    for feature, groups in table.items():
        print(f"\n{feature:<34} {'runs':>4} {'signed':>7} {'median':>7} {'p90':>7}")
        for value, (n, signed, med, p90) in groups.items():
            print(f"  {value[:32]:<32} {n:>4} {signed:>+7.1%} {med:>7.1%} {p90:>7.1%}")
    med, p90 = summary([r.error for r in rows])
    print(f"\n{len(rows)} MoE runs: median |err| {med:.1%}, p90 {p90:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
