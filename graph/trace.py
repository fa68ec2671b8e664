"""Your own model: trace a ``torch.nn.Module`` (or a Hugging Face config built by ``transformers``)
on the meta device into the ModelSpec paraplan plans, checked against the formulas.

``from_module(module, example_batch)`` runs the module once on ``torch.device("meta")`` (no
weights, no GPU; a module with real weights is traced through meta copies and left untouched)
under ``torch.utils.flop_counter.FlopCounterMode``, walks the module tree (the layer stack is the
``nn.ModuleList`` / ``nn.Sequential`` of same-class blocks holding the most parameters; the token
embedding the largest ``nn.Embedding`` outside it; the LM head the last projection to the
vocabulary), reads hidden size, heads, kv heads, head dim, FFN width, activation, experts, top-k
and tied embeddings off the weights and the recorded calls, and compares the module's traced
forward FLOPs and parameters, per part (embedding, attention, MLP, final norm, head), with
``build_graph`` of that spec. A part that differs by more than ``TOLERANCE`` (1%), a parameter no
part explains, a bias (unless ``allow_bias``), a local attention window (unless a Hugging Face
config states its layout: ``trace_hf_config``) or a block paraplan cannot read is a ValueError
naming it: paraplan never silently plans a different model. The scenario
path (``model: {hf_config: PATH, trace: true}``) reports these as ConfigError.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paraplan.graph.hf_config import from_hf_config, read_json
from paraplan.graph.layer import LayerKind
from paraplan.graph.layers import build_graph
from paraplan.graph.presets import ARCHITECTURE_FIELDS
from paraplan.graph.spec import ModelSpec
from paraplan.graph.trace_read import Block, Parts, mixers, norm_modules, read_block
from paraplan.graph.trace_run import Run, import_torch, run_on_meta

__all__ = [
    "TOLERANCE",
    "TracedModel",
    "from_module",
    "trace_module",
    "from_hf_trace",
    "trace_hf_config",
    "HF_TRACE_SEQ_LEN",
]

TOLERANCE = 0.01
"""Largest relative difference between the traced module and the formulas, per part (issue 13)."""
AUTOGRAD_BACKWARD_PER_FORWARD = 2
"""Backward / forward FLOPs of a GEMM under autograd: input and weight gradients (Narayanan et
al. 2021, arXiv:2104.04473, Sec. 5.1); cost/compute.py BACKWARD_GEMM_FACTOR is the same (a test
asserts it)."""
HF_TRACE_SEQ_LEN = 64
"""Tokens per sequence of the Hugging Face trace (one sequence): only the attention core scales
with it, and the formulas are checked at this length."""
_PARTS = ("embedding", "attention", "mlp", "final_norm", "lm_head", "other")


@dataclass(frozen=True, slots=True)
class TracedModel:
    """A traced module: the spec read off it, and per part (embedding, attention, mlp,
    final_norm, lm_head, other) its forward FLOPs (whole example batch) and parameters, traced
    and from ``build_graph(spec)``; ``backward_flops`` (None if backward could not run) and the
    bias parameters accepted under ``allow_bias``."""

    spec: ModelSpec
    num_tokens: int
    seq_len: int
    traced_flops: dict[str, int]
    formula_flops: dict[str, int]
    traced_params: dict[str, int]
    formula_params: dict[str, int]
    backward_flops: int | None
    biases: tuple[str, ...]


def _layer_stack(module: Any) -> tuple[str, list[Any]]:
    """Path and children of the nn.ModuleList / nn.Sequential of same-class blocks (with
    matrices) holding the most parameters; the outer one wins a tie."""
    torch = import_torch()
    best: tuple[int, str, list[Any]] | None = None
    for path, mod in module.named_modules():
        if not isinstance(mod, (torch.nn.ModuleList, torch.nn.Sequential)) or len(mod) == 0:
            continue
        kids = list(mod)
        if len({type(k) for k in kids}) != 1 or not mixers(kids[0]):
            continue
        count = sum(p.numel() for p in mod.parameters())
        if best is None or count > best[0]:
            best = (count, path, kids)
    if best is None:
        raise ValueError(
            f"{type(module).__name__}: no layer stack found; paraplan reads the "
            "blocks from an nn.ModuleList (or nn.Sequential) of blocks of one class"
        )
    return best[1], best[2]


def _embedding(module: Any, stack: str) -> tuple[str, Any]:
    """The token embedding: the largest nn.Embedding outside the layer stack."""
    torch = import_torch()
    found = [
        (n, m)
        for n, m in module.named_modules()
        if isinstance(m, torch.nn.Embedding) and not n.startswith(stack + ".")
    ]
    if not found:
        raise ValueError(
            f"{type(module).__name__}: no nn.Embedding (the token embedding) outside "
            f"the layer stack {stack!r}"
        )
    return max(found, key=lambda nm: nm[1].num_embeddings)


def _head(module: Any, run: Run, emb_weight: str, vocab: int, hidden: int) -> tuple[str, bool]:
    """Weight name of the LM head (the last projection to the vocabulary outside the blocks) and
    whether it is the embedding's weight (tied)."""
    heads = [
        c.weight for c in run.calls if c.kind == "linear" and not c.owner and c.shapes[0] == (vocab, hidden)
    ]
    if not heads or not heads[-1]:
        raise ValueError(
            f"{type(module).__name__}: no LM head found; paraplan needs a projection "
            f"from hidden={hidden} to the vocabulary ({vocab}) after the blocks"
        )
    return heads[-1], module.get_parameter(heads[-1]) is module.get_parameter(emb_weight)


def _norm_kind(norm: Any) -> str:
    """A norm with a bias has LayerNorm's 2 x hidden parameters; one without, RMSNorm's hidden."""
    return "layernorm" if getattr(norm, "bias", None) is not None else "rmsnorm"


def _spec_fields(blocks: list[Block], where: list[str]) -> dict[str, Any]:
    """ModelSpec fields shared by the blocks: one attention, one dense and one MoE MLP shape,
    MoE blocks where ModelSpec puts them (first_dense_layers, then every moe_layer_freq-th)."""
    for i, b in enumerate(blocks):
        if b.attention != blocks[0].attention:
            raise ValueError(
                f"{where[i]}: attention {b.attention} differs from {where[0]}'s "
                f"{blocks[0].attention}; paraplan plans blocks of one attention shape"
            )
    moe = [i for i, b in enumerate(blocks) if b.mlp.num_experts]
    dense = [i for i, b in enumerate(blocks) if not b.mlp.num_experts]
    for group in (moe, dense):
        for i in group:
            if blocks[i].mlp != blocks[group[0]].mlp:
                raise ValueError(
                    f"{where[i]}: MLP {blocks[i].mlp} differs from {where[group[0]]}'s {blocks[group[0]].mlp}"
                )
    if (
        moe
        and dense
        and (blocks[moe[0]].mlp.gated, blocks[moe[0]].mlp.activation)
        != (blocks[dense[0]].mlp.gated, blocks[dense[0]].mlp.activation)
    ):
        raise ValueError(
            f"{where[moe[0]]} and {where[dense[0]]}: dense and expert MLPs use "
            "different activations; paraplan models one"
        )
    a = blocks[0].attention
    fields: dict[str, Any] = dict(
        num_layers=len(blocks),
        num_heads=a.num_heads,
        num_kv_heads=a.num_kv_heads,
        head_dim=a.head_dim,
        dropout=a.dropout,
        activation=blocks[(dense or moe)[0]].mlp.activation,
        ffn_hidden=blocks[dense[0]].mlp.ffn_hidden if dense else 0,
    )
    if moe:
        m = blocks[moe[0]].mlp
        shared = m.shared_ffn_hidden // m.ffn_hidden if m.shared_ffn_hidden % m.ffn_hidden == 0 else 1
        fields.update(
            num_experts=m.num_experts,
            top_k=m.top_k,
            moe_ffn_hidden=m.ffn_hidden,
            num_shared_experts=shared if m.shared_ffn_hidden else 0,
            shared_ffn_hidden=m.shared_ffn_hidden,
            first_dense_layers=moe[0],
            moe_layer_freq=moe[1] - moe[0] if len(moe) > 1 else 1,
        )
    return fields


def _check_pattern(spec: ModelSpec, blocks: list[Block], where: list[str]) -> None:
    traced = [bool(b.mlp.num_experts) for b in blocks]
    if traced != [spec.is_moe_layer(i) for i in range(len(blocks))]:
        moe = [i for i, t in enumerate(traced) if t]
        raise ValueError(
            f"{where[0].rsplit('.', 1)[0]}: MoE MLPs in blocks {moe} do not follow "
            "paraplan's pattern (first_dense_layers dense blocks, then every "
            "moe_layer_freq-th block MoE); heterogeneous stacks are not traced yet"
        )


def _formula(spec: ModelSpec, run: Run) -> tuple[dict[str, int], dict[str, int]]:
    """Forward FLOPs of the example batch and parameters per part, from build_graph(spec)."""
    kinds = {
        LayerKind.EMBEDDING: "embedding",
        LayerKind.ATTENTION: "attention",
        LayerKind.MLP: "mlp",
        LayerKind.MOE: "mlp",
        LayerKind.FINAL_NORM: "final_norm",
        LayerKind.LM_HEAD: "lm_head",
    }
    flops = dict.fromkeys(_PARTS, 0)
    params = dict.fromkeys(_PARTS, 0)
    for layer in build_graph(spec).layers():
        per_token = layer.gemm_flops_per_token + layer.attn_core_flops_per_token_per_seq * run.seq_len
        flops[kinds[layer.kind]] += per_token * run.num_tokens
        params[kinds[layer.kind]] += layer.params
    return flops, params


def _differences(traced: dict[str, int], formula: dict[str, int], what: str) -> list[str]:
    out = []
    for part in _PARTS:
        t, f = traced[part], formula[part]
        if abs(t - f) > TOLERANCE * max(f, 1):
            rel = f"{(t - f) / f:+.1%}" if f else "none in the formulas"
            out.append(f"{part} {what}: traced {t:,} vs formula {f:,} ({rel})")
    return out


def _numel(mod: Any) -> int:
    return sum(p.numel() for p in mod.parameters())


def _read_blocks(
    blocks: list[Any], where: list[str], run: Run, hidden: int, parts: Parts
) -> tuple[list[Block], set[str], dict[str, int]]:
    """Each block's attention and MLP, the norm kinds, and the parameters of the attention and
    MLP parts (each with one of the block's two norms, as build_graph counts them)."""
    read, kinds, params = [], set(), {"attention": 0, "mlp": 0}
    attention_owners = _attention_owners(run)
    for w, b in zip(where, blocks, strict=True):
        read.append(read_block(b, w, run, hidden, parts))
        norms = norm_modules(b, hidden)
        if len(norms) != 2:
            raise ValueError(
                f"{w}: {len(norms)} norms of width {hidden} "
                f"({', '.join(n for n, _ in norms) or 'none'}); paraplan models two "
                "per block (before attention and before the MLP)"
            )
        for n, m in norms:
            parts.read.update(f"{w}.{n}.{q}" for q, _ in m.named_parameters())
            kinds.add(_norm_kind(m))
        for (name, mod), (_, norm) in zip(
            sorted(mixers(b), key=lambda nm: f"{w}.{nm[0]}" not in attention_owners), norms, strict=True
        ):
            params["attention" if f"{w}.{name}" in attention_owners else "mlp"] += _numel(mod) + _numel(norm)
    return read, kinds, params


def _read_ends(
    module: Any, run: Run, stack: str, emb_path: str, vocab: int, hidden: int, parts: Parts
) -> tuple[str, bool, dict[str, int]]:
    """The final norm (its kind) and the LM head (tied or not), with their parameters."""
    outside = [(n, m) for n, m in norm_modules(module, hidden) if not n.startswith(stack + ".")]
    if len(outside) != 1:
        raise ValueError(
            f"{type(module).__name__}: {len(outside)} norms outside the blocks "
            f"({', '.join(n for n, _ in outside) or 'none'}); paraplan models one "
            "final norm before the LM head"
        )
    final_path, final_norm = outside[0]
    parts.read.update(f"{final_path}.{q}" for q, _ in final_norm.named_parameters())
    head_weight, tied = _head(module, run, f"{emb_path}.weight", vocab, hidden)
    params = {"final_norm": _numel(final_norm), "lm_head": 0}
    if not tied:
        head_path = head_weight.rsplit(".", 1)[0]
        head = module.get_submodule(head_path)
        params["lm_head"] = _numel(head)
        parts.read.update(f"{head_path}.{q}" for q, _ in head.named_parameters())
        if getattr(head, "bias", None) is not None:
            parts.biases.append(f"{head_path}.bias")
    return _norm_kind(final_norm), tied, params


def _traced_flops(run: Run, where: list[str], mixer_paths: list[str]) -> dict[str, int]:
    """Forward FLOPs per part: attention and MLP sub-modules, the rest of the blocks ("other"),
    and everything outside the blocks (the LM head; the embedding and norms do no GEMM)."""
    blocks = sum(run.forward_flops.get(w, 0) for w in where)  # the list itself never runs
    attention_owners = _attention_owners(run)
    attention = sum(run.forward_flops.get(p, 0) for p in attention_owners)
    mlp = sum(run.forward_flops.get(p, 0) for p in mixer_paths if p not in attention_owners)
    return {
        "embedding": 0,
        "attention": attention,
        "mlp": mlp,
        "final_norm": 0,
        "lm_head": run.forward_flops[""] - blocks,
        "other": blocks - attention - mlp,
    }


def _check_numbers(
    spec: ModelSpec, run: Run, flops: dict[str, int], params: dict[str, int]
) -> tuple[dict[str, int], dict[str, int]]:
    """build_graph(spec)'s FLOPs and parameters per part; ValueError naming every part whose
    traced number differs by more than TOLERANCE, and a backward that is not 2x the forward."""
    formula_flops, formula_params = _formula(spec, run)
    problems = _differences(flops, formula_flops, "forward FLOPs") + _differences(
        params, formula_params, "parameters"
    )
    total = run.forward_flops[""]
    if (
        run.backward_flops is not None
        and abs(run.backward_flops - AUTOGRAD_BACKWARD_PER_FORWARD * total) > TOLERANCE * total
    ):
        problems.append(
            f"backward FLOPs {run.backward_flops:,} are "
            f"{run.backward_flops / max(total, 1):.2f}x the forward's, not "
            f"{AUTOGRAD_BACKWARD_PER_FORWARD}x"
        )
    if problems:
        raise ValueError(
            f"{spec.name}: the traced module differs from paraplan's formulas for {_describe(spec)} "
            f"by more than {TOLERANCE:.0%}: {'; '.join(problems)}. The module has something the "
            "formulas do not model; refused rather than planned as a different model"
        )
    return formula_flops, formula_params


def trace_module(
    module: Any,
    example_batch: Any,
    *,
    name: str | None = None,
    allow_bias: bool = False,
    windows: bool = False,
) -> TracedModel:
    """Trace ``module`` on the meta device (module docstring) and return the spec with the
    per-part FLOPs and parameters it was checked on. ``example_batch``: token ids [batch, seq_len],
    or a dict / tuple of the forward's inputs holding them. ``windows``: accept local attention
    windows (their layout then comes from elsewhere: trace_hf_config takes it from the config;
    the flop counter counts the masked attention as full, and so does the check). ImportError
    without torch."""
    torch = import_torch()
    if not isinstance(module, torch.nn.Module):
        raise ValueError(f"from_module needs a torch.nn.Module, not a {type(module).__name__}")
    stack, blocks = _layer_stack(module)
    emb_path, emb = _embedding(module, stack)
    hidden, vocab = int(emb.embedding_dim), int(emb.num_embeddings)
    where = [f"{stack}.{i}" if stack else str(i) for i in range(len(blocks))]
    hooked = {f"{w}.{n}": m for w, b in zip(where, blocks, strict=True) for n, m in mixers(b)}
    run = run_on_meta(module, example_batch, hooked)
    parts = Parts(read={f"{emb_path}.weight"}, windows=windows)
    read, norm_kinds, params = _read_blocks(blocks, where, run, hidden, parts)
    final_kind, tied, end_params = _read_ends(module, run, stack, emb_path, vocab, hidden, parts)
    _check_all_read(module, parts, allow_bias)
    if norm_kinds | {final_kind} != {final_kind}:
        raise ValueError(
            f"{type(module).__name__}: mixes RMSNorm and LayerNorm (norms with and "
            "without a bias); paraplan models one kind"
        )
    try:
        spec = ModelSpec(
            name=name or type(module).__name__,
            hidden=hidden,
            vocab=vocab,
            tied_embeddings=tied,
            norm=final_kind,
            **_spec_fields(read, where),
        )
    except ValueError as e:
        raise ValueError(f"the traced module is no model paraplan plans: {e}") from None
    _check_pattern(spec, read, where)
    traced_params = {"embedding": emb.weight.numel(), **params, **end_params}
    traced_params["other"] = _numel(module) - sum(traced_params.values())
    traced_flops = _traced_flops(run, where, list(hooked))
    formula_flops, formula_params = _check_numbers(spec, run, traced_flops, traced_params)
    if parts.biases:
        warnings.warn(
            f"{spec.name}: {len(parts.biases)} bias parameters "
            f"({', '.join(parts.biases[:3])}{', ...' if len(parts.biases) > 3 else ''}) "
            "are not in paraplan's formulas (allow_bias=True); the FLOPs and parameters "
            f"still agree within {TOLERANCE:.0%}",
            stacklevel=2,
        )
    return TracedModel(
        spec=spec,
        num_tokens=run.num_tokens,
        seq_len=run.seq_len,
        traced_flops=traced_flops,
        formula_flops=formula_flops,
        traced_params=traced_params,
        formula_params=formula_params,
        backward_flops=run.backward_flops,
        biases=tuple(parts.biases),
    )


def _attention_owners(run: Run) -> set[str]:
    """Paths of the block sub-modules that ran an attention core."""
    s = run.seq_len
    return {
        c.owner
        for c in run.calls
        if c.owner and (c.kind == "attention" or c.kind == "matmul" and c.shapes[1][-2:] == (s, s))
    }


def _describe(spec: ModelSpec) -> str:
    moe = f", {spec.num_experts} experts top-{spec.top_k}" if spec.is_moe else ""
    return (
        f"layers={spec.num_layers} hidden={spec.hidden} heads={spec.num_heads}/"
        f"{spec.num_kv_heads} ffn={spec.ffn_hidden} vocab={spec.vocab}{moe}"
    )


def _check_all_read(module: Any, parts: Parts, allow_bias: bool) -> None:
    """Every parameter is part of something paraplan models; biases only with allow_bias."""
    shapes = {n: tuple(p.shape) for n, p in module.named_parameters()}
    read = {id(module.get_parameter(n)) for n in parts.read}  # a tied weight has two names
    left = [n for n in shapes if id(module.get_parameter(n)) not in read]
    if left:
        count = sum(module.get_parameter(n).numel() for n in left)
        listed = ", ".join(f"{n} {list(shapes[n])}" for n in left[:5])
        raise ValueError(
            f"{type(module).__name__}: {len(left)} parameters ({count:,} values) are no part "
            f"paraplan models: {listed}{', ...' if len(left) > 5 else ''} (it reads a token "
            "embedding, blocks of attention + MLP + two norms, a final norm and the LM head); "
            "refused rather than planned as a different model"
        )
    if parts.biases and not allow_bias:
        count = sum(module.get_parameter(n).numel() for n in parts.biases)
        raise ValueError(
            f"{type(module).__name__}: {len(parts.biases)} bias parameters ({count:,} values: "
            f"{', '.join(parts.biases[:3])}{', ...' if len(parts.biases) > 3 else ''}); paraplan's "
            "formulas have no biases. Pass allow_bias=True (scenario: model.allow_bias: true) to "
            f"plan without them if their FLOPs and parameters stay within {TOLERANCE:.0%}"
        )


def from_module(
    module: Any, example_batch: Any, *, name: str | None = None, allow_bias: bool = False
) -> ModelSpec:
    """The ModelSpec of a ``torch.nn.Module``, traced on the meta device and checked against
    the formulas within 1% (module docstring; ``trace_module`` returns the numbers too)."""
    return trace_module(module, example_batch, name=name, allow_bias=allow_bias).spec


def trace_hf_config(
    config: str | Path | dict[str, Any], *, allow_bias: bool = False, seq_len: int = HF_TRACE_SEQ_LEN
) -> TracedModel:
    """Build a Hugging Face config's model with ``transformers`` on the meta device (SDPA
    attention, batched expert GEMMs), trace it, and require the traced spec to equal
    ``from_hf_config``'s reading of the same config. ValueError names model.hf_config."""
    cfg = config if isinstance(config, dict) else read_json(Path(config))
    formula_spec = from_hf_config(config)
    torch = import_torch()
    try:
        import transformers
    except ImportError:
        raise ValueError(
            "model.trace: tracing a Hugging Face config needs the transformers "
            "package: pip install 'paraplan[trace]'"
        ) from None
    model_type = cfg.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise ValueError(
            "model.hf_config: model.trace needs the config's model_type (e.g. llama) "
            "to build the model with transformers"
        )
    settings = {k: v for k, v in cfg.items() if k != "model_type"}
    auto_model: Any = transformers.AutoModelForCausalLM  # untyped in transformers
    try:
        hf_config = transformers.AutoConfig.for_model(model_type, **settings)
        with torch.device("meta"):
            try:
                model = auto_model.from_config(
                    hf_config, attn_implementation="sdpa", experts_implementation="batched_mm"
                )
            except ValueError:  # no SDPA for this architecture: its own (eager) attention
                model = auto_model.from_config(
                    hf_config, attn_implementation="eager", experts_implementation="batched_mm"
                )
    except (ValueError, KeyError, TypeError, AttributeError, RuntimeError) as e:
        first = (str(e).splitlines() or [""])[0][:300]
        raise ValueError(
            f"model.hf_config: transformers {transformers.__version__} cannot build "
            f"model_type {model_type!r} as a causal LM ({type(e).__name__}: {first})"
        ) from None
    # with a KV cache transformers skips its packed-sequence check, which needs values (.item())
    batch = {"input_ids": torch.zeros(1, seq_len, dtype=torch.long), "use_cache": True}
    windowed = bool(formula_spec.sliding_window)  # the config states the windows' layout
    traced = trace_module(model, batch, name=formula_spec.name, allow_bias=allow_bias, windows=windowed)
    # what the module's shapes cannot show (RoPE, router, norm epsilon, bias flags, the window
    # layout) is the config's
    traced = dataclasses.replace(
        traced,
        spec=dataclasses.replace(
            traced.spec,
            **{key: getattr(formula_spec, key) for key in (*ARCHITECTURE_FIELDS, "rope", "router")},
        ),
    )
    differ = [
        f"{f.name} {getattr(traced.spec, f.name)} (traced) vs {getattr(formula_spec, f.name)} (config)"
        for f in dataclasses.fields(ModelSpec)
        if f.name != "name" and getattr(traced.spec, f.name) != getattr(formula_spec, f.name)
    ]
    if differ:
        raise ValueError(
            f"model.hf_config: the model transformers builds differs from paraplan's "
            f"reading of the config: {'; '.join(differ)}"
        )
    return traced


def from_hf_trace(config: str | Path | dict[str, Any], *, allow_bias: bool = False) -> ModelSpec:
    """The ModelSpec of a Hugging Face config, traced from the real model code (trace_hf_config)."""
    return trace_hf_config(config, allow_bias=allow_bias).spec
