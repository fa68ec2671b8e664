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

This module holds the ways in (:func:`from_module`, :func:`trace_module`, :func:`trace_hf_config`,
:func:`from_hf_trace`) and :class:`TracedModel`. The meta-device run is graph/trace_run.py;
finding the parts on the module tree graph/trace_tree.py (one block's attention and MLP:
graph/trace_read.py); the check against the formulas, with ``TOLERANCE``, graph/trace_check.py.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paraplan.graph.hf_config import from_hf_config, read_json
from paraplan.graph.presets import ARCHITECTURE_FIELDS
from paraplan.graph.spec import ModelSpec
from paraplan.graph.trace_check import TOLERANCE, check_all_read, check_numbers, check_pattern, spec_fields
from paraplan.graph.trace_read import Parts, mixers
from paraplan.graph.trace_run import import_torch, run_on_meta
from paraplan.graph.trace_tree import embedding, layer_stack, numel, read_blocks, read_ends, traced_part_flops

__all__ = [
    "TOLERANCE",
    "TracedModel",
    "from_module",
    "trace_module",
    "from_hf_trace",
    "trace_hf_config",
    "HF_TRACE_SEQ_LEN",
]

HF_TRACE_SEQ_LEN = 64
"""Tokens per sequence of the Hugging Face trace (one sequence): only the attention core scales
with it, and the formulas are checked at this length."""


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
    stack, blocks = layer_stack(module)
    emb_path, emb = embedding(module, stack)
    hidden, vocab = int(emb.embedding_dim), int(emb.num_embeddings)
    where = [f"{stack}.{i}" if stack else str(i) for i in range(len(blocks))]
    hooked = {f"{w}.{n}": m for w, b in zip(where, blocks, strict=True) for n, m in mixers(b)}
    run = run_on_meta(module, example_batch, hooked)
    parts = Parts(read={f"{emb_path}.weight"}, windows=windows)
    read, norm_kinds, params = read_blocks(blocks, where, run, hidden, parts)
    final_kind, tied, end_params = read_ends(module, run, stack, emb_path, vocab, hidden, parts)
    check_all_read(module, parts, allow_bias)
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
            **spec_fields(read, where),
        )
    except ValueError as e:
        raise ValueError(f"the traced module is no model paraplan plans: {e}") from None
    check_pattern(spec, read, where)
    traced_params = {"embedding": emb.weight.numel(), **params, **end_params}
    traced_params["other"] = numel(module) - sum(traced_params.values())
    traced_flops = traced_part_flops(run, where, list(hooked))
    formula_flops, formula_params = check_numbers(spec, run, traced_flops, traced_params)
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
