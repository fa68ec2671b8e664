"""Megatron-LM's layer layouts (megatron-core 0.19.2): which layers each virtual stage holds, as
``--pipeline-model-parallel-layout`` and ``--hybrid-layer-pattern`` write them. Facts both the
rules (paraplan/rules/megatron.py) and the exporter (paraplan/export/megatron_placement.py) use."""

from __future__ import annotations

from paraplan.cost import Plan
from paraplan.graph import ModelSpec
from paraplan.rules.plans import virtual_stage_ranges
from paraplan.rules.validity import hybrid_pattern, mtp_layers

__all__ = [
    "HYBRID_SYMBOLS",
    "LAYOUT_SYMBOLS",
    "stage_contents",
    "layout_stages",
    "compact_layout",
    "hybrid_stage_pattern",
]


HYBRID_SYMBOLS = frozenset("MG*D+-E")
"""Layer symbols of ``--hybrid-layer-pattern`` (megatron-core 0.19.2
``megatron/core/models/hybrid/hybrid_layer_allocation.py`` ``Symbols.VALID_LAYERS``): M Mamba-2,
G gated delta net, * attention, D DeepSeek sparse attention, + MLA, - MLP, E MoE; '|' separates
pipeline segments (virtual stage j = v * pp + r), '/' starts the MTP pattern."""
LAYOUT_SYMBOLS = {"embedding": "E", "decoder": "t", "mtp": "m", "loss": "L"}
"""Layer characters of ``--pipeline-model-parallel-layout`` (``PipelineParallelLayerLayout.
parse_str_to_list``, megatron/core/transformer/pipeline_parallel_layer_layout.py, 0.19.2)."""


def stage_contents(spec: ModelSpec, plan: Plan) -> list[tuple[int, int]]:
    """(decoder layers, MTP layers) of each virtual stage, in order j = c * pp + s.

    Positions 0 .. num_layers - 1 are the decoder layers, the next ``mtp_layers(spec)`` the MTP
    layers; a plan whose chunks count only the decoder layers has its MTP layers on the last
    virtual stage, next to the loss (where Megatron puts them without a layout:
    ``mtp_on_this_rank`` in megatron/core/transformer/multi_token_prediction.py)."""
    n, mtp = spec.num_layers, mtp_layers(spec)
    out = []
    for r in virtual_stage_ranges(plan):
        decoder = max(0, min(r.stop, n) - r.start)
        out.append((decoder, len(r) - decoder))
    if out:
        decoder, here = out[-1]
        out[-1] = (decoder, here + max(0, n + mtp - sum(len(r) for r in virtual_stage_ranges(plan))))
    return out


def _run(symbol: str, n: int) -> str:
    return symbol * n if n <= 2 else f"{symbol}*{n}"


def layout_stages(spec: ModelSpec, plan: Plan) -> list[str]:
    """Each virtual stage in layout characters: 'E' on the first, its decoder layers 't', its
    MTP layers 'm', 'L' on the last (commas between kinds are cosmetic to Megatron's parser)."""
    contents = stage_contents(spec, plan)
    stages = []
    for j, (decoder, mtp) in enumerate(contents):
        parts = ["E"] if j == 0 else []
        parts += [_run("t", decoder)] if decoder else []
        parts += [_run("m", mtp)] if mtp else []
        parts += ["L"] if j == len(contents) - 1 else []
        stages.append(",".join(parts))
    return stages


def compact_layout(stages: list[str]) -> str:
    """The stages joined by '|', a run of k identical stages X written ``(X|)*k`` where that is
    shorter (Megatron's ``parse_str_to_list`` unrolls ``(...)*k`` first, then ``x*n``; parentheses
    do not nest). A run that ends the layout keeps its last stage outside the group, so the
    group's trailing '|' never opens an empty stage: ``Et*3|(tt|)*29,m|L`` (DeepSeek-V3,
    pp 16 x vp 2, Megatron's docs)."""
    out: list[tuple[str, bool]] = []  # (token, is a group ending in its own '|')
    i = 0
    while i < len(stages):
        k = 1
        while i + k < len(stages) and stages[i + k] == stages[i]:
            k += 1
        x, grouped = stages[i], k - (i + k == len(stages))  # at the end: last stage stays out
        if grouped >= 2 and len(f"({x}|)*{grouped}") < grouped * (len(x) + 1):
            out += [(f"({x}|)*{grouped}", True)] + [(x, False)] * (k - grouped)
        else:
            out += [(x, False)] * k
        i += k
    text = out[0][0] if out else ""
    for (_, group), (token, _) in zip(out, out[1:], strict=False):
        text += ("," if group else "|") + token
    return text


def hybrid_stage_pattern(spec: ModelSpec, plan: Plan) -> str:
    """``--hybrid-layer-pattern`` with the plan's stages: the model's pattern cut into the plan's
    virtual stages by '|' (segment j = v * pp + r runs on pp rank r, ``select_pipeline_segment``
    in hybrid_layer_allocation.py); one segment when there is no pipeline."""
    pattern = hybrid_pattern(spec) or ""
    if plan.pp * plan.vp == 1:
        return pattern
    return "|".join(pattern[r.start : r.stop] for r in virtual_stage_ranges(plan))
