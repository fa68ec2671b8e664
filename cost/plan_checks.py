"""The rules a plan breaks on its own, whatever the model (cost/plan.py's Layout checks itself with
``check_structure`` on construction; cost/validity.py ``check_plan`` judges it against a model, job and
cluster). Each raises ValueError naming the knob, the values and the rule."""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import TYPE_CHECKING

from paraplan.cost.knobs import Axis, Recompute
from paraplan.cost.pp_schedule import PPSchedule

if TYPE_CHECKING:
    from paraplan.cost.plan import Layout

__all__ = ["check_structure", "check_recompute_layers", "check_order", "check_expert_tp", "show_divisors"]

_SCHEDULES = tuple(s.value for s in PPSchedule)
_POSITIVE = ("dp", "tp", "pp", "cp", "ep", "vp", "micro_batch")
_positives = attrgetter(*_POSITIVE)  # read in C: every Layout the search builds is checked
_AXES = frozenset(Axis)


def check_structure(plan: Layout) -> None:
    """The rules a layout (and so a plan) breaks on its own, whatever the model: degrees and micro-batch >= 1,
    ZeRO stage 0-3, a rank order naming each axis once, etp 1 or tp. ValueError names the knob,
    the values and the rule. (Interleaving needs pp > 1 is check_plan's: a pool's share of a
    pipeline, cost/pools.py, is a Plan of that many stages; so is what pp and vp a pipeline
    schedule needs, so that a rule's repair of pp or vp builds a plan that check_plan judges.)"""
    if min(_positives(plan)) < 1:
        name = next(n for n in _POSITIVE if getattr(plan, n) < 1)
        raise ValueError(f"plan.{name}={getattr(plan, name)} must be at least 1")
    if plan.zero not in (0, 1, 2, 3):
        raise ValueError(f"plan.zero={plan.zero} must be 0, 1, 2 or 3")
    if plan.pp_schedule is not None and plan.pp_schedule not in _SCHEDULES:
        raise ValueError(f"plan.pp_schedule={plan.pp_schedule!r} must be one of {', '.join(_SCHEDULES)}")
    check_order(plan.order)
    check_expert_tp(plan.etp, plan.tp)


def check_recompute_layers(counts: Sequence[int], modes: Sequence[Recompute], pp: int) -> None:
    """``plan.recompute_layers``: empty, or one count per pp rank, at least 1 where the stage's
    recompute is full (its first N layers of each chunk are recomputed) and 0 elsewhere (a stage
    that does not recompute full has no layers to choose)."""
    if not counts:
        return
    if len(counts) != pp:
        raise ValueError(
            f"plan.recompute_layers={list(counts)} lists {len(counts)} stages; give one count per "
            f"pipeline stage (pp={pp}) or leave it empty (every layer of a full-recompute stage)"
        )
    per_stage = tuple(modes) if len(modes) == pp else (tuple(modes[:1]) * pp)
    for s, (n, mode) in enumerate(zip(counts, per_stage, strict=True)):
        if mode is Recompute.FULL and n < 1:
            raise ValueError(
                f"plan.recompute_layers[{s}]={n} must be at least 1 on a stage whose recompute "
                "is full (the layers of each chunk recomputed); for none write plan.recompute=none"
            )
        if mode is not Recompute.FULL and n != 0:
            raise ValueError(
                f"plan.recompute_layers[{s}]={n} must be 0: stage {s} recomputes "
                f"{mode.value}, and only full recompute takes a number of layers"
            )


def check_order(order: Sequence[Axis]) -> None:
    """A rank order names tp, cp, dp and pp once each, innermost first."""
    if len(order) != len(_AXES) or set(order) != _AXES:
        raise ValueError(
            f"plan.order={[str(a) for a in order]} must be a permutation of "
            "tp, cp, dp, pp (every axis once, innermost first)"
        )


def check_expert_tp(etp: int | None, tp: int | None) -> None:
    """Expert tensor parallelism either shards each expert like the dense layers (etp = tp) or
    not at all (etp = 1); None means tp."""
    if etp is not None and tp is not None and etp not in (1, tp):
        raise ValueError(
            f"plan.etp={etp} must be 1 or tp={tp} (expert tensor parallelism either "
            "shards each expert like the dense layers or not at all; other degrees are not "
            "modelled)"
        )


def show_divisors(n: int) -> str:
    """The divisors of ``n``, ascending, for a message: ``1, 2, 4, 8``."""
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)
