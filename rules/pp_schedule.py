"""Which pipeline schedules (``plan.pp_schedule``, cost/pp_schedule.py) each framework runs, and
the refusal of the rest by name.

Sources:
- torch 2.13 ``torch.distributed.pipelining.schedules.get_schedule_class`` names 1F1B,
  Interleaved1F1B, GPipe, LoopedBFS, InterleavedZeroBubble (ZB1P, arXiv:2401.10241),
  ZBVZeroBubble and DualPipeV (exactly 2 stages per rank, V placement); no bidirectional DualPipe.
- torchtitan 0.3.0 ``parallelism.pipeline_parallel_schedule`` takes those names
  (torchtitan/distributed/pipeline_parallel.py: a multi-stage schedule needs at least 2 stages
  per rank, the V schedules exactly 2), so ZB1P runs there with vp >= 2 as
  ``InterleavedZeroBubble`` and DualPipeV with vp = 2 as ``DualPipeV``.
- megatron-core 0.16.1 / 0.19.2 ``pipeline_parallel/schedules.py`` runs 1F1B and, with virtual
  stages, interleaved 1F1B (``forward_backward_pipelining_with/without_interleaving``); NeMo /
  Megatron-Bridge run Megatron's. DeepSpeed's pipeline engine runs its own 1F1B TrainSchedule;
  MaxText its (circular) pipeline; paraplan's torch exporter writes Schedule1F1B or
  ScheduleInterleaved1F1B only.
- DualPipe itself (deepseek-ai/DualPipe) is a standalone implementation none of paraplan's
  targets runs: a plan with it is evaluated, not exported.
"""

from __future__ import annotations

from dataclasses import replace

from paraplan.cost.pp_schedule import PPSchedule
from paraplan.rules.base import Draft, Refusal, Rule, RuleContext, repair
from paraplan.rules.frameworks import FRAMEWORKS

__all__ = ["RUNS", "TORCHTITAN_NAMES", "runs_schedule", "schedule_refusal_rule", "searched_schedules"]

_IMPLIED = frozenset({PPSchedule.ONE_F_ONE_B, PPSchedule.INTERLEAVED})

RUNS: dict[str, frozenset[PPSchedule]] = {
    "megatron": _IMPLIED,
    "nemo": _IMPLIED,
    "deepspeed": _IMPLIED,  # its vp rules refuse interleaving (rules/deepspeed.py)
    "torchtitan": _IMPLIED | {PPSchedule.ZB1P, PPSchedule.DUALPIPEV},
    "maxtext": _IMPLIED,
    "torch": _IMPLIED,
}
"""The schedules each framework runs (module docstring); the schedule vp implies always."""
if tuple(RUNS) != FRAMEWORKS:
    raise TypeError(f"pp_schedule.RUNS must list the frameworks {FRAMEWORKS}; lists {tuple(RUNS)}")

TORCHTITAN_NAMES: dict[PPSchedule, str] = {
    PPSchedule.ONE_F_ONE_B: "1F1B",
    PPSchedule.INTERLEAVED: "Interleaved1F1B",
    PPSchedule.ZB1P: "InterleavedZeroBubble",
    PPSchedule.DUALPIPEV: "DualPipeV",
}
"""torchtitan's ``parallelism.pipeline_parallel_schedule`` value of each schedule it runs
(torch 2.13 get_schedule_class names)."""


def runs_schedule(framework: str, schedule: PPSchedule | None, vp: int) -> bool:
    """Whether ``framework`` runs ``schedule`` (None: what vp implies) at this vp."""
    if schedule is None or schedule in _IMPLIED:
        return True
    if schedule not in RUNS[framework]:
        return False
    return not (framework == "torchtitan" and schedule == PPSchedule.ZB1P and vp < 2)


def searched_schedules(framework: str) -> tuple[PPSchedule, ...]:
    """The schedules beyond the implied one that the search tries for ``framework``."""
    return tuple(s for s in PPSchedule if s in RUNS[framework] and s not in _IMPLIED)


def schedule_refusal_rule(framework: str) -> Rule:
    """``framework``'s pp_schedule rule: a schedule it does not run is refused by name, with the
    implied schedule as the repair."""

    def check_pp_schedule(ctx: RuleContext, draft: Draft) -> Refusal | None:
        p = draft.plan
        if runs_schedule(framework, p.pp_schedule, p.vp):
            return None
        assert p.pp_schedule is not None  # runs_schedule passes None
        schedule = PPSchedule(p.pp_schedule)
        others = [n for n in FRAMEWORKS if runs_schedule(n, schedule, p.vp)]
        fix = repair("pp_schedule -> unset (1f1b / interleaved)", draft, replace(p, pp_schedule=None))
        if framework == "torchtitan" and schedule == PPSchedule.ZB1P:
            why = "InterleavedZeroBubble is a multi-stage schedule: it needs vp >= 2"
        else:
            why = f"{framework} has no {schedule.value} schedule"
        return Refusal(
            f"plan.pp_schedule={schedule.value} (vp={p.vp}): {why}; run by: "
            + (", ".join(others) or "none of paraplan's targets (evaluate it with `paraplan evaluate`)"),
            fix,
        )

    check_pp_schedule.__name__ = "check_pp_schedule"
    return check_pp_schedule
