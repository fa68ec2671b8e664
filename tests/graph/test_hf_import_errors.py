"""Hugging Face import of malformed configs (issue 16): every bad value is a ValueError naming
model.hf_config, the JSON key and the rule, never a TypeError/KeyError/AttributeError; the
scenario turns it into a ConfigError."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from paraplan.graph import from_hf_config
from paraplan.graph.spec import MODEL_LIMITS

from paraplan.errors import ConfigError
from paraplan.instance import build_instance
from paraplan.scenario.schema import load_scenario

ROOT = Path(__file__).resolve().parents[2]
FUZZ = ROOT / "tests" / "data" / "fuzz"  # fuzzer reproducers (README there says where from)
LLAMA = json.loads((ROOT / "graph" / "data" / "hf" / "llama3-8b.json").read_text())
MIXTRAL = json.loads((ROOT / "graph" / "data" / "hf" / "mixtral-8x7b.json").read_text())
DEEPSEEK = json.loads((ROOT / "graph" / "data" / "hf" / "deepseek-v3.json").read_text())


def _scenario(hf_config: Path | str) -> dict:
    return {
        "model": {"hf_config": str(hf_config)},
        "cluster": {"preset": "dgx-h100", "nodes": 1},
        "job": {"seq_len": 8, "global_batch": 8},
    }


@pytest.mark.parametrize(
    ("name", "pattern"),
    [
        (
            "AttributeError_graph_presets.py_133",
            r"model\.hf_config: the file holds a JSON str, not an "
            r"object",
        ),
        (
            "KeyError_graph_presets.py_114",
            r"model\.hf_config: needs qk_nope_head_dim for multi-head "
            r"latent attention \(kv_lora_rank=512\)",
        ),
        ("TypeError_graph_presets.py_102", r"model\.hf_config: mlp_only_layers=5 must be a list"),
        ("TypeError_graph_presets.py_145", r"model\.hf_config: hidden_act=\['silu'\] must be a string"),
        (
            "TypeError_graph_presets.py_148",
            r"model\.hf_config: hidden_size=\{'a': 1\} must be an "
            r"integer, not a dict",
        ),
        (
            "TypeError_graph_presets.py_157",
            r"model\.hf_config: intermediate_size=\{'a': 1\} must be an "
            r"integer",
        ),
        ("TypeError_graph_presets.py_158", r"model\.hf_config: n_head=\[1\] must be an integer"),
        (
            "TypeError_graph_presets.py_159",
            r"model\.hf_config: num_key_value_heads=\[1\] must be an "
            r"integer",
        ),
        ("TypeError_graph_presets.py_160", r"model\.hf_config: vocab_size=\[1\] must be an integer"),
        (
            "TypeError_graph_presets.py_88",
            r"model\.hf_config: needs num_experts_per_tok or "
            r"experts_per_token or moe_topk for a mixture-of-experts",
        ),
        (
            "TypeError_graph_presets.py_90",
            r"model\.hf_config: intermediate_size=\[1\] must be an "
            r"integer, not a list",
        ),
    ],
)
def test_issue16_fuzzed_hf_configs_are_config_errors(name: str, pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern):
        build_instance(load_scenario(_scenario(FUZZ / f"{name}.config.json")))


@pytest.mark.parametrize("value", [[4096], {"a": 1}, True, 4096.0, "4096", float("nan")])
def test_a_size_of_the_wrong_type_names_the_key(value: object) -> None:
    with pytest.raises(
        ValueError,
        match=r"model\.hf_config: hidden_size=.* must be an integer, "
        rf"not a {type(value).__name__}",
    ):
        from_hf_config({**LLAMA, "hidden_size": value})


@pytest.mark.parametrize("value", [0, -4096])
def test_a_size_below_one_names_the_key(value: int) -> None:
    with pytest.raises(
        ValueError,
        match=rf"model\.hf_config: num_hidden_layers={value:,} must be "
        r"at least 1",
    ):
        from_hf_config({**LLAMA, "num_hidden_layers": value})


@pytest.mark.parametrize(
    ("key", "field"),
    [
        ("num_hidden_layers", "layers"),
        ("hidden_size", "hidden"),
        ("num_attention_heads", "heads"),
        ("vocab_size", "vocab"),
        ("intermediate_size", "ffn_hidden"),
    ],
)
def test_a_huge_size_names_the_key_and_the_limit(key: str, field: str) -> None:
    with pytest.raises(
        ValueError,
        match=rf"model\.hf_config: {key}=.* exceeds paraplan's limit "
        rf"of [\d,]+ for model\.{field}",
    ):
        from_hf_config({**LLAMA, key: 10**30})


def test_a_missing_size_names_every_key_that_gives_it() -> None:
    cfg = {k: v for k, v in LLAMA.items() if k != "vocab_size"}
    with pytest.raises(ValueError, match=r"model\.hf_config: needs vocab_size"):
        from_hf_config(cfg)


def test_moe_expert_count_over_the_limit_is_refused() -> None:
    huge = MODEL_LIMITS["num_experts"] + 1
    with pytest.raises(ValueError, match=rf"num_local_experts={huge:,} exceeds .* model\.experts"):
        from_hf_config({**MIXTRAL, "num_local_experts": huge})


@pytest.mark.parametrize("key", ["qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"])
def test_mla_without_its_head_dims_names_the_missing_key(key: str) -> None:
    cfg = {k: v for k, v in DEEPSEEK.items() if k != key}
    with pytest.raises(ValueError, match=rf"needs {key} for multi-head latent attention"):
        from_hf_config(cfg)


def test_tie_word_embeddings_must_be_a_bool() -> None:
    with pytest.raises(ValueError, match=r"tie_word_embeddings='false' must be true or false"):
        from_hf_config({**LLAMA, "tie_word_embeddings": "false"})


@pytest.mark.parametrize(
    ("content", "pattern"),
    [
        (b"[1, 2]", r"holds a JSON list"),
        (b"\xff\xfe{\x00}\x00", r"is not UTF-8 text \(byte 0xff at position 0\)"),
        (b"[" * 100_000 + b"]" * 100_000, r"nested too deeply"),
        (b'{"hidden_size": ' + b"9" * 5000 + b"}", r"is not valid JSON: .*4300"),
        (b'{"hidden_size": 4096,', r"is not valid JSON"),
    ],
    ids=["list", "utf16", "deep", "5000-digit-int", "truncated"],
)
def test_a_file_that_is_no_config_json_names_the_file(tmp_path: Path, content: bytes, pattern: str) -> None:
    f = tmp_path / "config.json"
    f.write_bytes(content)
    with pytest.raises(ValueError, match=rf"model\.hf_config.*{pattern}"):
        from_hf_config(f)


def test_issue16_a_directory_is_named_as_such(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError,
        match=r"model\.hf_config=.* is a directory; give the path of "
        r"its config\.json",
    ):
        build_instance(load_scenario(_scenario(tmp_path)))
