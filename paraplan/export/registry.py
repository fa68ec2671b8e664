"""The export registry: target name -> the module that renders it and the file it writes."""

from __future__ import annotations

from typing import NamedTuple

from paraplan.errors import ExportError

__all__ = ["Target", "EXPORTERS", "SERVING_EXPORTS", "lookup"]


class Target(NamedTuple):
    """An export target: the module that renders it and the file ``write_exports`` writes."""

    module: str
    filename: str


EXPORTERS: dict[str, Target] = {
    "megatron": Target("paraplan.export.megatron", "megatron.sh"),
    "deepspeed": Target("paraplan.export.deepspeed", "deepspeed.json"),
    "torchtitan": Target("paraplan.export.torchtitan", "torchtitan.sh"),
    "maxtext": Target("paraplan.export.maxtext", "maxtext.yml"),  # MaxText reads only .yml
    "nemo": Target("paraplan.export.nemo", "nemo.py"),
    "torch": Target("paraplan.export.torch", "torch_plan.py"),
    "trace": Target("paraplan.export.trace", "trace.json"),
}
"""Target name -> (module with ``render(ctx) -> str``, output file name)."""


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
