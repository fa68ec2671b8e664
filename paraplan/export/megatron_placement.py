"""Where Megatron-LM puts layers and ranks: the pipeline split flags and the rank groups.

- Even stages: nothing, or ``--num-virtual-stages-per-pipeline-rank``; stages that differ only at
  the first/last rank: ``--decoder-first/last-pipeline-num-layers``; anything else: an explicit
  ``--pipeline-model-parallel-layout`` (virtual stage s = v * pp + r runs on pp rank r).
- Unequal virtual stages (plan.layers_per_chunk): every chunk q layers but the first of rank 0
  and/or the last of the last rank, q - 1: ``--account-for-embedding-in-pipeline-split`` /
  ``--account-for-loss-in-pipeline-split`` (megatron-core ``get_num_layers_to_build``: the
  (layers + 1 + 1) / pp slots per rank split by vp, one slot taken by the embedding / loss);
  any other chunk layout: ``--pipeline-model-parallel-layout``.
- The layout string is built from the plan's layer positions (rules/megatron_layout.py
  ``layout_stages``, ``compact_layout``): 'E', the stage's decoder layers 't', its MTP layers 'm',
  'L', runs of equal stages as ``(tt|)*29``; MTP layers anywhere but the last virtual stage also
  need it. Hybrid models (``spec.layer_pattern``) take no layout: their stages are '|' segments
  of ``--hybrid-layer-pattern`` (megatron-core refuses the layout, vp, first/last and account-for
  flags next to it).
- Rank groups: each tp/cp/dp/pp group, and each expert-parallel group, under the plan's order.
"""

from __future__ import annotations

from dataclasses import replace
from math import prod

from paraplan.cost import Axis, Plan
from paraplan.cost.plan import chunk_layers, is_even_chunks
from paraplan.graph import ModelSpec
from paraplan.rules.megatron_layout import (
    compact_layout,
    hybrid_stage_pattern,
    layout_stages,
    stage_contents,
)
from paraplan.rules.validity import hybrid_pattern
from paraplan.scenario.plan_doc import PlanDoc

__all__ = [
    "rank_groups",
    "expert_rank_groups",
    "pipeline_layout",
    "decoder_plan",
    "account_for_slots",
    "pipeline_args",
]


def rank_groups(plan: PlanDoc | Plan) -> dict[str, list[list[int]]]:
    """Ranks of every tp/cp/dp/pp group under the plan's order (innermost axis varies fastest).

    Rank = sum over axes of coordinate x stride, stride = product of the degrees ordered inside.
    Groups are listed by their smallest rank.
    """
    order = [str(a) for a in plan.order or ()]
    degree = {a: int(getattr(plan, a)) for a in order}
    stride = {a: prod(degree[b] for b in order[:i]) for i, a in enumerate(order)}
    world = prod(degree.values())
    groups: dict[str, list[list[int]]] = {}
    for a in order:
        bases = sorted({r - (r // stride[a] % degree[a]) * stride[a] for r in range(world)})
        groups[a] = [[b + k * stride[a] for k in range(degree[a])] for b in bases]
    return groups


def expert_rank_groups(plan: Plan) -> list[list[int]]:
    """Ranks of every expert-parallel group: the innermost ep ranks of each dp x cp group (the
    cost model's EP group, cost/ep.py), listed by their smallest rank."""
    strides = {a: prod(plan.degree(b) for b in plan.order[:i]) for i, a in enumerate(plan.order)}
    cp_inner = plan.order.index(Axis.CP) < plan.order.index(Axis.DP)
    inner, outer = (Axis.CP, Axis.DP) if cp_inner else (Axis.DP, Axis.CP)
    d1 = plan.degree(inner)
    if plan.ep <= d1:
        axes = [(strides[inner], plan.ep)]
    else:
        axes = [(strides[inner], d1), (strides[outer], plan.ep // d1)]
    offsets = [0]
    for stride, degree in axes:
        offsets = [o + k * stride for o in offsets for k in range(degree)]
    seen: set[int] = set()
    out: list[list[int]] = []
    for rank in range(plan.num_devices):  # the smallest rank not yet seen is a group's first
        if rank not in seen:
            group = sorted(rank + o for o in offsets)
            seen.update(group)
            out.append(group)
    return out


def pipeline_layout(plan: Plan, spec: ModelSpec) -> str:
    """``--pipeline-model-parallel-layout`` string: virtual stage s = v * pp + r on pp rank r,
    holding the plan's layer positions in order (rules/megatron_layout.py ``layout_stages``)."""
    return compact_layout(layout_stages(spec, plan))


def decoder_plan(plan: Plan, spec: ModelSpec) -> Plan | None:
    """``plan`` with its chunks counting decoder layers only (MTP positions taken out), or None
    when a virtual stage would hold none (only a layout expresses that)."""
    contents = stage_contents(spec, plan)
    rows = tuple(tuple(contents[c * plan.pp + s][0] for c in range(plan.vp)) for s in range(plan.pp))
    if min(min(row) for row in rows) < 1:
        return None
    return replace(plan, layers_per_stage=tuple(sum(row) for row in rows), layers_per_chunk=rows)


def account_for_slots(plan: Plan) -> tuple[bool, bool] | None:
    """(embedding, loss) when the chunks are Megatron's account-for split: every chunk holds q
    layers except the first of rank 0 (q - 1 with the embedding) and/or the last of the last
    rank (q - 1 with the loss), at least one of them short; else None."""
    chunks = chunk_layers(plan)
    q = max(max(row) for row in chunks)
    emb, loss = chunks[0][0] == q - 1, chunks[-1][-1] == q - 1
    rest = [
        n
        for r, row in enumerate(chunks)
        for c, n in enumerate(row)
        if not (emb and (r, c) == (0, 0)) and not (loss and (r, c) == (plan.pp - 1, plan.vp - 1))
    ]
    if plan.vp == 1 or not (emb or loss) or q < 2 or any(n != q for n in rest):
        return None
    return emb, loss


def pipeline_args(plan: Plan, spec: ModelSpec) -> list[tuple[str, object]]:
    """(concept, value) pairs of the pipeline split: even, first/last, account-for slots, or an
    explicit layout; a hybrid model's stages in its layer pattern."""
    args: list[tuple[str, object]] = [("pp", plan.pp)] if plan.pp > 1 else []
    if hybrid_pattern(spec):
        return args + [("hybrid_pattern", hybrid_stage_pattern(spec, plan))]
    if plan.pp == 1:
        return args
    layout = [("layout", pipeline_layout(plan, spec))]
    mtp_last = all(m == 0 for _, m in stage_contents(spec, plan)[:-1])
    decoder = decoder_plan(plan, spec)
    if decoder is None or not mtp_last:
        return args + layout  # flags alone put MTP on the last stage, next to the loss
    plan = decoder
    split = plan.layers_per_stage
    if not is_even_chunks(plan):
        slots = account_for_slots(plan)
        if slots is None:
            return args + layout
        emb, loss = slots
        return (
            args
            + [("account_for_embedding", None)] * emb
            + [("account_for_loss", None)] * loss
            + [("vp", plan.vp)]
        )
    middle = split[1:-1]
    if len(set(split)) > 1 and len(set(middle)) > 1:
        return args + layout
    if len(set(split)) > 1:
        body = middle[0] if middle else None
        if split[0] != body:
            args.append(("first_stage_layers", split[0]))
        if middle and split[-1] != body:
            args.append(("last_stage_layers", split[-1]))
    if plan.vp > 1:
        args.append(("vp", plan.vp))
    return args
