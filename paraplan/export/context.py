"""What an exporter renders from: a Result with the model, cluster and job its scenario describes,
and plan helpers every exporter shares (summary line, effective rank order, regrouping)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from paraplan.cost import Axis, CPComm, Plan, Precision, Recompute
from paraplan.cost.plan import even_split
from paraplan.errors import ConfigError
from paraplan.graph import ModelSpec
from paraplan.hardware import Cluster
from paraplan.instance import Instance, build_instance
from paraplan.result import PlanOut, Result, evaluate_plan
from paraplan.schema import load_scenario

if TYPE_CHECKING:
    from paraplan.export.rules import Draft

__all__ = ["ExportContext", "context", "planning_context", "to_cost_plan", "uniform_recompute",
           "plan_summary", "effective_order", "order_matches", "regroup"]


@dataclass
class ExportContext:
    """A Result with the model, cluster and job its scenario describes.

    ``plan`` is the Result's plan as the cost model's ``Plan``; ``score`` evaluates another plan
    on the same scenario (optionally at another precision) for nearest-plan messages. While
    planning (``planning_context``) there is no Result and no plan: only rules run on it.
    """

    result: Result
    inst: Instance
    plan: Plan
    _scored: dict[tuple[Plan, str], Result | None] = field(default_factory=dict, repr=False)
    _instances: dict[str, Instance] = field(default_factory=dict, repr=False)
    _scenario: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def spec(self) -> ModelSpec:
        return self.inst.spec

    @property
    def scenario(self) -> dict[str, Any]:
        """The scenario as a dict (the Result's; while planning, the instance's)."""
        if self._scenario is None:
            self._scenario = (self.result.scenario if self.result is not None else
                              self.inst.scenario.model_dump(mode="json", exclude_none=True))
        return self._scenario

    @property
    def cluster(self) -> Cluster:
        return self.inst.cluster

    @property
    def precision(self) -> Precision:
        return self.inst.job.precision

    @property
    def step_time_s(self) -> float:
        return self.result.predicted.step_time_s

    def instance_for(self, precision: Precision) -> Instance:
        """The scenario's instance, with the job's precision replaced."""
        if precision == self.precision:
            return self.inst
        if precision.value not in self._instances:
            data = dict(self.scenario)
            data["job"] = {**data["job"], "precision": precision.value}
            self._instances[precision.value] = build_instance(load_scenario(data))
        return self._instances[precision.value]

    def score(self, draft: Draft) -> Result | None:
        """The modelled Result of ``draft``, or None when it breaks one of paraplan's own rules."""
        key = (draft.plan, draft.precision.value)
        if key not in self._scored:
            try:
                self._scored[key] = evaluate_plan(self.instance_for(draft.precision), draft.plan)
            except ConfigError:
                self._scored[key] = None
        return self._scored[key]


def to_cost_plan(plan: PlanOut) -> Plan:
    """The cost model's ``Plan`` for a Result's plan (one recompute mode per pp rank)."""
    return Plan(
        dp=plan.dp, tp=plan.tp, pp=plan.pp, cp=plan.cp, ep=plan.ep, etp=plan.etp,
        cp_comm=CPComm(plan.cp_comm), vp=plan.vp,
        micro_batch=plan.micro_batch, zero=plan.zero, sequence_parallel=plan.sequence_parallel,
        recompute=tuple(Recompute(r) for r in plan.recompute_per_stage),
        layers_per_stage=tuple(plan.layers_per_stage),
        layers_per_chunk=tuple(tuple(r) for r in plan.layers_per_chunk),
        order=tuple(Axis(a) for a in plan.order),
        stage_pools=tuple(plan.stage_pools),
        torus_shape=tuple(plan.torus_shape),
    )


def context(result: Result) -> ExportContext:
    """Rebuild the scenario behind ``result``; ConfigError if it no longer loads."""
    inst = build_instance(load_scenario(result.scenario))
    return ExportContext(result=result, inst=inst, plan=to_cost_plan(result.plan))



def uniform_recompute(plan: Plan) -> Recompute | None:
    """The plan's recompute mode when every stage uses the same one, else None."""
    modes = set(plan.recompute)
    return next(iter(modes)) if len(modes) == 1 else None


def plan_summary(plan: Plan) -> str:
    """One line naming every knob, e.g. ``dp=2 tp=4 pp=4 cp=2 vp=5 micro_batch=1 zero=1 ...``."""
    mode = uniform_recompute(plan)
    recompute = mode.value if mode else ",".join(r.value for r in plan.recompute)
    parts = [f"dp={plan.dp}", f"tp={plan.tp}", f"pp={plan.pp}", f"cp={plan.cp}"]
    if plan.cp > 1:
        parts.append(f"cp_comm={plan.cp_comm.value}")
    if plan.ep > 1:
        parts.append(f"ep={plan.ep}")
    if plan.etp is not None and plan.etp != plan.tp:
        parts.append(f"etp={plan.etp}")
    parts += [
        f"vp={plan.vp}", f"micro_batch={plan.micro_batch}", f"zero={plan.zero}",
        f"sequence_parallel={'on' if plan.sequence_parallel else 'off'}",
        f"recompute={recompute}",
        f"layers_per_stage={list(plan.layers_per_stage)}",
        f"order={'-'.join(a.value for a in plan.order)}",
    ]
    if plan.stage_pools:
        parts.append(f"stage_pools={list(plan.stage_pools)}")
    return " ".join(parts)


def effective_order(plan: Plan) -> tuple[Axis, ...]:
    """Rank order without the axes of degree 1 (those do not change any group), innermost first."""
    return tuple(a for a in plan.order if plan.degree(a) > 1)


def order_matches(plan: Plan, framework_order: Sequence[Axis]) -> bool:
    """Whether the plan places ranks as a framework with ``framework_order`` does."""
    wanted = tuple(a for a in framework_order if plan.degree(a) > 1)
    return effective_order(plan) == wanted


def regroup(plan: Plan, **degrees: int) -> Plan | None:
    """``plan`` with some of tp/pp/cp changed and dp absorbing the difference (same devices).

    Returns None when the device count does not divide. A new pp gets an even layer split and
    vp=1; per-stage recompute collapses to the plan's most memory-saving mode.
    """
    new = replace(plan, **degrees)
    fixed = new.tp * new.pp * new.cp
    if plan.num_devices % fixed:
        return None
    new = replace(new, dp=plan.num_devices // fixed)
    if new.pp != plan.pp:
        num_layers = sum(plan.layers_per_stage)
        if num_layers < new.pp:
            return None
        split = even_split(num_layers, new.pp)
        strongest = max(plan.recompute, key=list(Recompute).index)
        new = replace(new, vp=1, layers_per_stage=split, recompute=(strongest,) * new.pp)
    return new


def planning_context(inst: Instance) -> ExportContext:
    """A context for checking rules while planning: no Result and no plan yet."""
    return ExportContext(result=None, inst=inst, plan=None)  # type: ignore[arg-type]
