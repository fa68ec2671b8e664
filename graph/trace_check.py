"""A traced module checked against paraplan's formulas: the ModelSpec fields its blocks share
(one attention shape, one dense and one MoE MLP shape, MoE blocks where ModelSpec puts them),
every parameter read, and per part (embedding, attention, MLP, final norm, LM head, other) its
forward FLOPs and parameters within ``TOLERANCE`` of ``build_graph(spec)``'s. Each check raises a
ValueError naming what differs: paraplan never silently plans a different model.
"""

from __future__ import annotations

from typing import Any

from paraplan.graph.layer import LayerKind
from paraplan.graph.layers import build_graph
from paraplan.graph.spec import ModelSpec
from paraplan.graph.trace_read import Block, Parts
from paraplan.graph.trace_run import Run

__all__ = [
    "TOLERANCE",
    "AUTOGRAD_BACKWARD_PER_FORWARD",
    "spec_fields",
    "check_pattern",
    "check_numbers",
    "check_all_read",
]

TOLERANCE = 0.01
"""Largest relative difference between the traced module and the formulas, per part (issue 13)."""
AUTOGRAD_BACKWARD_PER_FORWARD = 2
"""Backward / forward FLOPs of a GEMM under autograd: input and weight gradients (Narayanan et
al. 2021, arXiv:2104.04473, Sec. 5.1); cost/compute.py BACKWARD_GEMM_FACTOR is the same (a test
asserts it)."""
_PARTS = ("embedding", "attention", "mlp", "final_norm", "lm_head", "other")


def spec_fields(blocks: list[Block], where: list[str]) -> dict[str, Any]:
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


def check_pattern(spec: ModelSpec, blocks: list[Block], where: list[str]) -> None:
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


def check_numbers(
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


def _describe(spec: ModelSpec) -> str:
    moe = f", {spec.num_experts} experts top-{spec.top_k}" if spec.is_moe else ""
    return (
        f"layers={spec.num_layers} hidden={spec.hidden} heads={spec.num_heads}/"
        f"{spec.num_kv_heads} ffn={spec.ffn_hidden} vocab={spec.vocab}{moe}"
    )


def check_all_read(module: Any, parts: Parts, allow_bias: bool) -> None:
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
