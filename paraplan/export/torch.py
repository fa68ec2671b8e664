"""PyTorch-native export: a runnable torchrun script (``torch_plan.py``) for the plan's layout.

Wraps ``paraplan.export.torch_plan.render_torch_plan``, which trains paraplan's small reference
model with DeviceMesh ``("pp", "dp", "tp")``, DTensor TP (+ SequenceParallel), FSDP2 or a manual
DDP all-reduce, and ``torch.distributed.pipelining`` (docs/frameworks.md §7). The plan's layer
split is passed per virtual stage (stage s = v * pp + r runs on pp rank r).

Rules enforced (paraplan/rules/torch.py), so a refusal can name the nearest runnable plan: no
context parallelism in the script; one recompute mode for all stages; rank order tp-dp-pp (the
mesh's row-major order); Schedule1F1B needs micro-batches >= pp and ScheduleInterleaved1F1B needs n
% max(1, n // pp) == 0 (torch 2.13). Anything else ``render_torch_plan`` rejects (ValueError)
becomes an ExportError too, with the nearest plan it accepts.
"""

from __future__ import annotations

from paraplan.export import (
    ExportContext,
    comment_block,
    enforce,
    header_lines,
)
from paraplan.export.torch_plan import render_torch_plan
from paraplan.rules import Draft, rules_of
from paraplan.rules.launch_env import allocator_env
from paraplan.rules.torch import ORDER, script_args, virtual_stage_layers

__all__ = ["ORDER", "render", "virtual_stage_layers"]

FRAMEWORK = "PyTorch 2.13 (DeviceMesh, DTensor, FSDP2, pipelining)"


def _script(ctx: ExportContext, draft: Draft) -> str:
    """The torch_plan script for ``draft``; ValueError names the knob the script rejects."""
    return render_torch_plan(**script_args(ctx.rule_context, draft))


# --------------------------------------------------------------------------- render


def render(ctx: ExportContext) -> str:
    """``torch_plan.py``: header comments, then the runnable script."""
    enforce(ctx, FRAMEWORK, rules_of("torch").rules)  # its launch rules first
    p = ctx.plan
    script = _script(ctx, Draft(p, ctx.precision))
    env = "".join(f"{k}={v} " for k, v in allocator_env(ctx.inst.job).items())
    notes = [
        f"run: {env}torchrun --standalone --nproc_per_node={p.num_devices} torch_plan.py "
        "[--check]; the model is paraplan's small reference model with the plan's layer "
        "count, not the scenario's model"
    ]
    if p.zero == 1:
        notes.append("zero=1 runs as ZeRO-2 (FSDP2 shards gradients with the optimizer state)")
    return comment_block(header_lines(ctx, FRAMEWORK) + notes) + "\n" + script
