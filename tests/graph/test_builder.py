"""A model written as its list of layers (``LayerGraph.from_layers``, ``repeat``) builds exactly
the layers of the same model given by fields, and what one ModelSpec cannot hold is refused by
layer and rule (graph/builder.py)."""

from __future__ import annotations

from dataclasses import fields

import pytest
from paraplan.graph import (
    Attention,
    Block,
    LayerGraph,
    Mamba,
    Mlp,
    ModelSpec,
    Moe,
    Mtp,
    build_graph,
    preset,
    repeat,
)
from paraplan.graph.builder import DERIVED_FIELDS

import paraplan

LOCAL_SIZES = ("sliding_window", "attention_chunk")


def sizes(name: str) -> dict:
    """The preset's fields but those its layer list states (the list under test gives them)."""
    spec = preset(name)
    skip = {*DERIVED_FIELDS, *LOCAL_SIZES, "name"}
    return {f.name: getattr(spec, f.name) for f in fields(ModelSpec) if f.name not in skip}


LISTS = {
    # 48 MoE blocks; chunked attention (8,192 tokens) on 3 of 4, every 4th global and NoPE
    "llama4-scout": [
        repeat(12, repeat(3, Block(Attention(chunk=8192), "moe")), Block(Attention(nope=True), "moe"))
    ],
    # gpt-oss: 36 MoE blocks, a 128-token window on every other
    "gpt-oss-120b": [repeat(18, Block(Attention(window=128), "moe"), Block(Attention(), "moe"))],
    # Gemma 3: 5 local (1,024-token window) : 1 global, 62 blocks
    "gemma3-27b": [
        repeat(10, repeat(5, Block(Attention(window=1024))), Block()),
        repeat(2, Block(Attention(window=1024))),
    ],
    # DeepSeek-V3: 3 dense, 58 MoE, one multi-token-prediction module
    "deepseek-v3": [repeat(3, Block()), repeat(58, Block(mlp="moe")), Mtp()],
    # Nemotron-H 56B (Megatron's hybrid pattern): Mamba-2 and MLP layers, 10 attention layers
    "nemotron-h-56b": [
        repeat(3, Mamba(), Mlp()),
        Mamba(),
        Attention(),
        repeat(9, repeat(5, Mlp(), Mamba()), Attention()),
        repeat(5, Mlp(), Mamba()),
        Mlp(),
    ],
    # Qwen2.5-VL: 80 dense blocks behind its ViT encoder (the vision= field)
    "qwen2.5-vl-72b": [repeat(80, Block())],
    # Jamba: Mamba-1 mixers, attention on every 8th layer, MoE on every other MLP
    "jamba-1.5-mini": [
        repeat(
            4,
            repeat(2, Mamba(), Mlp(), Mamba(), Moe()),
            Attention(),
            Mlp(),
            Mamba(),
            Moe(),
            Mamba(),
            Mlp(),
            Mamba(),
            Moe(),
        )
    ],
}


@pytest.mark.parametrize("name", sorted(LISTS))
def test_a_layer_list_builds_the_layers_of_the_preset(name: str) -> None:
    graph = LayerGraph.from_layers(LISTS[name], name=name, **sizes(name))
    expected = build_graph(preset(name))
    assert graph.layers() == expected.layers()
    assert graph.block_kinds == expected.block_kinds
    assert graph.graph.edges == expected.graph.edges


def test_maverick_alternation_compiles_to_first_dense_layers_and_frequency() -> None:
    chunked = Attention(chunk=8192)
    layers = repeat(
        12, Block(chunked), Block(chunked, "moe"), Block(chunked), Block(Attention(nope=True), "moe")
    )
    graph = LayerGraph.from_layers(layers, name="llama4-maverick", **sizes("llama4-maverick"))
    assert (graph.spec.first_dense_layers, graph.spec.moe_layer_freq, graph.spec.moe_pattern) == (1, 2, "")
    assert (graph.spec.full_attention_every, graph.spec.nope_full_attention) == (4, True)
    assert graph.layers() == build_graph(preset("llama4-maverick")).layers()


def test_moe_off_the_dense_prefix_shape_compiles_to_a_moe_pattern() -> None:
    graph = LayerGraph.from_layers(
        [Block(mlp="moe"), Block(), Block(), Block(mlp="moe"), Block(mlp="moe")],
        hidden=1024, num_heads=8, vocab=1000, ffn_hidden=4096,
        num_experts=8, top_k=2, moe_ffn_hidden=512,
    )  # fmt: skip
    assert graph.spec.moe_pattern == "E--EE"
    assert [ly.kind.value for ly in graph.layers() if ly.name.startswith("mlp")] == [
        "moe", "mlp", "mlp", "moe", "moe",
    ]  # fmt: skip


def test_descriptor_sizes_set_the_model_fields() -> None:
    moe = Moe(num_experts=16, top_k=2, moe_ffn_hidden=1024)
    graph = LayerGraph.from_layers(
        [repeat(2, Mamba(version=2, num_heads=32, head_dim=64), Mlp(ffn_hidden=4096), Attention(), moe)],
        hidden=2048, num_heads=16, vocab=32000, position_embedding="none",
    )  # fmt: skip
    spec = graph.spec
    assert spec.layer_pattern == "M-*EM-*E"
    assert (spec.ffn_hidden, spec.num_experts, spec.top_k, spec.moe_ffn_hidden) == (4096, 16, 2, 1024)
    assert spec.mamba.num_heads == 32


def test_windows_in_a_hybrid_list_fall_on_its_attention_positions() -> None:
    graph = LayerGraph.from_layers(
        [repeat(2, Mamba(), Attention(window=64), Mlp(), Attention())],
        hidden=1024, num_heads=8, vocab=1000, ffn_hidden=4096, position_embedding="none",
        mamba=Mamba(version=2, num_heads=32, head_dim=64),
    )  # fmt: skip
    windows = {ly.name: ly.window for ly in graph.layers() if ly.kind.value == "attention"}
    assert windows == {"attn_1": 64, "attn_3": 0, "attn_5": 64, "attn_7": 0}
    assert (graph.spec.layer_pattern, graph.spec.full_attention_every) == ("M*-*" * 2, 4)
    # full attention at positions 4 and 10 (4 + 1 and 10 + 1 share no n): refused
    with pytest.raises(ValueError, match=r"layers\[10\]: full attention at layer 10 fits no n"):
        LayerGraph.from_layers(
            [repeat(2, Mamba(), Attention(window=64), Mlp(), Mamba(), Attention(), Mlp())],
            hidden=1024, num_heads=8, vocab=1000, ffn_hidden=4096, position_embedding="none",
            mamba=Mamba(version=2, num_heads=32, head_dim=64),
        )  # fmt: skip


SMALL = {"hidden": 1024, "num_heads": 8, "vocab": 1000, "ffn_hidden": 4096}


@pytest.mark.parametrize(
    ("layers", "extra", "match"),
    [
        (
            [Block(Attention(window=128)), Block(Attention(window=256))],
            {},
            r"layers\[1\]\.attention: Attention\.window=256 differs from 128 of layers\[0\]\.attention; "
            "one model has one sliding_window",
        ),
        (
            [Block(Attention(window=128)), Block(Attention(chunk=256))],
            {},
            r"layers\[1\]\.attention: chunk attention in a model that also has window attention",
        ),
        (  # full on layers 2 and 4: no n with (i + 1) % n == 0 exactly there
            [repeat(2, Block(Attention(window=64))), Block(), Block(Attention(window=64)), Block()],
            {},
            r"layers\[4\]\.attention: full attention at layer 4 fits no n .*asks for n = 3.*every n-th layer",
        ),
        (
            [Block(Attention(window=64)), Block(Attention(nope=True)), Block(Attention(window=64)), Block()],
            {},
            r"layers\[3\]\.attention: Attention\.nope=False differs from True .*nope_full_attention",
        ),
        (
            [Block(mlp=Mlp(4096)), Block(mlp=Mlp(8192))],
            {},
            r"layers\[1\]\.mlp: Mlp\.ffn_hidden=8,192 differs",
        ),
        ([Block(mlp=Mlp(8192))], {}, r"differs from the model's ffn_hidden=4,096"),
        (
            [Block(), Block(Attention(window=64))],
            {},
            r"layers\[0\]\.attention: full attention at layer 0 makes every layer full",
        ),
        ([Block(), Mtp(), Block()], {}, r"layers\[1\]: an MTP module .* must come after the last block"),
        ([Block(mlp="moe")], {}, r"layers\[0\]\.mlp: a MoE layer needs its experts"),
        (
            [Block()],
            {"num_experts": 8, "top_k": 2, "moe_ffn_hidden": 64},
            "no layer of the list is a MoE layer",
        ),
        (
            [Block()],
            {"sliding_window": 512},
            "sliding_window=512 but no layer of the list has window attention",
        ),
        ([Block()], {"num_layers": 1}, "num_layers is set by the layers list"),
        ([Mamba(), Mlp()], {}, r"layers\[0\]: Mamba\(\) needs its sizes"),
        ([Block(), "attention"], {}, r"layers\[1\] is a str, not a layer"),
        ([Block()], {"windows": 3}, "windows is not a ModelSpec field"),
    ],
)
def test_what_one_spec_cannot_hold_is_refused_by_layer_and_rule(layers, extra, match) -> None:
    with pytest.raises(ValueError, match=match):
        LayerGraph.from_layers(layers, **{**SMALL, **extra})


def test_descriptors_check_their_own_fields() -> None:
    with pytest.raises(ValueError, match="window or chunk, not both"):
        Attention(window=4, chunk=8)
    with pytest.raises(ValueError, match="nope=True .* full attention only"):
        Attention(window=4, nope=True)
    with pytest.raises(ValueError, match="Block.mlp='sparse'"):
        Block(mlp="sparse")
    with pytest.raises(ValueError, match=r"repeat\(n\)=-1"):
        repeat(-1, Block())
    with pytest.raises(ValueError, match="at most 1,088"):
        repeat(10**9, Block())


def test_a_graph_from_layers_plans_to_proven_optimality() -> None:
    graph = LayerGraph.from_layers(
        [
            Block(Attention(window=512)),
            Block(),
            repeat(3, Block(Attention(window=512), "moe"), Block(mlp="moe")),
            Mtp(),
        ],
        hidden=2048, num_heads=16, num_kv_heads=4, vocab=32000, ffn_hidden=8192,
        num_experts=8, top_k=2, moe_ffn_hidden=1024,
    )  # fmt: skip
    assert len(graph.kind_blocks) == 4  # dense and MoE, each windowed and full
    assert (graph.spec.first_dense_layers, graph.spec.full_attention_every, graph.spec.mtp_layers) == (
        2,
        2,
        1,
    )
    result = paraplan.solve(
        {
            "model": graph,
            "cluster": {"preset": "dgx-h100", "gpus": 8},
            "job": {"seq_len": 4096, "global_batch": 32},
            "plan": {"pp": 2},
            "solver": {"max_micro_batch": 2, "max_vp": 1},
        },
        time_limit_s=30,
        workers=1,
    )
    assert result.solver.status == "OPTIMAL"
    assert sum(result.plan.layers_per_stage) == 8
    assert result.predicted.fits_memory
