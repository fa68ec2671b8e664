"""The export registry: target name -> the module that renders it and the file it writes."""

from __future__ import annotations

from typing import NamedTuple

from paraplan.errors import ExportError
from paraplan.rules.frameworks import FRAMEWORKS

__all__ = ["Target", "EXPORTERS", "SERVING_EXPORTS", "TRACE", "FILENAMES", "lookup"]


class Target(NamedTuple):
    """An export target: the module that renders it and the file ``write_exports`` writes."""

    module: str
    filename: str


TRACE = "trace"
"""paraplan's own export (a trace of the planned step), not a framework: it records any plan."""
FILENAMES: dict[str, str] = {
    "megatron": "megatron.sh",
    "deepspeed": "deepspeed.json",
    "torchtitan": "torchtitan.sh",
    "maxtext": "maxtext.yml",  # MaxText reads only .yml
    "nemo": "nemo.py",
    "torch": "torch_plan.py",
    TRACE: "trace.json",
}
"""Target name -> the file ``write_exports`` writes."""
if set(FILENAMES) != set(FRAMEWORKS) | {TRACE}:  # a framework added to rules/frameworks.py only
    raise TypeError(f"export FILENAMES must list the frameworks {FRAMEWORKS} and {TRACE!r}")

EXPORTERS: dict[str, Target] = {
    name: Target(f"paraplan.export.{name}", filename) for name, filename in FILENAMES.items()
}
"""Target name (the frameworks of rules/frameworks.py and ``trace``) -> (module with
``render(ctx) -> str``, output file name)."""


SERVING_EXPORTS = ("vllm", "sglang", "trtllm", "dynamo")
"""The serving targets (paraplan/export/serving/: SERVING_TARGETS), for serving results only."""


def lookup(name: str) -> tuple[str, Target]:
    key = name.strip().lower()
    if key in SERVING_EXPORTS:
        raise ExportError(
            f"export target {name!r} launches a serving plan: plan a serving scenario (workload: in "
            "place of job:) and export that result"
        )
    if key not in EXPORTERS:
        raise ExportError(f"unknown export target {name!r}; choose one of {', '.join(EXPORTERS)}")
    return key, EXPORTERS[key]
