"""Exporters: a planned Result rendered for the framework that will run it.

Each target lives in its own module (``megatron``, ``deepspeed``, ``torchtitan``, ``maxtext``,
``nemo``, ``torch``, ``trace``): a renderer, with a ``render(ctx) -> str`` function and one
mapping table of its framework's option names. The framework's validity rules (docs/frameworks.md
§2.3, §3.2-3.3, §4.1, §5, §7, including those the framework itself only catches at run time) are
in paraplan/rules/<name>.py, below the solver, and what each framework launches at all
(precisions, mixed-GPU clusters) in paraplan/rules/frameworks.py; exporters render only, and
raise those rules' refusals first.
A plan a target cannot express raises ``ExportError`` naming the nearest plan it can express and
that plan's modelled step time next to the original's; nothing is ever dropped silently.

This package's shared parts, one concern a module: ``registry`` (target -> module, file),
``context`` (the Result with its model, cluster and job; plan summary), ``rules`` (``enforce``:
the nearest expressible plan, scored), ``output`` (headers, pool lines) and ``results``
(reading a result file). This module is the entry point: ``export``, ``export_text``,
``write_exports``; it re-exports the shared names the exporters and tests use.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Sequence
from pathlib import Path

from paraplan.errors import ExportError
from paraplan.export.context import (
    ExportContext,
    context,
    effective_order,
    order_matches,
    plan_summary,
    regroup,
    to_cost_plan,
    uniform_recompute,
)
from paraplan.export.output import comment_block, header_lines, pool_lines
from paraplan.export.registry import EXPORTERS, TRACE, Target, lookup
from paraplan.export.results import load_result
from paraplan.export.rules import enforce
from paraplan.result import Result
from paraplan.rules.frameworks import pool_refusal, precision_refusal

__all__ = [
    "EXPORTERS",
    "Target",
    "ExportContext",
    "export",
    "export_text",
    "render_target",
    "write_exports",
    "load_result",
    "context",
    "to_cost_plan",
    "plan_summary",
    "header_lines",
    "enforce",
    "effective_order",
    "order_matches",
    "regroup",
    "uniform_recompute",
    "comment_block",
    "pool_lines",
]


def _check_launch(ctx: ExportContext, name: str) -> None:
    """ExportError when framework ``name`` launches neither the cluster nor the precision
    (rules/frameworks.py; ``trace`` records any plan)."""
    if name == TRACE:
        return
    why = pool_refusal(name, ctx.cluster, ctx.plan.stage_pools) or precision_refusal(name, ctx.precision)
    if why is not None:
        raise ExportError(why)


def _render(ctx: ExportContext, target: Target) -> str:
    key = next(k for k, t in EXPORTERS.items() if t == target)
    _check_launch(ctx, key)
    module = importlib.import_module(target.module)
    try:
        text: str = module.render(ctx)
    except ExportError as e:
        if key == TRACE or (ctx.result.solver and ctx.result.solver.target == key):
            raise
        raise ExportError(
            f"{e} For the fastest plan {key} can run, re-plan with solver.target: "
            f"{key} (paraplan plan --target {key})."
        ) from None
    return text if text.endswith("\n") else text + "\n"


def render_target(ctx: ExportContext, name: str) -> str:
    """The text of ``ctx``'s plan exported for target ``name``; ExportError if it cannot be."""
    return _render(ctx, lookup(name)[1])


def export_text(result: Result, name: str) -> str:
    """The text of ``result`` exported for target ``name``; ExportError if it cannot be. A serving
    result (``kind: serving``) goes to the serving exporters (paraplan/export/serving/)."""
    if _is_serving(result):
        from paraplan.export.serving import export_serving

        return export_serving(result, name)
    _, target = lookup(name)
    return _render(context(result), target)


def _is_serving(result: object) -> bool:
    from paraplan.export.serving.result import is_serving_result

    return is_serving_result(result)


def _write_serving(result: object, names: Sequence[str], out_dir: Path) -> list[Path]:
    """write_exports for a serving result: one file per serving target, refusals listed together."""
    from paraplan.export.serving import SERVING_TARGETS, export_serving

    keys = list(dict.fromkeys(n.strip().lower() for n in names if n.strip()))
    unknown = [k for k in keys if k not in SERVING_TARGETS]
    if unknown:
        raise ExportError(
            f"unknown serving export target {', '.join(unknown)}; choose one of {', '.join(SERVING_TARGETS)}"
        )
    texts, errors = {}, []
    for key in keys:
        try:
            texts[key] = export_serving(result, key)
        except ExportError as e:
            errors.append(f"{key}: {e}")
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for key, text in texts.items():
        path = out_dir / SERVING_TARGETS[key].filename
        path.write_text(text)
        paths.append(path)
    if errors:
        raise ExportError("; ".join(errors) + f" (wrote {', '.join(str(p) for p in paths) or 'nothing'})")
    return paths


def export(result: Result, name: str) -> str:
    """``paraplan.export(result, "megatron")``: same as ``export_text``."""
    return export_text(result, name)


def write_exports(result: Result, names: Sequence[str], out_dir: Path) -> list[Path]:
    """Write one file per target (plus ``trace.json``) into ``out_dir``; return their paths.

    Unknown names fail before anything is written. Targets that refuse the plan do not stop the
    others: their files are written, then one ExportError lists every refusal and what was written.
    A serving result writes the serving targets' files (vllm.sh, sglang.sh, trtllm.sh, dynamo.yaml).
    """
    if _is_serving(result):
        return _write_serving(result, names, out_dir)
    keys = list(dict.fromkeys(lookup(n)[0] for n in names if n.strip()))
    if TRACE not in keys:
        keys.append(TRACE)
    ctx = context(result)
    texts: dict[str, str] = {}
    errors: list[str] = []
    for key in keys:
        try:
            texts[key] = _render(ctx, EXPORTERS[key])
        except ExportError as e:
            errors.append(f"{key}: {e}")
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for key, text in texts.items():
        path = out_dir / EXPORTERS[key].filename
        path.write_text(text)
        paths.append(path)
    if errors:
        wrote = ", ".join(str(p) for p in paths) or "nothing"
        raise ExportError("; ".join(errors) + f" (wrote {wrote})")
    return paths


class _CallableModule(types.ModuleType):
    """Lets ``paraplan.export(result, "megatron")`` work while ``paraplan.export`` stays the
    package of exporters (the API the planner issue names)."""

    def __call__(self, result: Result, name: str) -> str:
        return export(result, name)


sys.modules[__name__].__class__ = _CallableModule
