"""PyTorch-native export: a runnable torchrun script (``torch_plan.py``) for the plan's layout.

Wraps ``paraplan.export.torch_plan.render_torch_plan``, which trains paraplan's small reference
model with DeviceMesh ``("pp", "dp", "tp")``, DTensor TP (+ SequenceParallel), FSDP2 or a manual
DDP all-reduce, and ``torch.distributed.pipelining`` (docs/frameworks.md §7). The plan's layer
split is passed per virtual stage (stage s = v * pp + r runs on pp rank r).

Rules enforced here, so a refusal can name the nearest runnable plan: no context parallelism in
the script; one recompute mode for all stages; rank order tp-dp-pp (the mesh's row-major order);
Schedule1F1B needs micro-batches >= pp and ScheduleInterleaved1F1B needs
n % max(1, n // pp) == 0 (torch 2.13). Anything else ``render_torch_plan`` rejects (ValueError)
becomes an ExportError too, with the nearest plan it accepts.
"""

from __future__ import annotations

from dataclasses import replace

from paraplan.cost import Axis, Plan, Recompute
from paraplan.cost.plan import chunk_layers
from paraplan.export import (
    Draft,
    ExportContext,
    Refusal,
    SearchLimits,
    check_dense_model,
    comment_block,
    enforce,
    header_lines,
    order_fixes,
    order_matches,
    regroup,
    repair,
    uniform_recompute,
    uniform_recompute_rule,
)
from paraplan.export.torch_plan import check_torch_plan, render_torch_plan

__all__ = ["RULES", "ORDER", "render", "virtual_stage_layers"]

FRAMEWORK = "PyTorch 2.13 (DeviceMesh, DTensor, FSDP2, pipelining)"

ORDER = (Axis.TP, Axis.CP, Axis.DP, Axis.PP)
"""init_device_mesh(("pp", "dp", "tp")) is row-major: tp varies fastest, then dp, then pp."""


def virtual_stage_layers(plan: Plan) -> list[int]:
    """Layers per virtual stage, in virtual-stage order (stage s = v * pp + r on pp rank r;
    unequal chunks from plan.layers_per_chunk)."""
    chunks = chunk_layers(plan)
    return [chunks[s % plan.pp][s // plan.pp] for s in range(plan.pp * plan.vp)]


# --------------------------------------------------------------------------- rules


def check_no_context_parallel(ctx: ExportContext, draft: Draft) -> Refusal | None:
    """The script's mesh has no cp dimension."""
    if draft.plan.cp == 1:
        return None
    return Refusal(f"plan.cp={draft.plan.cp}: the PyTorch-native script has no context "
                   "parallelism", repair("cp -> 1, dp absorbs it", draft, regroup(draft.plan,
                                                                                   cp=1)))


check_uniform_recompute = uniform_recompute_rule("the script wraps every block the same way")


def check_schedule(ctx: ExportContext, draft: Draft) -> Refusal | None:
    """Schedule1F1B: n >= pp; ScheduleInterleaved1F1B: n % max(1, n // pp) == 0."""
    p = draft.plan
    if p.pp == 1:
        return None
    n = ctx.inst.job.global_batch // (p.micro_batch * p.dp)
    if p.vp == 1 and n < p.pp:
        return Refusal(f"Schedule1F1B needs at least pp={p.pp} micro-batches per step; the plan "
                       f"has {n}", repair("pp -> 1, dp absorbs it", draft, regroup(p, pp=1)))
    if p.vp > 1 and n % max(1, n // p.pp):
        return Refusal(f"ScheduleInterleaved1F1B needs n % max(1, n // pp) == 0 for the {n} "
                       f"micro-batches and pp={p.pp}", repair("vp -> 1", draft, replace(p, vp=1)))
    return None


def check_rank_order(ctx: ExportContext, draft: Draft) -> Refusal | None:
    """Mesh (pp, dp, tp): tp innermost, then dp, then pp."""
    if order_matches(draft.plan, ORDER):
        return None
    return Refusal(f"plan.order={'-'.join(a.value for a in draft.plan.order)}: the script's mesh "
                   "(pp, dp, tp) places tp innermost, then dp, then pp",
                   order_fixes(draft, [("tp-cp-dp-pp", ORDER)]))


def _script_args(ctx: ExportContext, draft: Draft) -> dict[str, object]:
    """The torch_plan script's arguments for ``draft``."""
    p, job = draft.plan, ctx.inst.job
    mode = uniform_recompute(p) or Recompute.FULL  # RULES refuse mixed modes before this runs
    return dict(
        dp=p.dp, tp=p.tp, pp=p.pp, vp=p.vp, micro_batch=p.micro_batch,
        global_batch=job.global_batch, seq_len=job.seq_len, zero=p.zero,
        sequence_parallel=p.sequence_parallel, recompute=mode.value,
        layers_per_stage=virtual_stage_layers(p),
        num_layers=ctx.spec.num_layers,
    )


def _script(ctx: ExportContext, draft: Draft) -> str:
    """The torch_plan script for ``draft``; ValueError names the knob the script rejects."""
    return render_torch_plan(**_script_args(ctx, draft))  # type: ignore[arg-type]


def check_script_accepts(ctx: ExportContext, draft: Draft) -> Refusal | None:
    """Whatever else ``render_torch_plan`` rejects (its checks, without rendering), with the
    generic repairs."""
    try:
        check_torch_plan(**_script_args(ctx, draft))
    except ValueError as e:
        p = draft.plan
        return Refusal(f"torch_plan rejects it: {e}",
                       repair("vp -> 1", draft, replace(p, vp=1) if p.vp > 1 else None)
                       + repair("sequence_parallel -> off", draft,
                                replace(p, sequence_parallel=False) if p.sequence_parallel
                                else None)
                       + repair("pp -> 1, dp absorbs it", draft,
                                regroup(p, pp=1) if p.pp > 1 else None))
    return None


def check_dense_reference(ctx: ExportContext, draft: Draft) -> Refusal | None:
    """The script's reference model is a dense Llama: no experts, no latent attention."""
    s = ctx.spec
    if not (s.is_moe or s.is_mla):
        return None
    return Refusal(f"model {s.name} has "
                   + ("routed experts" if s.is_moe else "multi-head latent attention")
                   + ": the PyTorch-native plan's reference model is a dense Llama")


RULES = (check_dense_model, check_dense_reference, check_no_context_parallel,
         check_uniform_recompute, check_schedule, check_rank_order, check_script_accepts)

SEARCH = SearchLimits()
"""solver.target=torch: the script takes layers per virtual stage; every block wrapped alike."""
MODEL_RULES = (check_dense_reference,)
"""The RULES that read only the model and job (solver.target checks them once, first)."""


# --------------------------------------------------------------------------- render


def render(ctx: ExportContext) -> str:
    """``torch_plan.py``: header comments, then the runnable script."""
    enforce(ctx, FRAMEWORK, RULES)
    p = ctx.plan
    script = _script(ctx, Draft(p, ctx.precision))
    notes = [f"run: torchrun --standalone --nproc_per_node={p.num_devices} torch_plan.py "
             "[--check]; the model is paraplan's small reference model with the plan's layer "
             "count, not the scenario's model"]
    if p.zero == 1:
        notes.append("zero=1 runs as ZeRO-2 (FSDP2 shards gradients with the optimizer state)")
    return comment_block(header_lines(ctx, FRAMEWORK) + notes) + "\n" + script
