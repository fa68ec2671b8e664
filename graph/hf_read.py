"""Typed, range-checked reads of a Hugging Face ``config.json`` value: each ValueError names
model.hf_config, the JSON key and the rule."""

from __future__ import annotations

from typing import Any

from paraplan.graph.spec import MODEL_LIMITS, scenario_key, show_value

__all__ = ["read_value", "read_int", "read_str", "read_bool", "read_float", "REQUIRED"]

REQUIRED = object()


def read_value(cfg: dict[str, Any], keys: tuple[str, ...]) -> tuple[str, Any]:
    """The first of ``keys`` that ``cfg`` sets to something other than null, and its value."""
    for key in keys:
        if cfg.get(key) is not None:
            return key, cfg[key]
    return "", None


def read_int(
    cfg: dict[str, Any],
    *keys: str,
    spec: str,
    default: Any = REQUIRED,
    minimum: int = 1,
    needed_for: str = "",
) -> int:
    """The first of ``keys`` set in ``cfg``, an integer from ``minimum`` to MODEL_LIMITS[spec]
    (``spec``: the ModelSpec field it fills); ``default`` when none is set. ValueError names
    model.hf_config, the JSON key and the rule."""
    key, value = read_value(cfg, keys)
    if not key:
        if default is REQUIRED:
            raise ValueError(f"model.hf_config: needs {' or '.join(keys)}{needed_for}")
        return default
    if type(value) is not int:  # bool is an int subclass; floats, strings, lists are no sizes
        raise ValueError(
            f"model.hf_config: {key}={show_value(value)} must be an integer, not a {type(value).__name__}"
        )
    limit = MODEL_LIMITS[spec]
    if value < minimum:
        raise ValueError(f"model.hf_config: {key}={show_value(value)} must be at least {minimum}")
    if value > limit:
        raise ValueError(
            f"model.hf_config: {key}={show_value(value)} exceeds paraplan's limit of "
            f'{limit:,} for model.{scenario_key(spec)} (README "Limits")'
        )
    return value


def read_str(cfg: dict[str, Any], *keys: str, default: str) -> str:
    """The first of ``keys`` set in ``cfg``, which must be a string; ``default`` when none is."""
    key, value = read_value(cfg, keys)
    if not key:
        return default
    if not isinstance(value, str):
        raise ValueError(
            f"model.hf_config: {key}={show_value(value)} must be a string, not a {type(value).__name__}"
        )
    return value


def read_bool(cfg: dict[str, Any], key: str, *, default: bool) -> bool:
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ValueError(f"model.hf_config: {key}={show_value(value)} must be true or false")
    return value


def read_float(cfg: dict[str, Any], key: str, default: float) -> float:
    value = cfg.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError(f"model.hf_config: {key}={show_value(value)} must be a positive number")
    return float(value)
