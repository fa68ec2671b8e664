"""Measurement records ``paraplan calibrate`` reads: measured training steps and microbenchmarks.

A records file is a YAML list, or JSON Lines (one object per line, ``.jsonl``). Each record is
one of:

- a **measured step**: a full scenario with a fixed plan (the keys of ``paraplan evaluate``:
  ``model``, ``cluster``, ``job``, ``plan``), or ``scenario: PATH`` (relative to the records file),
  plus exactly one measurement:

  - ``measured: {step_time_s: X}`` or ``measured: {tokens_per_s_per_gpu: X}``;
  - ``megatron_log: PATH``: a Megatron-LM training log; its ``elapsed time per iteration (ms): X``
    lines (``parse_megatron_log``);
  - ``torchtitan_log: PATH``: a torchtitan training log; its ``tps: X`` lines, tokens per second
    per GPU (``parse_torchtitan_log``).

  Logs give one value per logging interval; the measurement is the median after dropping the first
  interval (warm-up: compilation, allocator growth, NCCL setup). ``name`` labels the record.
- a **microbenchmark** from ``paraplan profile`` (it has ``kind``: ``gemm``, ``attention``,
  ``hbm_copy`` or ``collective``; see paraplan/calibration/profile.py).
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from paraplan.errors import ConfigError
from paraplan.scenario.schema import Scenario, load_scenario

__all__ = [
    "StepRecord",
    "MicroRecord",
    "load_records",
    "parse_megatron_log",
    "parse_torchtitan_log",
    "steady_state",
    "MICRO_KINDS",
]

MICRO_KINDS = ("gemm", "attention", "hbm_copy", "collective")
MS_S = 1e-3
_MEGATRON_RE = re.compile(r"elapsed time per iteration \(ms\):\s*([0-9]+(?:\.[0-9]*)?)")
_TORCHTITAN_RE = re.compile(r"(?<![a-z_])tps:\s*([0-9][0-9,]*(?:\.[0-9]+)?)")
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")
_MEASUREMENTS = ("measured", "megatron_log", "torchtitan_log")
_MEASURED_KEYS = ("step_time_s", "tokens_per_s_per_gpu")


@dataclass(frozen=True, slots=True, kw_only=True)
class StepRecord:
    """One measured training run: its scenario (fixed plan) and what was measured."""

    name: str
    scenario: Scenario
    step_time_s: float | None = None
    tokens_per_s_per_gpu: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MicroRecord:
    """One microbenchmark measurement (``paraplan profile``); ``data`` holds its fields."""

    kind: str
    device: str
    data: Mapping[str, Any]


def parse_megatron_log(text: str) -> list[float]:
    """Seconds per iteration from Megatron-LM's ``elapsed time per iteration (ms): X`` lines."""
    return [float(m.group(1)) * MS_S for m in _MEGATRON_RE.finditer(text)]


def parse_torchtitan_log(text: str) -> list[float]:
    """Tokens per second per GPU from torchtitan's ``tps: X`` metric lines (ANSI colours and
    thousands separators stripped)."""
    plain = _ANSI_RE.sub("", text)
    return [float(m.group(1).replace(",", "")) for m in _TORCHTITAN_RE.finditer(plain)]


def steady_state(values: list[float]) -> float:
    """Median of the logged values after the first (warm-up) one; the only value if just one."""
    return statistics.median(values[1:] if len(values) > 1 else values)


def _read_log(where: str, key: str, path: Path) -> list[float]:
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        raise ConfigError(f"{where}.{key}: cannot read {str(path)!r}: {e.strerror}") from None
    values = parse_megatron_log(text) if key == "megatron_log" else parse_torchtitan_log(text)
    if not values:
        pattern = "'elapsed time per iteration (ms): X'" if key == "megatron_log" else "'tps: X'"
        raise ConfigError(f"{where}.{key}: no {pattern} lines in {path}")
    return values


def _positive(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(f"{where}={value!r} must be a positive number")
    return float(value)


def _step_record(where: str, raw: Mapping[str, Any], base: Path | None) -> StepRecord:
    given = [k for k in _MEASUREMENTS if k in raw]
    if len(given) != 1:
        raise ConfigError(
            f"{where}: give exactly one of measured: {{step_time_s: ...}} (or "
            f"tokens_per_s_per_gpu), megatron_log: PATH or torchtitan_log: PATH; got "
            f"{given or 'none'}"
        )
    body = {k: v for k, v in raw.items() if k not in (*_MEASUREMENTS, "name")}
    if "scenario" in body:
        if set(body) != {"scenario"}:
            raise ConfigError(
                f"{where}: give scenario: PATH or the scenario's keys inline, "
                f"not both (extra: {', '.join(sorted(set(body) - {'scenario'}))})"
            )
        path = Path(str(body["scenario"]))
        scenario = load_scenario(path if path.is_absolute() or base is None else base / path)
    else:
        try:
            scenario = load_scenario(body)
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
    name = str(raw.get("name", where))
    key = given[0]
    if key == "measured":
        m = raw["measured"]
        if not isinstance(m, Mapping) or len(m) != 1 or next(iter(m)) not in _MEASURED_KEYS:
            raise ConfigError(
                f"{where}.measured={m!r} must be {{step_time_s: X}} or {{tokens_per_s_per_gpu: X}}"
            )
        field, value = next(iter(m.items()))
        return StepRecord(
            name=name, scenario=scenario, **{field: _positive(f"{where}.measured.{field}", value)}
        )
    path = Path(str(raw[key]))
    values = _read_log(where, key, path if path.is_absolute() or base is None else base / path)
    if key == "megatron_log":
        return StepRecord(name=name, scenario=scenario, step_time_s=steady_state(values))
    return StepRecord(name=name, scenario=scenario, tokens_per_s_per_gpu=steady_state(values))


def _micro_record(where: str, raw: Mapping[str, Any]) -> MicroRecord:
    kind = raw["kind"]
    if kind not in MICRO_KINDS:
        raise ConfigError(f"{where}.kind={kind!r} must be one of {', '.join(MICRO_KINDS)}")
    if "device" not in raw:
        raise ConfigError(f"{where}.device is missing (the device the microbenchmark ran on)")
    _positive(f"{where}.time_s", raw.get("time_s"))
    return MicroRecord(kind=kind, device=str(raw["device"]), data=dict(raw))


def _raw_records(path: Path) -> list[Any]:
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read records file {str(path)!r}: {e.strerror}") from None
    if path.suffix == ".jsonl":
        out = []
        for i, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ConfigError(f"{path}:{i}: not a JSON object: {e.msg}") from None
        return out
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(data, list):
        raise ConfigError(f"{path}: a records file is a YAML list of records (or JSON Lines, .jsonl)")
    return data


def load_records(source: str | Path | list[Any]) -> list[StepRecord | MicroRecord]:
    """Records from a file (YAML list or ``.jsonl``) or an in-memory list; ConfigError names the
    record (``records[i]``) and the field."""
    base = None
    if isinstance(source, list):
        raw = source
    else:
        path = Path(source)
        raw, base = _raw_records(path), path.parent
    if not raw:
        raise ConfigError("records: the file holds no records")
    out: list[StepRecord | MicroRecord] = []
    for i, rec in enumerate(raw):
        where = f"records[{i}]"
        if not isinstance(rec, Mapping):
            raise ConfigError(
                f"{where} must be a mapping (a scenario plus measured, or a microbenchmark record)"
            )
        out.append(_micro_record(where, rec) if "kind" in rec else _step_record(where, rec, base))
    return out
