"""The export registry: target name -> the module that renders it and the file it writes."""

from __future__ import annotations

from typing import NamedTuple

from paraplan.errors import ExportError

__all__ = ["Target", "EXPORTERS", "lookup"]


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


def lookup(name: str) -> tuple[str, Target]:
    key = name.strip().lower()
    if key not in EXPORTERS:
        raise ExportError(f"unknown export target {name!r}; choose one of {', '.join(EXPORTERS)}")
    return key, EXPORTERS[key]
