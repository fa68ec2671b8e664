"""Your own model: ``from_module`` traces a torch.nn.Module on the meta device into the ModelSpec
of the same architecture, checked within 1% against build_graph; what the formulas do not model is
refused by name; Hugging Face configs (tests/data/hf_trace) trace through transformers and plan
to OPTIMAL. Nothing is downloaded."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import MISSING, fields, replace
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from paraplan.cost.compute import BACKWARD_GEMM_FACTOR  # noqa: E402
from paraplan.graph import (  # noqa: E402
    ModelSpec,
    build_graph,
    from_fields,
    from_hf_config,
    from_module,
    preset,
    to_fields,
    trace_module,
)
from paraplan.graph.presets import ARCHITECTURE_FIELDS  # noqa: E402
from paraplan.graph.trace import TOLERANCE  # noqa: E402
from paraplan.graph.trace_check import AUTOGRAD_BACKWARD_PER_FORWARD  # noqa: E402

import paraplan  # noqa: E402
from paraplan.errors import ConfigError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
HF = ROOT / "tests" / "data" / "hf_trace"
DIM, LAYERS, HEADS, KV_HEADS, FFN, VOCAB = 128, 3, 8, 2, 352, 512
TOKENS = torch.zeros(2, 32, dtype=torch.long)


# --- a small Llama written here: RMSNorm, GQA attention (SDPA), SwiGLU MLP ----------------------


class RMSNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, bias: bool = False) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.wq = nn.Linear(dim, heads * self.head_dim, bias=bias)
        self.wk = nn.Linear(dim, kv_heads * self.head_dim, bias=bias)
        self.wv = nn.Linear(dim, kv_heads * self.head_dim, bias=bias)
        self.wo = nn.Linear(heads * self.head_dim, dim, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class SwiGLU(nn.Module):
    def __init__(self, dim: int, ffn: int, bias: bool = False, act=F.silu) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, ffn, bias=bias)
        self.w3 = nn.Linear(dim, ffn, bias=False)
        self.w2 = nn.Linear(ffn, dim, bias=False)
        self.act = act

    def forward(self, x):
        return self.w2(self.act(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, mlp: nn.Module, attention: nn.Module | None = None, dim: int = DIM) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(dim)
        self.attention = attention or Attention(dim, HEADS, KV_HEADS)
        self.ffn_norm = RMSNorm(dim)
        self.feed_forward = mlp

    def forward(self, x):
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class TinyLlama(nn.Module):
    def __init__(
        self, tied: bool = False, make_block=None, vocab: int = VOCAB, dim: int = DIM, layers: int = LAYERS
    ) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        make_block = make_block or (lambda: Block(SwiGLU(DIM, FFN)))
        self.layers = nn.ModuleList(make_block() for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)
        if tied:
            self.output.weight = self.tok_embeddings.weight

    def forward(self, tokens):
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.output(self.norm(x))


def _meta(build):
    with torch.device("meta"):
        return build()


def _llama_spec(tied: bool) -> ModelSpec:
    """The preset-equivalent spec: the scenario's explicit fields of the same architecture."""
    return from_fields(
        "TinyLlama",
        {
            "layers": LAYERS,
            "hidden": DIM,
            "ffn_hidden": FFN,
            "heads": HEADS,
            "kv_heads": KV_HEADS,
            "vocab": VOCAB,
            "activation": "swiglu",
            "tied_embeddings": tied,
        },
    )


@pytest.mark.parametrize("tied", [False, True])
def test_a_llama_module_traces_to_the_spec_of_its_architecture(tied: bool) -> None:
    traced = trace_module(_meta(lambda: TinyLlama(tied)), TOKENS)
    assert traced.spec == _llama_spec(tied)
    # FLOPs of the batch and parameters per part within 1% of build_graph(spec)
    for part, flops in traced.formula_flops.items():
        assert traced.traced_flops[part] == pytest.approx(flops, rel=TOLERANCE, abs=1), part
    for part, params in traced.formula_params.items():
        assert traced.traced_params[part] == pytest.approx(params, rel=TOLERANCE, abs=1), part
    graph = build_graph(traced.spec)
    assert sum(traced.traced_params.values()) == graph.num_params
    # the formula by hand: per token 2 x (q + k + v + o + gate + up + down) per layer + head,
    # attention core 4 x heads x head_dim x seq_len (non-causal, as FlopCounterMode counts it)
    per_layer = 2 * (DIM * DIM + 2 * DIM * DIM // HEADS * KV_HEADS + DIM * DIM + 3 * DIM * FFN)
    per_token = LAYERS * (per_layer + 4 * DIM * 32) + 2 * DIM * VOCAB
    assert sum(traced.traced_flops.values()) == per_token * TOKENS.numel()


def test_a_head_registered_before_the_embedding_it_shares_is_read_as_tied() -> None:
    class HeadFirst(TinyLlama):
        def __init__(self) -> None:
            super().__init__()
            del self.tok_embeddings
            self.output.weight = self.output.weight  # registered first: the canonical name
            self.tok_embeddings = nn.Embedding(VOCAB, DIM)
            self.tok_embeddings.weight = self.output.weight

    model = _meta(HeadFirst)
    assert next(n for n, _ in model.named_parameters() if "output" in n or "tok" in n) == "output.weight"
    assert from_module(model, TOKENS, name="TinyLlama") == _llama_spec(tied=True)


def test_backward_is_traced_as_twice_the_forward_like_the_cost_model() -> None:
    traced = trace_module(_meta(TinyLlama), TOKENS)
    assert AUTOGRAD_BACKWARD_PER_FORWARD == BACKWARD_GEMM_FACTOR
    assert traced.backward_flops == AUTOGRAD_BACKWARD_PER_FORWARD * sum(traced.traced_flops.values())


def test_a_module_with_real_weights_is_traced_through_meta_copies_and_left_as_it_was() -> None:
    torch.manual_seed(0)
    model = TinyLlama(tied=True)
    before = model.output.weight.detach().clone()
    assert from_module(model, TOKENS, name="TinyLlama") == _llama_spec(tied=True)
    assert all(p.device.type == "cpu" and p.grad is None for p in model.parameters())
    assert torch.equal(model.output.weight, before)
    assert model.output.weight is model.tok_embeddings.weight


class CausalSelfAttention(nn.Module):
    """GPT-2 style: fused qkv, attention written out as q @ k^T, softmax, @ v."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = (
            t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in self.qkv(x).split(d, dim=-1)
        )
        scores = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5
        mask = torch.ones(s, s, dtype=torch.bool).tril()
        att = scores.masked_fill(~mask, float("-inf")).softmax(-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, s, d))


class GeluMLP(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, 4 * dim, bias=False)
        self.out = nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x):
        return self.out(F.gelu(self.fc(x)))


class GptBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(DIM), CausalSelfAttention(DIM, HEADS)
        self.ln_2, self.mlp = nn.LayerNorm(DIM), GeluMLP(DIM)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TinyGpt(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte = nn.Embedding(VOCAB, DIM)
        self.h = nn.Sequential(*(GptBlock() for _ in range(LAYERS)))
        self.ln_f = nn.LayerNorm(DIM)

    def forward(self, tokens):
        return F.linear(self.ln_f(self.h(self.wte(tokens))), self.wte.weight)  # tied, functional


def test_a_gpt_module_with_written_out_attention_traces_to_its_spec() -> None:
    spec = from_module(_meta(TinyGpt), TOKENS, name="gpt")
    assert spec == from_fields(
        "gpt",
        {
            "layers": LAYERS,
            "hidden": DIM,
            "ffn_hidden": 4 * DIM,
            "heads": HEADS,
            "vocab": VOCAB,
            "activation": "gelu",
            "norm": "layernorm",
            "tied_embeddings": True,
        },
    )


class BatchedMoE(nn.Module):
    """Experts as [experts, out, in] weights, each token's top-k gathered (meta-friendly)."""

    def __init__(self, dim: int, ffn: int, experts: int, top_k: int) -> None:
        super().__init__()
        self.top_k = top_k
        self.router = nn.Linear(dim, experts, bias=False)
        self.w1 = nn.Parameter(torch.empty(experts, ffn, dim))
        self.w3 = nn.Parameter(torch.empty(experts, ffn, dim))
        self.w2 = nn.Parameter(torch.empty(experts, dim, ffn))

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        weights, idx = torch.topk(self.router(x).softmax(-1), self.top_k, dim=-1)
        h = F.silu(torch.einsum("tkfd,td->tkf", self.w1[idx], x))
        h = h * torch.einsum("tkfd,td->tkf", self.w3[idx], x)
        y = torch.einsum("tkdf,tkf->tkd", self.w2[idx], h)
        return (y * weights.unsqueeze(-1)).sum(1).reshape(shape)


def test_a_mixture_of_experts_module_traces_to_its_experts_and_top_k() -> None:
    model = _meta(lambda: TinyLlama(make_block=lambda: Block(BatchedMoE(DIM, 64, 8, 2))))
    spec = from_module(model, TOKENS, name="moe")
    assert spec == from_fields(
        "moe",
        {
            "layers": LAYERS,
            "hidden": DIM,
            "heads": HEADS,
            "kv_heads": KV_HEADS,
            "vocab": VOCAB,
            "experts": 8,
            "top_k": 2,
            "moe_ffn_hidden": 64,
        },
    )


def _mixed(moe_blocks: set[int]):
    """Blocks of one class, MoE where listed, dense elsewhere."""
    count = iter(range(LAYERS))
    return lambda: Block(BatchedMoE(DIM, 64, 8, 2) if next(count) in moe_blocks else SwiGLU(DIM, FFN))


def test_dense_first_blocks_then_moe_trace_to_first_dense_layers() -> None:
    spec = from_module(_meta(lambda: TinyLlama(make_block=_mixed({1, 2}))), TOKENS, name="m")
    assert (spec.first_dense_layers, spec.moe_layer_freq, spec.ffn_hidden) == (1, 1, FFN)
    assert [spec.is_moe_layer(i) for i in range(LAYERS)] == [False, True, True]


def test_moe_blocks_off_paraplans_pattern_are_refused() -> None:
    with pytest.raises(ValueError, match=r"layers: MoE MLPs in blocks \[0, 1\] do not follow"):
        from_module(_meta(lambda: TinyLlama(make_block=_mixed({0, 1}))), TOKENS)


@pytest.mark.parametrize("name", ["llama3-8b", "mixtral-8x7b"])
def test_a_module_of_a_presets_shape_traces_to_that_preset(name: str) -> None:
    p = preset(name)

    def block() -> Block:
        mlp = (
            BatchedMoE(p.hidden, p.moe_ffn_hidden, p.num_experts, p.top_k)
            if p.is_moe
            else SwiGLU(p.hidden, p.ffn_hidden)
        )
        return Block(mlp, Attention(p.hidden, p.num_heads, p.num_kv_heads), dim=p.hidden)

    model = _meta(lambda: TinyLlama(make_block=block, vocab=p.vocab, dim=p.hidden, layers=p.num_layers))
    traced = from_module(model, torch.zeros(1, 16, dtype=torch.long), name=name)
    # a module's shapes do not show RoPE, router or norm settings: those stay at the defaults
    defaults = {
        f.name: f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
        for f in fields(ModelSpec)
        if f.name in (*ARCHITECTURE_FIELDS, "rope", "router")
    }
    assert traced == replace(p, **defaults)


# --- what the formulas do not model is refused, by name -----------------------------------------


def test_biases_in_the_mlp_are_refused_by_name_unless_allowed() -> None:
    model = _meta(lambda: TinyLlama(make_block=lambda: Block(SwiGLU(DIM, FFN, bias=True))))
    with pytest.raises(
        ValueError,
        match=r"3 bias parameters .*layers\.0\.feed_forward\.w1\.bias.*"
        r"allow_bias=True",
    ):
        from_module(model, TOKENS)
    with pytest.warns(UserWarning, match="bias parameters"):
        traced = trace_module(model, TOKENS, name="TinyLlama", allow_bias=True)
    assert traced.spec == _llama_spec(tied=False)
    assert traced.traced_params["mlp"] == traced.formula_params["mlp"] + LAYERS * FFN


def test_a_learned_position_embedding_is_refused_by_name() -> None:
    class WithPositions(TinyLlama):
        def __init__(self) -> None:
            super().__init__()
            self.pos = nn.Embedding(32, DIM)

        def forward(self, tokens):
            x = self.tok_embeddings(tokens) + self.pos(torch.arange(tokens.shape[1]))
            for layer in self.layers:
                x = layer(x)
            return self.output(self.norm(x))

    with pytest.raises(
        ValueError,
        match=r"parameters \(4,096 values\) are no part paraplan "
        r"models: pos\.weight \[32, 128\]",
    ):
        from_module(_meta(WithPositions), TOKENS)


def test_a_block_with_a_third_weighted_part_is_refused_as_unknown_structure() -> None:
    class ThreePart(Block):
        def __init__(self) -> None:
            super().__init__(SwiGLU(DIM, FFN))
            self.adapter = nn.Linear(DIM, DIM, bias=False)

        def forward(self, x):
            return self.adapter(super().forward(x))

    with pytest.raises(
        ValueError,
        match=r"layers\.0: a block whose weighted sub-modules are "
        r"attention, feed_forward, adapter.*unknown block",
    ):
        from_module(_meta(lambda: TinyLlama(make_block=ThreePart)), TOKENS)


def test_a_gated_gelu_mlp_is_refused() -> None:
    model = _meta(lambda: TinyLlama(make_block=lambda: Block(SwiGLU(DIM, FFN, act=F.gelu))))
    with pytest.raises(ValueError, match=r"feed_forward: a gated gelu MLP"):
        from_module(model, TOKENS)


def test_a_sliding_window_attention_is_refused() -> None:
    def block() -> Block:
        attention = Attention(DIM, HEADS, KV_HEADS)
        attention.sliding_window = 16
        return Block(SwiGLU(DIM, FFN), attention)

    with pytest.raises(ValueError, match=r"layers\.0\.attention\.sliding_window=16: a local"):
        from_module(_meta(lambda: TinyLlama(make_block=block)), TOKENS)


def test_a_forward_that_needs_values_is_refused_with_the_reason() -> None:
    class Looping(SwiGLU):
        def forward(self, x):
            if x.sum() > 0:  # data-dependent control flow: needs the values
                return super().forward(x)
            return x

    model = _meta(lambda: TinyLlama(make_block=lambda: Block(Looping(DIM, FFN))))
    with pytest.raises(ValueError, match="does not run on the meta device"):
        from_module(model, TOKENS)


def test_example_batch_without_token_ids_is_refused() -> None:
    with pytest.raises(ValueError, match="example_batch holds no token ids"):
        from_module(_meta(TinyLlama), torch.zeros(2, 32, DIM))


def test_to_fields_reads_back_into_the_same_spec() -> None:
    for spec in (_llama_spec(True), from_hf_config(HF / "mixtral.json")):
        assert from_fields(spec.name, to_fields(spec)) == spec


# --- Hugging Face configs through transformers on the meta device -------------------------------

SMALL_JOB = {
    "cluster": {"preset": "dgx-h100", "gpus": 8},
    "job": {"seq_len": 2048, "global_batch": 32, "precision": "bf16"},
    "solver": {"max_micro_batch": 2, "max_vp": 1},
}


@pytest.mark.parametrize("name", ["llama", "qwen2", "mixtral", "mistral"])
def test_a_hugging_face_config_traces_to_its_formula_spec_and_plans_to_optimal(name: str) -> None:
    pytest.importorskip("transformers")
    from paraplan.graph import trace_hf_config

    path = HF / f"{name}.json"
    allow = name == "qwen2"  # Qwen2's q/k/v biases are not in the formulas
    with pytest.warns(UserWarning, match="bias") if allow else _nothing():
        traced = trace_hf_config(path, allow_bias=allow)
    assert traced.spec == from_hf_config(path)
    assert traced.spec.tied_embeddings == (name == "qwen2")
    assert traced.spec.num_experts == (4 if name == "mixtral" else 0)
    # Mistral: a 32-token sliding window on every layer, the layout read from the config (the
    # flop counter and the check count the masked attention whole)
    assert traced.spec.sliding_window == (32 if name == "mistral" else 0)
    for part, flops in traced.formula_flops.items():
        assert traced.traced_flops[part] == pytest.approx(flops, rel=TOLERANCE, abs=1), part
    for part, params in traced.formula_params.items():
        assert traced.traced_params[part] == pytest.approx(params, rel=TOLERANCE, abs=1), part
    model = {"hf_config": str(path), "trace": True, **({"allow_bias": True} if allow else {})}
    with pytest.warns(UserWarning, match="bias") if allow else _nothing():
        result = paraplan.solve({"model": model, **SMALL_JOB}, time_limit_s=30, workers=1)
    assert result.solver is not None and result.solver.status == "OPTIMAL"
    assert result.predicted.fits_memory


def test_qwen2_biases_are_refused_without_allow_bias() -> None:
    pytest.importorskip("transformers")
    model = {"hf_config": str(HF / "qwen2.json"), "trace": True}
    with pytest.raises(
        ConfigError,
        match=r"bias parameters .*self_attn\.q_proj\.bias.*"
        r"model\.allow_bias: true",
    ):
        paraplan.solve({"model": model, **SMALL_JOB}, time_limit_s=10, workers=1)


def test_a_sliding_window_config_is_refused() -> None:
    pytest.importorskip("transformers")
    from paraplan.graph import trace_hf_config

    cfg = json.loads((HF / "qwen2.json").read_text())
    cfg.update(use_sliding_window=True, sliding_window=32, max_window_layers=0)
    with pytest.raises(ValueError, match=r"sliding_window=32"):  # the config reading refuses it
        trace_hf_config(cfg, allow_bias=True)


def test_trace_needs_hf_config_and_allow_bias_needs_trace() -> None:
    with pytest.raises(ConfigError, match="model.trace: true needs model.hf_config"):
        paraplan.load_scenario({"model": {"preset": "llama3-8b", "trace": True}, **SMALL_JOB})
    with pytest.raises(ConfigError, match="model.allow_bias applies to a traced model"):
        paraplan.load_scenario(
            {"model": {"hf_config": str(HF / "qwen2.json"), "allow_bias": True}, **SMALL_JOB}
        )


def test_without_torch_or_transformers_the_error_says_which_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # import fails as if not installed
    model = {"hf_config": str(HF / "llama.json"), "trace": True}
    with pytest.raises(ConfigError, match=r"model\.trace: .*pip install 'paraplan\[trace\]'"):
        paraplan.solve({"model": model, **SMALL_JOB}, time_limit_s=10, workers=1)
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ImportError, match=r"needs torch: pip install 'paraplan\[torch\]'"):
        from_module(object(), TOKENS)


# --- the README's example runs as written ---------------------------------------------------------


def test_the_readme_from_module_example_runs() -> None:
    text = (ROOT / "README.md").read_text()
    section = text.split("### Your own model (`from_module`, `--trace`)", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks, "the README section has a python block"
    exec(compile(blocks[0], "README.md", "exec"), {})  # noqa: S102 - the README's own code


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None
