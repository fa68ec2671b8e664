"""Reading a scenario file safely: the YAML/JSON document of a file a user (or anyone) wrote,
refused with a ConfigError naming the file and the cause when it is unreadable, too large, not
UTF-8, not YAML, nested too deep or too many values once aliases are expanded. paraplan/scenario/schema.py
validates what it reads."""

from __future__ import annotations

from os import PathLike
from pathlib import Path
from typing import Any

import yaml

from paraplan.errors import ConfigError

__all__ = [
    "MAX_SCENARIO_BYTES",
    "MAX_NESTING",
    "MAX_VALUES",
    "RESULT_KEYS",
    "read_document",
    "check_shape",
    "model_layers",
    "read_scenario",
]

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


RESULT_KEYS = frozenset({"plan", "predicted", "scenario", "version"})
"""Keys that mark a result document (``paraplan plan --json``) rather than a scenario."""


def _scenario_of_result(data: dict[str, Any]) -> dict[str, Any]:
    """A result document read as a scenario: its scenario with its plan fixed as returned (so
    ``paraplan evaluate RESULT.json`` re-scores the plan); any other mapping unchanged."""
    if not RESULT_KEYS <= data.keys() or not isinstance(data["scenario"], dict):
        return data
    return {**data["scenario"], "plan": data["plan"]}


def _model_objects(data: dict[str, Any]) -> dict[str, Any]:
    """``model:`` given as a built ``LayerGraph`` or ``ModelSpec`` (the API): its fields, the
    same explicit-model keys a file would write (graph.to_fields). A LayerGraph must be the
    graph of its spec (paraplan.graph.build_graph): the spec is what the scenario carries."""
    from paraplan.graph import LayerGraph, ModelSpec, build_graph, to_fields

    model = data.get("model")
    if isinstance(model, LayerGraph):
        if build_graph(model.spec).layers() != model.layers():
            raise ConfigError(
                "model: a LayerGraph given to the API must be build_graph(spec) of its spec "
                "(change the ModelSpec, e.g. layer_pattern or moe_pattern, to change the layers)"
            )
        return {**data, "model": to_fields(model.spec)}
    if isinstance(model, ModelSpec):
        return {**data, "model": to_fields(model)}
    return data


def model_layers(data: dict[str, Any]) -> dict[str, Any]:
    """``model.layers`` given as a pattern (``{pattern: "M*M-", legend: ...}``) or a list of
    layer entries: the scenario with the explicit keys it stands for (``layers`` the count,
    ``layer_pattern`` or ``moe_pattern`` / ``first_dense_layers`` / ``moe_layer_freq``, the
    attention and ``mtp_layers`` keys; graph.scenario_layers), so the rest of paraplan,
    and a result's recorded scenario, see plain fields. ConfigError names the path
    (``model.layers[3].mlp``) and the rule."""
    from paraplan.graph.scenario_layers import scenario_layers

    model = data.get("model")
    if not isinstance(model, dict) or not isinstance(model.get("layers"), dict | list):
        return data
    try:
        return {**data, "model": {**model, **scenario_layers(model)}}
    except ValueError as e:
        raise ConfigError(f"invalid scenario: {e}") from None


def read_scenario(source: str | PathLike[str] | dict[str, Any]) -> tuple[dict[str, Any], Path]:
    """The mapping of a scenario file or dict (a result document read as its scenario with its
    plan fixed, ``model.layers`` expanded) and the folder its relative paths start from;
    ConfigError names the file and the cause when it is no scenario document. Training and
    serving scenarios (paraplan/serving/schema.py) share it."""
    if isinstance(source, dict):
        data, base, where = _model_objects(source), Path.cwd(), "scenario"  # relative paths: from here
    elif isinstance(source, (str, PathLike)):
        path = Path(source)
        if "\0" in str(path):
            raise ConfigError(f"cannot read scenario file {str(path)!r}: the path has a NUL byte")
        data, base, where = read_document(path), path.parent, str(path)
    else:
        raise ConfigError(f"a scenario is a file path, a dict or a Scenario, not a {type(source).__name__}")
    if not isinstance(data, dict):
        raise ConfigError(
            f"{where}: a scenario must be a mapping with model, cluster and job "
            f"(or workload) sections, not a {type(data).__name__}"
        )
    check_shape(data, where)
    return model_layers(_scenario_of_result(data)), base
