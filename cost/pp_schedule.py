"""Pipeline schedules (``plan.pp_schedule``): their bubble, in-flight activations, parameter
copies and what communication they hide. The one place these numbers live: cost/pp.py (bubble,
in-flight micro-batches), cost/memory.py (parameter copies), cost/block.py and stage_build.py
(hidden EP all-to-all and p2p) and the solver's objective read them from here.

Per rank, per micro-batch: F forward, B backward (input + weight gradients, recompute included),
W the weight-gradient part of B, F&B an overlapped forward + backward chunk pair; p ranks.
The DualPipe README's table (deepseek-ai/DualPipe, cited from memory: bubble / parameters per
device / activations per device, in micro-batches of one stage):

    1F1B       (p - 1)(F + B)               1x   p
    ZB1P       (p - 1)(F + B - 2W)          1x   p        (Qi et al. 2023, arXiv:2401.10241)
    DualPipe   (p/2 - 1)(F&B + B - 3W)      2x   p + 1    (p devices, p stages)
    DualPipeV  (p/2 - 1)(F&B + B - 3W)      2x   p + 1    (p/2 devices, p stages)

In paraplan's units (t = F + B of a rank's layers, ``bubble_s`` = weight x (sum_s t_s - max_s t_s))
the weight is 1/v for 1F1B and interleaved 1F1B (Narayanan et al. 2021), (1 - 2w)/v for ZB1P
(torch's ScheduleInterleavedZeroBubble runs it with v chunks), (p/2 - 1)/(p - 1) x (1 + b - 3w)
for DualPipe and (1 + b - 3w)/2 for DualPipeV (v = 2: p ranks run the table's 2p half-size
stages, so its (2p/2 - 1) chunk bubbles are (p - 1) half-rank times), with w = W / (F + B),
b = B / (F + B) and F&B taken as F + B (the pair hides communication, not compute).
Assumes: w and b from the layout's most common block without recompute; the weight is rounded
to 1/1000 so that the solver's integer objective and ``evaluate`` share it exactly.
"""

from __future__ import annotations

from enum import StrEnum
from fractions import Fraction
from functools import cache

__all__ = [
    "PPSchedule",
    "BUBBLE_QUANTUM",
    "implied_schedule",
    "resolved_schedule",
    "bubble_weight",
    "bubble_weight_floor",
    "held_stage_units",
    "parameter_copies",
    "hides_ep_comm",
    "hides_p2p",
    "paired_share",
    "schedule_rule",
    "rank_values",
    "micro_batch_rule",
]

BUBBLE_QUANTUM = 1000  # the bubble weight's denominator (times vp): exact in the solver's ticks


class PPSchedule(StrEnum):
    """The pipeline schedule: ``1f1b`` (vp = 1), ``interleaved`` (vp > 1), ``zb1p`` (zero bubble,
    any vp), ``dualpipe`` (bidirectional, two parameter copies, vp = 1), ``dualpipev`` (V-shape,
    vp = 2)."""

    ONE_F_ONE_B = "1f1b"
    INTERLEAVED = "interleaved"
    ZB1P = "zb1p"
    DUALPIPE = "dualpipe"
    DUALPIPEV = "dualpipev"


_DUAL = frozenset({PPSchedule.DUALPIPE, PPSchedule.DUALPIPEV})
_ONE_F_ONE_B = frozenset({PPSchedule.ONE_F_ONE_B, PPSchedule.INTERLEAVED})


def implied_schedule(vp: int) -> PPSchedule:
    """What a plan without ``pp_schedule`` runs: 1F1B, or interleaved 1F1B when vp > 1."""
    return PPSchedule.INTERLEAVED if vp > 1 else PPSchedule.ONE_F_ONE_B


@cache  # a pure function of two small values, asked of every layout family the search bounds
def resolved_schedule(schedule: PPSchedule | None, vp: int) -> PPSchedule:
    return implied_schedule(vp) if schedule is None else PPSchedule(schedule)


def schedule_rule(schedule: PPSchedule | None, pp: int, vp: int) -> str | None:
    """The structural rule ``schedule`` breaks with these degrees, as a message; None if none.
    Sources: torch 2.13 torch/distributed/pipelining/schedules.py (ScheduleZBVZeroBubble and
    ScheduleDualPipeV need exactly 2 stages per rank); DualPipe feeds micro-batches from both
    ends, so it pairs ranks s and p - 1 - s (even p; deepseek-ai/DualPipe, cited from memory)."""
    if schedule is None:
        return None
    schedule = PPSchedule(schedule)
    if schedule == PPSchedule.ONE_F_ONE_B and pp == 1 and vp == 1:
        return None
    if pp == 1:
        return f"plan.pp_schedule={schedule} needs pipeline parallelism (pp > 1); the plan has pp=1"
    need = {
        PPSchedule.ONE_F_ONE_B: (vp == 1, "vp=1 (interleaved runs vp > 1)"),
        PPSchedule.INTERLEAVED: (vp > 1, "vp > 1 (1f1b runs vp=1)"),
        PPSchedule.ZB1P: (True, ""),
        PPSchedule.DUALPIPE: (vp == 1 and pp % 2 == 0, "vp=1 and an even pp (ranks s and pp-1-s pair up)"),
        PPSchedule.DUALPIPEV: (vp == 2, "vp=2 (two V-placed chunks per rank)"),
    }
    ok, rule = need[schedule]
    return None if ok else f"plan.pp_schedule={schedule} needs {rule}; the plan has pp={pp}, vp={vp}"


def micro_batch_rule(schedule: PPSchedule | None, pp: int, num_micro_batches: int) -> str | None:
    """The micro-batch count a schedule needs, as a message; None if met. DualPipeV: m >= 2p
    (torch 2.13 ScheduleDualPipeV: "at least as many microbatches as stages"); DualPipe: an even
    m >= p, half fed from each end (deepseek-ai/DualPipe, cited from memory)."""
    m = num_micro_batches
    if schedule == PPSchedule.DUALPIPEV and m < 2 * pp:
        return (
            f"plan.pp_schedule=dualpipev needs at least 2*pp={2 * pp} micro-batches per step; "
            f"the plan has {m}"
        )
    if schedule == PPSchedule.DUALPIPE and (m < pp or m % 2):
        return (
            f"plan.pp_schedule=dualpipe needs an even micro-batch count of at least pp={pp}; the plan has {m}"
        )
    return None


def _factor(schedule: PPSchedule, pp: int, backward_share: float, wgrad_share: float) -> float:
    """The schedule's bubble over 1F1B's at the same vp (module docstring), at least 0."""
    if schedule == PPSchedule.ZB1P:
        return max(0.0, 1.0 - 2.0 * wgrad_share)
    pairs = max(0.0, 1.0 + backward_share - 3.0 * wgrad_share)
    if schedule == PPSchedule.DUALPIPE:
        return (pp / 2 - 1) / (pp - 1) * pairs if pp > 1 else 0.0
    if schedule == PPSchedule.DUALPIPEV:
        return pairs
    return 1.0


def bubble_weight(
    schedule: PPSchedule | None, pp: int, vp: int, backward_share: float, wgrad_share: float
) -> Fraction:
    """Weight of (sum_s t_s - max_s t_s) in the step (module docstring): 1/vp for 1F1B and
    interleaved; the zero-bubble and DualPipe factors times 1/vp, rounded to 1/(1000 vp).
    ``backward_share`` = B / (F + B), ``wgrad_share`` = W / (F + B)."""
    s = resolved_schedule(schedule, vp)
    if s in _ONE_F_ONE_B:
        return Fraction(1, vp)
    factor = _factor(s, pp, backward_share, wgrad_share)
    return Fraction(round(factor * BUBBLE_QUANTUM), BUBBLE_QUANTUM * vp)


@cache  # a pure function of two small values, asked of every layout family the search bounds
def bubble_weight_floor(schedule: PPSchedule | None, vp: int) -> float:
    """A lower bound on ``bubble_weight`` over every block (for step-time floors before the
    block costs are known): 1/vp for 1F1B and interleaved, 0 for the others."""
    s = resolved_schedule(schedule, vp)
    return 1.0 / vp if s in (PPSchedule.ONE_F_ONE_B, PPSchedule.INTERLEAVED) else 0.0


def held_stage_units(
    schedule: PPSchedule | None, stage: int, pp: int, vp: int, num_micro_batches: int
) -> float:
    """Micro-batches of a rank's activations held at its peak (before interleaving's factor and
    the EP overlap's extra micro-batch, cost/pp.py in_flight_micro_batches): 1F1B, interleaved
    and ZB1P min(m, p - s); DualPipe min(m, p + 1) on every rank; DualPipeV the table's p' + 1
    half-size stages of p' = 2p, i.e. min(m, p + 1/2) rank units (module docstring)."""
    s = resolved_schedule(schedule, vp)
    if s == PPSchedule.DUALPIPE:
        return float(min(num_micro_batches, pp + 1))
    if s == PPSchedule.DUALPIPEV:
        return min(float(num_micro_batches), pp + 0.5)
    return float(min(num_micro_batches, pp - stage))


def parameter_copies(schedule: PPSchedule | None) -> int:
    """Copies of its stage's model state a rank keeps: 2 under DualPipe (rank s also runs stage
    p - 1 - s for the reverse direction; DeepSeek-V3 report, arXiv:2412.19437 Sec. 3.2.1), else 1.
    Assumes: the all-reduce between the two copies' gradients is not costed."""
    return 2 if schedule == PPSchedule.DUALPIPE else 1


def rank_values(schedule: PPSchedule | None, stage_values: list[float], mean: bool) -> list[float]:
    """Per-stage values as each rank sees them. DualPipe: rank s runs stage s for one direction
    and stage p - 1 - s for the other, half the micro-batches each (arXiv:2412.19437 Sec. 3.2.1),
    so its time per micro-batch is the pair's mean (``mean``) and its once-per-step terms (DP
    sync left exposed, optimizer) the pair's sum. Other schedules: unchanged.
    Assumes: the two stages' exposed syncs add (neither hides under the other's backward)."""
    if schedule != PPSchedule.DUALPIPE:
        return list(stage_values)
    p = len(stage_values)
    pair = [stage_values[s] + stage_values[p - 1 - s] for s in range(p)]
    return [v / 2 for v in pair] if mean else pair


def hides_ep_comm(schedule: PPSchedule | None) -> bool:
    """DualPipe and DualPipeV run each forward chunk beside another micro-batch's backward chunk
    and hide the EP dispatch and combine under them (arXiv:2412.19437 Sec. 3.2.1, Fig. 4): the
    same pairing as Megatron's 1F1B EP overlap (cost/ep.py ep_exposed_s)."""
    return schedule in _DUAL


def hides_p2p(schedule: PPSchedule | None) -> bool:
    """DualPipe's pairs hide the pipeline's point-to-point sends too ("both all-to-all and PP
    communication can be fully hidden", arXiv:2412.19437 Sec. 3.2.1)."""
    return schedule in _DUAL


def paired_share(pp: int, num_micro_batches: int) -> float:
    """Share of a rank's forward and backward chunks that DualPipe runs as overlapped pairs:
    1 - p / (2m) (each rank runs 2m chunks; about p of them, the warm-up forwards and the
    cool-down backwards, have no partner; deepseek-ai/DualPipe's schedule, cited from memory).
    Dimensionless, in [0, 1]."""
    m = max(1, num_micro_batches)
    return max(0.0, 1.0 - pp / (2 * m))
