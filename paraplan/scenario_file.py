"""Reading a scenario file safely: the YAML/JSON document of a file a user (or anyone) wrote,
refused with a ConfigError naming the file and the cause when it is unreadable, too large, not
UTF-8, not YAML, nested too deep or too many values once aliases are expanded. paraplan/schema.py
validates what it reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from paraplan.errors import ConfigError

__all__ = ["MAX_SCENARIO_BYTES", "MAX_NESTING", "MAX_VALUES", "read_document", "check_shape"]

MAX_SCENARIO_BYTES = 1 << 20
"""A scenario file is a few KB even with per-stage lists for 1,024 layers."""
MAX_NESTING = 16
"""Levels of mappings and lists in a scenario (it needs 5); deeper documents make YAML, pydantic
and repr() recurse past Python's stack."""
MAX_VALUES = 100_000
"""Values in a scenario once YAML aliases are expanded (an alias bomb is exponential)."""


class _ScenarioLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader that refuses, as a YAMLError with the line and column, documents
    nested deeper than MAX_NESTING (its composer recurses once per level) and integers too long
    for Python's 4,300-digit string conversion limit (a ValueError otherwise)."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self._depth >= MAX_NESTING:
            raise yaml.composer.ComposerError(
                None,
                None,
                f"nested more than {MAX_NESTING} levels deep; a scenario needs 5",
                self.peek_event().start_mark,
            )
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        try:
            return super().construct_yaml_int(node)
        except ValueError:
            raise yaml.constructor.ConstructorError(
                None, None, f"an integer of {len(node.value):,} characters is too long", node.start_mark
            ) from None


_ScenarioLoader.add_constructor("tag:yaml.org,2002:int", _ScenarioLoader.construct_yaml_int)


def read_document(path: Path) -> Any:
    """The parsed YAML/JSON document of a scenario file; ConfigError names the file and the
    cause (unreadable, too large, not UTF-8, not YAML)."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_SCENARIO_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"cannot read scenario file {str(path)!r}: {e.strerror}") from None
    if len(raw) > MAX_SCENARIO_BYTES:
        raise ConfigError(
            f'{path}: larger than {MAX_SCENARIO_BYTES >> 20} MiB; a scenario is a few KB (README "Limits")'
        )
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        utf16 = " (it looks like UTF-16)" if raw[:2] in (b"\xff\xfe", b"\xfe\xff") else ""
        raise ConfigError(
            f"{path}: not UTF-8 text{utf16}: byte 0x{raw[e.start]:02x} at position "
            f"{e.start}; save the scenario as UTF-8"
        ) from None
    try:
        return yaml.load(text, Loader=_ScenarioLoader)  # a SafeLoader: never executes anything
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        at = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = "; ".join(x for x in (e.context, e.problem) if x)
        raise ConfigError(f"{path}{at}: not valid YAML/JSON: {what}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML/JSON: {e}") from None
    except ValueError as e:  # a value YAML recognises but cannot build, e.g. date 2024-13-01
        raise ConfigError(f"{path}: not valid YAML/JSON: {e}") from None


def check_shape(data: Any, where: str) -> None:
    """Refuse documents nested deeper than MAX_NESTING (or referring to themselves through a
    YAML alias) or holding more than MAX_VALUES values once aliases are expanded: pydantic and
    repr() recurse over them and walk every alias copy. Iterative; each distinct container is
    measured once, so an alias bomb costs no more than its text."""
    measured: dict[int, tuple[int, int]] = {}  # id -> (values, height) of a measured container
    stack: list[tuple[Any, int, bool]] = [(data, 1, False)]  # (container, depth, children done)
    while stack:
        node, depth, done = stack.pop()
        if len(node) > MAX_VALUES:
            raise ConfigError(
                f"{where}: a list or mapping of {len(node):,} entries; a scenario needs a few hundred values"
            )
        children = [c for c in _entries(node) if isinstance(c, _CONTAINERS)]
        if done:
            sub = [measured[id(c)] for c in children]
            values = 1 + len(node) + sum(v for v, _ in sub)
            if values > MAX_VALUES:
                raise ConfigError(
                    f"{where}: holds more than {MAX_VALUES:,} values (YAML aliases "
                    "expanded); a scenario needs a few hundred"
                )
            measured[id(node)] = (values, 1 + max((h for _, h in sub), default=0))
        elif depth + measured.get(id(node), (0, 1))[1] - 1 > MAX_NESTING:
            raise ConfigError(
                f"{where}: nested more than {MAX_NESTING} levels deep (or a YAML "
                "alias refers to itself); a scenario needs 5"
            )
        elif id(node) not in measured:
            stack.append((node, depth, True))
            stack.extend((c, depth + 1, False) for c in children)


_CONTAINERS = (dict, list, tuple, set, frozenset)


def _entries(node: Any) -> list[Any]:
    """The keys and values of a mapping, the items of any other container."""
    return [x for kv in node.items() for x in kv] if isinstance(node, dict) else list(node)
