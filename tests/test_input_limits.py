"""Malformed and extreme input (issue 16): every document and every absurd size is a ConfigError
naming the file or the field, the value and the rule (README "Limits"), refused fast, and the
CLI prints it as one line with exit code 1, never a traceback."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from paraplan.errors import ConfigError
from paraplan.instance import build_instance
from paraplan.scenario.schema import MAX_NESTING, MAX_VALUES, load_scenario

ROOT = Path(__file__).resolve().parents[1]
FUZZ = ROOT / "tests" / "data" / "fuzz"  # fuzzer reproducers (README there says where from)
BASE = {
    "model": {"preset": "llama3-8b"},
    "cluster": {"preset": "dgx-h100", "nodes": 1},
    "job": {"seq_len": 4096, "global_batch": 64},
}
NESTED = rf"nested more than {MAX_NESTING} levels deep"


def _with(section: str, **kw: object) -> dict:
    out = {k: dict(v) for k, v in BASE.items()}
    out[section] = {**out.get(section, {}), **kw}
    return out


def _file(tmp_path: Path, content: bytes | str) -> Path:
    f = tmp_path / "scenario.yaml"
    f.write_bytes(content.encode() if isinstance(content, str) else content)
    return f


# --- documents that are no scenario ---------------------------------------------------------


def test_issue16_non_utf8_bytes_name_the_file_and_the_byte() -> None:
    f = FUZZ / "UnicodeDecodeError_paraplan_schema.py_221.yaml"
    with pytest.raises(
        ConfigError,
        match=r"UnicodeDecodeError_paraplan_schema\.py_221\.yaml: not "
        r"UTF-8 text: byte 0xff at position 105",
    ):
        load_scenario(f)


def test_issue16_utf16_is_named_as_such(tmp_path: Path) -> None:
    f = _file(tmp_path, yaml.safe_dump(BASE).encode("utf-16"))
    with pytest.raises(
        ConfigError,
        match=r"not UTF-8 text \(it looks like UTF-16\).*save the "
        r"scenario as UTF-8",
    ):
        load_scenario(f)


def test_issue16_a_binary_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"scenario\.yaml: not UTF-8 text"):
        load_scenario(_file(tmp_path, bytes(range(256)) * 4))


def test_a_utf8_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    f = _file(tmp_path, b"\xef\xbb\xbf" + yaml.safe_dump(BASE).encode())
    assert load_scenario(f).job.global_batch == 64


@pytest.mark.parametrize(
    "text",
    [
        "{a: " * 20_000 + "1" + "}" * 20_000,
        "[" * 5_000 + "]" * 5_000,
        "a:\n" + "".join(" " * i + "-\n" for i in range(1, 200)),
    ],
    ids=["flow-map", "flow-list", "block"],
)
def test_issue16_deep_yaml_names_the_file_line_and_the_limit(tmp_path: Path, text: str) -> None:
    with pytest.raises(
        ConfigError,
        match=rf"scenario\.yaml, line \d+, column \d+: not valid "
        rf"YAML/JSON: {NESTED}",
    ):
        load_scenario(_file(tmp_path, text))


def test_issue16_deep_value_is_refused_before_pydantic_reprs_it() -> None:
    f = FUZZ / "RecursionError_paraplan_schema.py_232.yaml"  # 1,000 levels under job.precision
    with pytest.raises(ConfigError, match=NESTED):
        load_scenario(f)


@pytest.mark.parametrize("kind", [dict, list])
def test_issue16_deeply_nested_dict_from_the_api(kind: type) -> None:
    value: object = 1
    for _ in range(10_000):
        value = {"a": value} if kind is dict else [value]
    with pytest.raises(ConfigError, match=rf"scenario: {NESTED}"):
        load_scenario(_with("job", precision=value))


def test_a_self_referring_yaml_alias_is_refused(tmp_path: Path) -> None:
    f = _file(tmp_path, yaml.safe_dump(BASE) + "plan: {recompute: &a [*a]}\n")
    with pytest.raises(ConfigError, match=rf"{NESTED} \(or a YAML alias refers to itself\)"):
        load_scenario(f)


def test_an_alias_bomb_is_refused_without_expanding_it(tmp_path: Path) -> None:
    lines = ["x0: &x0 [none, none, none, none, none, none, none, none, none, none]"]
    lines += [f"x{i}: &x{i} [{', '.join([f'*x{i - 1}'] * 10)}]" for i in range(1, 9)]
    text = "bomb:\n" + "\n".join("  " + line for line in lines) + "\n" + yaml.safe_dump(BASE)
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=rf"holds more than {MAX_VALUES:,} values"):
        load_scenario(_file(tmp_path, text))  # 10^9 values once expanded
    assert time.perf_counter() - start < 1


def test_issue16_an_integer_over_4300_digits_names_line_and_length(tmp_path: Path) -> None:
    text = yaml.safe_dump(BASE).replace("global_batch: 64", "global_batch: " + "9" * 5_000)
    with pytest.raises(
        ConfigError,
        match=r"line \d+, column \d+: not valid YAML/JSON: an integer "
        r"of 5,000 characters is too long",
    ):
        load_scenario(_file(tmp_path, text))


def test_a_huge_hex_integer_is_shown_by_its_magnitude(tmp_path: Path) -> None:
    text = yaml.safe_dump(BASE).replace("global_batch: 64", "global_batch: 0x" + "f" * 5_000)
    with pytest.raises(ConfigError, match=r"job\.global_batch: ~10\^6020 must be at most"):
        load_scenario(_file(tmp_path, text))


@pytest.mark.parametrize(
    ("content", "pattern"),
    [
        ("- a\n- b\n", r"a scenario must be a mapping .*, not a list"),
        ("", r"a scenario must be a mapping .*, not a NoneType"),
        ("job: {seq_len: 2024-13-45}\n", r"not valid YAML/JSON: month must be in 1\.\.12"),
        ("a: 1\n---\nb: 2\n", r"not valid YAML/JSON: expected a single document"),
        ("? [a, b]\n: 1\n", r"not valid YAML/JSON: .*unhashable"),
        ("x" * (1 << 20) + "\n", r"larger than 1 MiB"),
    ],
    ids=["list", "empty", "bad-date", "two-documents", "list-key", "huge"],
)
def test_a_file_that_is_no_scenario_names_the_file(tmp_path: Path, content: str, pattern: str) -> None:
    with pytest.raises(ConfigError, match=rf"scenario\.yaml.*{pattern}"):
        load_scenario(_file(tmp_path, content))


def test_a_directory_is_no_scenario(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read scenario file .*: Is a directory"):
        load_scenario(tmp_path)


@pytest.mark.parametrize("source", [42, None, b"scenario.yaml", ["model"]])
def test_a_source_of_the_wrong_type_is_a_config_error(source: object) -> None:
    with pytest.raises(ConfigError, match=r"a scenario is a file path, a dict or a Scenario"):
        load_scenario(source)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "value",
    [{1, 2}, b"\xff", object(), 1j, float("nan"), (1, 2), [4096], {"a": 1}, "4096 tokens"],
    ids=lambda v: "object()" if type(v) is object else repr(v),  # stable across processes (xdist)
)
def test_an_odd_value_from_the_api_names_the_field(value: object) -> None:
    with pytest.raises(ConfigError, match=r"job\.seq_len: "):
        load_scenario(_with("job", seq_len=value))


# --- documented limits (README "Limits") ----------------------------------------------------

BIG_POOL = {"preset": "dgx-h100", "gpus": 600_000}


@pytest.mark.parametrize(
    ("scenario", "pattern"),
    [
        (
            _with("job", seq_len=16_777_217),
            r"job\.seq_len: 16,777,217 must be at most "
            r"16,777,216",
        ),
        (_with("job", global_batch=10**30), r"job\.global_batch: ~10\^30 must be at most 16,777,216"),
        (
            _with("job", seq_len=1 << 20, global_batch=8192),
            r"job\.seq_len x job\.global_batch = 1,048,576 x 8,192 = 8,589,934,592 tokens per step "
            r"exceeds paraplan's limit of 4,294,967,296",
        ),
        (_with("cluster", nodes=10**15), r"cluster\.nodes: 1,000,000,000,000,000 must be at most 1,000,000"),
        (
            {**BASE, "cluster": {"preset": "dgx-h100", "gpus": 10**15}},
            r"cluster\.gpus: 1,000,000,000,000,000 must be at most",
        ),
        (
            _with("cluster", nodes=200_000),
            r"cluster\.nodes=200,000 x 8 GPUs per dgx-h100 node = "
            r"1,600,000 devices exceeds paraplan's limit of 1,000,000",
        ),
        (
            {**BASE, "cluster": {"pools": [{"preset": "dgx-h100", "nodes": 1}] * 9}},
            r"cluster\.pools: lists 9 items; at most 8 are allowed",
        ),
        (
            {**BASE, "cluster": {"pools": [BIG_POOL, BIG_POOL]}},
            r"cluster\.pools hold 1,200,000 devices in all, over paraplan's limit of 1,000,000",
        ),
        (
            {**BASE, "cluster": {"pools": [{"preset": "gb200-nvl72", "nodes": 20_000}]}},
            r"cluster\.pools\[0\]\.nodes=20,000 x 72 GPUs .* = 1,440,000 devices exceeds",
        ),
        (_with("solver", max_vp=65), r"solver\.max_vp: 65 must be at most 64"),
        (_with("solver", max_micro_batch=1_025), r"solver\.max_micro_batch: 1,025 must be at most 1,024"),
        (_with("plan", dp=10**7), r"plan\.dp: 10,000,000 must be at most 1,000,000"),
        (_with("plan", pp=1_025), r"plan\.pp: 1,025 must be at most 1,024"),
        (_with("plan", vp=10**15), r"plan\.vp: 1,000,000,000,000,000 must be at most 1,024"),
        (_with("plan", micro_batch=10**9), r"plan\.micro_batch: 1,000,000,000 must be at most 16,777,216"),
        (
            _with("plan", layers_per_stage=[1] * 1_025),
            r"plan\.layers_per_stage: lists 1,025 items; "
            r"at most 1,024 are allowed",
        ),
        (
            _with("plan", layers_per_stage=[10**12]),
            r"plan\.layers_per_stage: a stage of "
            r"1,000,000,000,000 layers exceeds .* 1,024",
        ),
        (
            _with("plan", recompute=["none"] * 1_025),
            r"plan\.recompute: lists 1,025 stages; at most "
            r"1,024",
        ),
        (_with("plan", stage_pools=[0, 9]), r"plan\.stage_pools: pool indices run from 0 to 7"),
        (_with("plan", layers_per_chunk=[[1]] * 1_025), r"plan\.layers_per_chunk: lists 1,025 items"),
        (
            _with("plan", layers_per_chunk=[[10**12]]),
            r"plan\.layers_per_chunk: row 0 = "
            r"\[1000000000000\]: .* from 1 to 1,024",
        ),
        (
            _with("model", preset=None, layers=10**12, hidden=4096, heads=32, vocab=32000, ffn_hidden=14336),
            r"model\.layers=1,000,000,000,000 exceeds paraplan's limit of "
            r"1,024",
        ),
    ],
    ids=lambda v: "" if isinstance(v, str) else None,
)
def test_a_size_over_its_limit_names_the_field_the_value_and_the_limit(scenario: dict, pattern: str) -> None:
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=pattern):
        build_instance(load_scenario(scenario))
    assert time.perf_counter() - start < 1


@pytest.mark.parametrize(
    ("name", "pattern"),
    [
        ("Hang_graph_layers.py__mlp", r"model\.layers=1,000,000,000 exceeds"),
        ("Hang_cost_stage.py__moe_comm_floor_s", r"model\.experts=1,000,000,000 exceeds"),
        ("Hang_solver_space.py__families_of", r"solver\.max_vp: 1,000,000,000,000,000 must be at most"),
        ("Hang_solver_space.py_divisors", r"job\.global_batch: ~10\^30 must be at most"),
        ("Hang_cost_pools.py_stage_pools_of", r"cluster\.pools\.0\.nodes: 10,000,000 must be at most"),
        ("MemoryError_solver_space.py_392", r"cluster\.pools: lists 298 items; at most 8 are allowed"),
    ],
)
def test_issue16_fuzzed_hangs_are_refused_in_well_under_a_second(name: str, pattern: str) -> None:
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=pattern):
        build_instance(load_scenario(FUZZ / f"{name}.yaml"))
    assert time.perf_counter() - start < 1


# --- the command line ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["UnicodeDecodeError_paraplan_schema.py_221", "Hang_cost_stage.py__moe_comm_floor_s"]
)
def test_issue16_cli_prints_one_line_and_exits_1(name: str) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "paraplan.cli", "plan", str(FUZZ / f"{name}.yaml"), "--time-limit", "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1
    assert r.stdout == ""
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert r.stderr.startswith("paraplan plan: ")


def test_an_endless_iterator_from_the_api_stops_at_the_limit() -> None:
    with pytest.raises(ConfigError, match=r"plan\.layers_per_stage: lists more than 1,024 items"):
        load_scenario(_with("plan", layers_per_stage=itertools.count(1)))


def test_a_non_finite_expert_imbalance_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"job\.expert_imbalance: Input should be a finite number"):
        load_scenario(_with("job", expert_imbalance=float("nan")))


@pytest.mark.parametrize(
    "section, value",
    [
        ({"plan": {"tp": True}}, "plan.tp"),
        ({"job": {"seq_len": True, "global_batch": 8}}, "job.seq_len"),
        ({"plan": {"layers_per_stage": [True, 31]}}, "plan.layers_per_stage"),
    ],
)
def test_true_or_false_is_not_a_whole_number(section: dict, value: str) -> None:
    # pydantic reads true as 1: `layers: true` was a one-layer model (fuzz finding F8)
    scenario = {
        "model": {"preset": "llama3-8b"},
        "cluster": {"preset": "dgx-h100", "nodes": 1},
        "job": {"seq_len": 4096, "global_batch": 8},
        **section,
    }
    with pytest.raises(ConfigError, match=value.replace(".", r"\.")):
        load_scenario(scenario)
