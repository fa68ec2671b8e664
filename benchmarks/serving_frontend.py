"""The front-end time per request, measured on the calibration rows where nothing else is unknown.

    python -m benchmarks.serving_frontend [CSV]

TTFT = front end + the model's service and wait (cost/serving.py). At the lowest offered load of
TensorRT-LLM 0.14's online table (QPS 2: a request finds about two others running, no queue)
and on one GPU running Llama 3.1 8B (no collective; a 202- or 467-token prompt, 3.6-8.5 ms of
BF16 GEMMs at the measured kernel rate), the service is a prefill step and half a decode step,
both known to the cost model; what the client measures beyond them is the front end: the request
through Triton's HTTP / gRPC server, the ensemble's preprocessing (tokenising the prompt in a
Python-backend model), admission to the C++ batch manager's next step, the postprocessing model
detokenising the first token, and the response back to the benchmark client. Each such row gives
front = measured TTFT - the model's TTFT with a front end of 0, the model at the data file's
``priors:`` for every other parameter (set before any serving row, so the value does not depend
on which rows a fit keeps); the median over the rows (``LOWEST_LOAD``) is
hardware/data/serving.yaml's ``ttft_overhead_ms``, rounded to the table's whole milliseconds, and
the fit keeps it fixed (benchmarks/serving_fidelity.py ``BOUNDS``). The 70B TP4 rows at the same
load are left out: their 18-30 ms of excess grows with the prompt (202 -> 467 tokens), a prefill
the model under-predicts, not a per-request constant (docs/serving_model.md Sec. 6.0f).
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from paraplan.cost.serving import evaluate_serving
from paraplan.hardware.serving import ServingFit, serving_priors

from benchmarks.serving_set import DEFAULT_CSV, ServingCase, serving_cases

__all__ = ["FrontEndRow", "LOWEST_LOAD", "front_end_rows", "front_end_ms", "main"]

LOWEST_LOAD = {
    "source": "trtllm_perf_overview_v0.14_online",
    "request_rate": 2.0,
    "model": "llama3.1-8b",
    "num_gpus": 1,
}
"""The rows the front end is read from: the lowest offered load of the one table that measures
TTFT at a known rate, on one GPU (no collective), the smallest model (the shortest prefill)."""


@dataclass(frozen=True)
class FrontEndRow:
    id: str
    isl: float
    measured_ms: float
    service_ms: float  # the model's TTFT with no front end, at the priors

    @property
    def front_ms(self) -> float:
        return self.measured_ms - self.service_ms


def _is_lowest_load(case: ServingCase) -> bool:
    return (
        case.source == LOWEST_LOAD["source"]
        and case.workload.request_rate == LOWEST_LOAD["request_rate"]
        and case.spec.name == LOWEST_LOAD["model"]
        and case.plan.replicas * case.plan.tp * case.plan.pp == LOWEST_LOAD["num_gpus"]
        and "ttft_ms" in case.measured
    )


def front_end_rows(cases: Sequence[ServingCase]) -> list[FrontEndRow]:
    """Each lowest-load row's measured TTFT beside the model's TTFT without a front end."""
    values = serving_priors().values()
    no_front = ServingFit.from_values({**values, "ttft_overhead_ms": 0.0})
    out = []
    for case in (c for c in cases if _is_lowest_load(c)):
        p = evaluate_serving(case.spec, case.cluster, case.plan, case.workload, case.engine, fit=no_front)
        out.append(FrontEndRow(case.id, case.workload.isl, case.measured["ttft_ms"], p.ttft_ms_mean))
    return out


def front_end_ms(rows: Sequence[FrontEndRow]) -> float:
    """The median front end of the rows, rounded to whole ms (the table's TTFT resolution)."""
    if not rows:
        raise ValueError("no lowest-load rows to read the front end from")
    return float(round(statistics.median(r.front_ms for r in rows)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.serving_frontend", description=__doc__.split("\n")[0]
    )
    ap.add_argument("csv", nargs="?", default=str(DEFAULT_CSV))
    args = ap.parse_args(argv)
    cases, _ = serving_cases(Path(args.csv))
    rows = front_end_rows(cases)
    for r in rows:
        print(
            f"{r.id} isl {r.isl:5.0f}: measured {r.measured_ms:5.1f} ms, model without front end "
            f"{r.service_ms:5.2f} ms, front end {r.front_ms:5.2f} ms"
        )
    print(f"front end (median of {len(rows)} rows, whole ms): {front_end_ms(rows):.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
