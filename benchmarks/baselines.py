"""The planners the benchmark compares, all scored on paraplan's own cost model.

Scoring every plan with the same ``cost.evaluate`` means a step-time ratio compares *plans*, not
cost models. Each function takes a scenario dict (model, cluster, job and optional plan/solver
sections), plans once, and returns an :class:`Attempt`, a plain picklable record; the harness
runs each call in a child process with a hard deadline and takes the median wall time.

- ``paraplan``: ``paraplan.solve`` end to end, as a user calls it;
- ``uniform`` / ``fixed_placement``: the same solve without uneven layer splits
  (``solver.allow_uneven_stages: false``) or without the rank-order search
  (``solver.search_placement: false``), to show what each freedom buys;
- ``exhaustive``: ``paraplan.solver.enumerate.enumerate_plans`` over the same (unpruned) space,
  stopped at a budget;
- ``rule_of_thumb``: the Megatron-style recipe (:func:`rule_of_thumb`);
- ``published``: the expert configuration of a calibration-set run (:func:`published`).
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from paraplan.cost import DEFAULT_ORDER, Layout, Plan, Recompute
from paraplan.cost.plan import PartialPlan, pipeline_slots
from paraplan.solver import Options, layouts
from paraplan.solver.enumerate import EnumerationBudgetExceeded, enumerate_plans
from paraplan.solver.space import divisors

import paraplan
from benchmarks.calibration_set import Case
from benchmarks.fidelity import evaluate_case
from paraplan.api import evaluate_plan, fixed_knobs, search_options
from paraplan.instance import Instance, build_instance, even_split
from paraplan.result import Result

__all__ = [
    "Method",
    "Outcome",
    "Attempt",
    "solve",
    "exhaustive",
    "rule_of_thumb",
    "published",
    "space_size",
    "outside_space",
    "enumeration_estimate_s",
    "RULE_MAX_TP",
]

RULE_MAX_TP = 8  # Megatron recipes keep TP inside one 8-GPU baseboard, NVL72 racks included
_SOLVER_OVERRIDES = {
    "paraplan": {},
    "uniform": {"allow_uneven_stages": False},
    "fixed_placement": {"search_placement": False},
}


class Method(StrEnum):
    PARAPLAN = "paraplan"
    UNIFORM = "uniform"
    FIXED_PLACEMENT = "fixed_placement"
    EXHAUSTIVE = "exhaustive"
    RULE_OF_THUMB = "rule_of_thumb"
    PUBLISHED = "published"


class Outcome(StrEnum):
    PLAN = "plan"  # a plan that fits memory
    NO_PLAN = "no plan"  # proven: nothing in the space (or the recipe) fits
    NOT_FINISHED = "not finished"  # budget or time limit ran out without a plan
    UNFIT = "does not fit"  # a given plan (published) that the model says overflows memory
    ERROR = "error"


@dataclass(frozen=True, slots=True, kw_only=True)
class Attempt:
    """One planning attempt. ``step_time_s`` is the modelled step time of the plan it returns."""

    method: str
    outcome: Outcome
    wall_s: float
    step_time_s: float | None = None
    solver_status: str = ""
    gap: float | None = None
    plan: dict[str, Any] | None = None
    stages: list[dict[str, Any]] | None = None  # memory and time per pipeline stage
    capacity_bytes: float | None = None
    num_layouts: int | None = None
    num_plans: int | None = None  # plans enumerated (exhaustive), finished or not
    space_size: int | None = None  # complete plans in the unpruned space
    detail: str = ""
    wall_runs_s: tuple[float, ...] = field(default=())

    @property
    def has_plan(self) -> bool:
        return self.step_time_s is not None


def _from_result(method: str, r: Result, wall_s: float) -> Attempt:
    s = r.solver
    return Attempt(
        method=method,
        outcome=Outcome.PLAN,
        wall_s=wall_s,
        step_time_s=r.predicted.step_time_s,
        solver_status=s.status if s else "",
        gap=s.gap if s else None,
        plan=r.plan.model_dump(),
        stages=[st.model_dump() for st in r.predicted.stages],
        capacity_bytes=r.predicted.memory_capacity_bytes,
        num_layouts=s.num_layouts if s else None,
    )


def solve(
    scenario: dict[str, Any],
    method: str = Method.PARAPLAN,
    *,
    time_limit_s: float,
    workers: int = 2,
    seed: int = 0,
) -> Attempt:
    """``paraplan.solve`` with the method's solver options (paraplan, uniform, fixed_placement)."""
    solver = {**scenario.get("solver", {}), **_SOLVER_OVERRIDES[method]}
    sc = {**scenario, "solver": solver} if solver else scenario
    start = time.perf_counter()
    try:
        # the search alone: no second search for the explanation's plan with more headroom
        r = paraplan.solve(sc, time_limit_s=time_limit_s, workers=workers, seed=seed, more_headroom=False)
    except paraplan.InfeasibleError as e:
        return Attempt(
            method=method,
            outcome=Outcome.NO_PLAN,
            wall_s=time.perf_counter() - start,
            solver_status="INFEASIBLE",
            detail=str(e).splitlines()[0],
        )
    except paraplan.SolveTimeout as e:
        return Attempt(
            method=method,
            outcome=Outcome.NOT_FINISHED,
            wall_s=time.perf_counter() - start,
            solver_status="TIMEOUT",
            detail=str(e),
        )
    return _from_result(method, r, time.perf_counter() - start)


def _num_splits(num_layers: int, layout: Layout, fixed: PartialPlan, options: Options) -> int:
    """Layer splits the enumerator visits for one layout (mirrors its rules, checked by the
    harness against ``Enumeration.num_plans``)."""
    pp, vp = layout.pp, layout.vp
    slots = pipeline_slots(num_layers, pp, vp)
    if slots is None:
        return 0
    if fixed.layers_per_stage is not None:
        return int(
            len(fixed.layers_per_stage) == pp
            and all(
                (n + sl) % vp == 0 and n + sl >= vp * (1 + sl)
                for n, sl in zip(fixed.layers_per_stage, slots, strict=True)
            )
        )
    k_total = (num_layers + sum(slots)) // vp
    if not options.allow_uneven_stages:
        return int(k_total % pp == 0 and all(k_total // pp >= 1 + sl for sl in slots))
    free = k_total - sum(slots)  # units left once each stage has its least k = 1 + slot
    return math.comb(free - 1, pp - 1) if free >= pp else 0


def _num_modes(pp: int, fixed: PartialPlan) -> int:
    if fixed.recompute is None:
        return len(Recompute) ** pp
    return int(len(fixed.recompute) == pp or len(set(fixed.recompute)) == 1)


def space_size(scenario: dict[str, Any]) -> int:
    """Complete plans (layout x layer split x recompute per stage) in the unpruned space."""
    inst = build_instance(paraplan.load_scenario(scenario), search=True)
    fixed, options, job = fixed_knobs(inst), search_options(inst), inst.job
    total = 0
    for layout in layouts(
        inst.spec, inst.cluster, job.seq_len, job.global_batch, fixed, options, prune_dominated=False
    ):
        total += _num_splits(inst.spec.num_layers, layout, fixed, options) * _num_modes(layout.pp, fixed)
    return total


def exhaustive(scenario: dict[str, Any], budget_s: float) -> Attempt:
    """Brute force over the same space; NOT_FINISHED past ``budget_s`` (with the plans visited)."""
    size = space_size(scenario)
    start = time.perf_counter()
    inst = build_instance(paraplan.load_scenario(scenario), search=True)
    try:
        e = enumerate_plans(
            inst.graph, inst.cluster, inst.job, fixed_knobs(inst), search_options(inst), budget_s=budget_s
        )
    except EnumerationBudgetExceeded as exc:
        m = re.search(r"after (\d+) plans", str(exc))
        return Attempt(
            method=Method.EXHAUSTIVE,
            outcome=Outcome.NOT_FINISHED,
            wall_s=time.perf_counter() - start,
            space_size=size,
            num_plans=int(m.group(1)) if m else None,
            detail=str(exc),
        )
    wall = time.perf_counter() - start
    if e.best is None:
        return Attempt(
            method=Method.EXHAUSTIVE,
            outcome=Outcome.NO_PLAN,
            wall_s=wall,
            num_plans=e.num_plans,
            space_size=size,
        )
    r = evaluate_plan(inst, e.best)
    return Attempt(
        method=Method.EXHAUSTIVE,
        outcome=Outcome.PLAN,
        wall_s=wall,
        step_time_s=r.predicted.step_time_s,
        plan=r.plan.model_dump(),
        num_plans=e.num_plans,
        space_size=size,
    )


def _rule_tp(inst: Instance) -> int:
    """Largest TP within one baseboard (``RULE_MAX_TP``) that the heads and devices allow."""
    spec, n = inst.spec, inst.cluster.num_devices
    cap = min(inst.cluster.devices_per_node, RULE_MAX_TP)
    ok = [
        t
        for t in divisors(math.gcd(n, cap))
        if spec.num_heads % t == 0 and (spec.num_kv_heads % t == 0 or t % spec.num_kv_heads == 0)
    ]
    return max(ok)


def rule_of_thumb(scenario: dict[str, Any]) -> Attempt:
    """Megatron-style recipe: TP = GPUs per baseboard (capped by the heads), the smallest PP that
    fits, the rest DP; micro-batch 1, no interleaving or CP, distributed optimizer (ZeRO-1) when
    dp > 1, even layer split, default rank order; full recompute only when no recompute does not
    fit at that PP."""
    start = time.perf_counter()
    inst = build_instance(paraplan.load_scenario(scenario), search=True)
    n, num_layers, job = inst.cluster.num_devices, inst.spec.num_layers, inst.job
    tp = _rule_tp(inst)
    for pp in divisors(n // tp):
        dp = n // (tp * pp)
        if pp > num_layers or job.global_batch % dp:
            continue
        for mode in (Recompute.NONE, Recompute.FULL):
            plan = Plan(
                dp=dp,
                tp=tp,
                pp=pp,
                cp=1,
                vp=1,
                micro_batch=1,
                zero=1 if dp > 1 else 0,
                sequence_parallel=tp > 1,
                recompute=(mode,) * pp,
                layers_per_stage=even_split(num_layers, pp),
                order=DEFAULT_ORDER,
            )
            try:
                r = evaluate_plan(inst, plan)
            except paraplan.ConfigError:
                break
            if r.predicted.fits_memory:
                return _from_result(Method.RULE_OF_THUMB, r, time.perf_counter() - start)
    return Attempt(
        method=Method.RULE_OF_THUMB,
        outcome=Outcome.NO_PLAN,
        wall_s=time.perf_counter() - start,
        detail=f"no PP fits with tp={tp}",
    )


def outside_space(scenario: dict[str, Any]) -> str:
    """Why the scenario's fixed plan lies outside paraplan's search space ('' when inside)."""
    inst = build_instance(paraplan.load_scenario(scenario))
    p, o = inst.scenario.plan, inst.scenario.solver
    if p.micro_batch is not None and p.micro_batch > o.max_micro_batch:
        return f"micro_batch={p.micro_batch} > solver.max_micro_batch={o.max_micro_batch}"
    if p.vp is not None and p.vp > o.max_vp:
        return f"vp={p.vp} > solver.max_vp={o.max_vp}"
    fixed = replace(fixed_knobs(inst), recompute=None, layers_per_stage=None)
    job = inst.job
    if not layouts(
        inst.spec,
        inst.cluster,
        job.seq_len,
        job.global_batch,
        fixed,
        search_options(inst),
        prune_dominated=False,
    ):
        return "no layout of the search space matches it"
    return ""


def published(case: Case) -> Attempt:
    """The calibration run's own plan on the cost model (unknown recompute: fastest that fits)."""
    start = time.perf_counter()
    row = evaluate_case(case)
    wall = time.perf_counter() - start
    plan = {**case.scenario["plan"], **row.recompute_plan}
    return Attempt(
        method=Method.PUBLISHED,
        outcome=Outcome.PLAN if row.fits else Outcome.UNFIT,
        wall_s=wall,
        step_time_s=row.predicted_s,
        plan=plan,
        detail=outside_space(case.scenario),
    )


def enumeration_estimate_s(a: Attempt) -> float | None:
    """Time the enumeration would need for the whole space, at the rate it ran (plans/s)."""
    if a.outcome is Outcome.PLAN or a.outcome is Outcome.NO_PLAN:
        return a.wall_s
    if not a.num_plans or not a.space_size or a.wall_s <= 0:
        return None
    return a.space_size * a.wall_s / a.num_plans
