"""Fitted parameters of the MoE token dispatchers that deduplicate by node (``data/dispatch.yaml``).

DeepEP and HybridEP: per accelerator generation, the achieved fraction of each link tier's line
rate (the combine's own NVLink fraction where a part was measured apart), the fixed time of one
call and the SMs the kernels hold; and the SM count of each accelerator. This module only reads
the data file and converts units (us -> s); the formulas are in cost/dispatch.py, the sources
and fits in the data file's comments.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from typing import Any

import yaml

__all__ = ["DispatcherParams", "dispatcher_params", "dispatcher_names", "sm_count"]

US_S = 1e-6


@dataclass(frozen=True, slots=True, kw_only=True)
class DispatcherParams:
    """One dispatcher on one generation (data/dispatch.yaml; fractions of catalog line rates)."""

    dispatcher: str
    generation: str
    scale_up: float  # achieved fraction of the scale-up (NVLink) line rate
    scale_out: float | None  # of the scale-out (NIC) line rate; None: the catalog tier's efficiency
    fixed_s: float  # time of one call independent of bytes
    sms: int  # SMs the kernels hold (default for the generation)
    sms_by_accelerator: tuple[tuple[str, int], ...] = ()
    # the combine's scale-up fraction on a part measured apart (default: scale_up)
    combine_scale_up_by_accelerator: tuple[tuple[str, float], ...] = ()

    def sms_on(self, accelerator_key: str) -> int:
        """SMs held on ``accelerator_key`` (a part measured at another SM count overrides)."""
        return dict(self.sms_by_accelerator).get(accelerator_key, self.sms)

    def combine_scale_up_on(self, accelerator_key: str) -> float:
        """Scale-up fraction the combine reaches on ``accelerator_key``: its own where the part
        was measured apart (DeepEP's combine in GB200's multi-node NVLink domain), else
        ``scale_up``."""
        return dict(self.combine_scale_up_by_accelerator).get(accelerator_key, self.scale_up)


@cache
def _raw() -> dict[str, Any]:
    text = resources.files("paraplan.hardware").joinpath("data/dispatch.yaml").read_text()
    data: dict[str, Any] = yaml.safe_load(text)
    return data


def dispatcher_names() -> list[str]:
    """Dispatchers with fitted parameters (the node-deduplicating ones)."""
    return sorted(_raw()["dispatchers"])


def _check_fraction(name: str, value: float | None) -> None:
    if value is not None and not 0.0 < value <= 1.0:
        raise ValueError(f"data/dispatch.yaml: {name}={value} must be in (0, 1]")


@cache
def dispatcher_params(dispatcher: str, generation: str) -> DispatcherParams:
    """Parameters of ``dispatcher`` on accelerator ``generation``; ValueError when none are fitted
    (the dispatcher does not run there, or no measurement covers it)."""
    table = _raw()["dispatchers"]
    if dispatcher not in table:
        raise ValueError(
            f"moe_dispatcher={dispatcher!r} has no parameters; known: {', '.join(sorted(table))}"
        )
    gens: dict[str, Any] = table[dispatcher]
    raw = gens.get(generation)
    if raw is None:
        raise ValueError(
            f"moe_dispatcher={dispatcher!r} has no measured parameters on accelerator generation "
            f"{generation!r} (fitted: {', '.join(sorted(gens))}); choose alltoall or allgather"
        )
    if "same_as" in raw:
        return replace(dispatcher_params(dispatcher, raw["same_as"]), generation=generation)
    scale_out = None if raw.get("scale_out") is None else float(raw["scale_out"])
    _check_fraction("scale_up", float(raw["scale_up"]))
    _check_fraction("scale_out", scale_out)
    combine_up = tuple(
        sorted((k, float(v)) for k, v in raw.get("combine_scale_up_by_accelerator", {}).items())
    )
    for key, value in combine_up:
        _check_fraction(f"combine_scale_up_by_accelerator.{key}", value)
    fixed_us = float(raw["fixed_us"])
    if not 0.0 <= fixed_us <= 1000.0:
        raise ValueError(f"data/dispatch.yaml: fixed_us={fixed_us} must be in [0, 1000]")
    return DispatcherParams(
        dispatcher=dispatcher,
        generation=generation,
        scale_up=float(raw["scale_up"]),
        scale_out=scale_out,
        fixed_s=fixed_us * US_S,
        sms=int(raw["sms"]),
        sms_by_accelerator=tuple(sorted((k, int(v)) for k, v in raw.get("sms_by_accelerator", {}).items())),
        combine_scale_up_by_accelerator=combine_up,
    )


def sm_count(accelerator_key: str) -> int:
    """Streaming multiprocessors of ``accelerator_key`` (catalog key); ValueError if unknown."""
    counts: dict[str, int] = _raw()["sm_counts"]
    if accelerator_key not in counts:
        raise ValueError(
            f"no SM count for accelerator {accelerator_key!r} in data/dispatch.yaml "
            f"(known: {', '.join(sorted(counts))})"
        )
    return int(counts[accelerator_key])
