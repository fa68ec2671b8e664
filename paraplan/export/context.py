"""What an exporter renders from: a Result with the model, cluster and job its scenario describes,
and plan helpers every exporter shares (summary line, effective rank order, regrouping)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from paraplan.cost import Plan, Precision
from paraplan.errors import ConfigError
from paraplan.graph import ModelSpec
from paraplan.hardware import Cluster
from paraplan.instance import Instance, build_instance
from paraplan.result import Result, evaluate_plan
from paraplan.rules import Draft, RuleContext, effective_order, order_matches, regroup, uniform_recompute
from paraplan.scenario.plan_doc import PlanDoc, plan_of
from paraplan.scenario.schema import load_scenario

__all__ = [
    "ExportContext",
    "context",
    "to_cost_plan",
    "uniform_recompute",
    "plan_summary",
    "effective_order",
    "order_matches",
    "regroup",
]


@dataclass
class ExportContext:
    """A Result with the model, cluster and job its scenario describes.

    ``plan`` is the Result's plan as the cost model's ``Plan``; ``score`` evaluates another plan
    on the same scenario (optionally at another precision) for nearest-plan messages;
    ``rule_context`` is what the framework rules (paraplan.rules) read.
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
        """The scenario as a dict (the Result's)."""
        if self._scenario is None:
            self._scenario = self.result.scenario
        return self._scenario

    @property
    def rule_context(self) -> RuleContext:
        """The model, job and cluster, as the framework rules take them."""
        return RuleContext(
            self.inst.spec, self.inst.job, self.inst.cluster, self.scenario.get("model", {}).get("preset")
        )

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


def to_cost_plan(plan: PlanDoc) -> Plan:
    """The cost model's ``Plan`` for a Result's plan (paraplan.scenario.plan_doc.plan_of)."""
    return plan_of(plan)


def context(result: Result) -> ExportContext:
    """Rebuild the scenario behind ``result``; ConfigError if it no longer loads."""
    inst = build_instance(load_scenario(result.scenario))
    return ExportContext(result=result, inst=inst, plan=to_cost_plan(result.plan))


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
        f"vp={plan.vp}",
        f"micro_batch={plan.micro_batch}",
        f"zero={plan.zero}",
        f"sequence_parallel={'on' if plan.sequence_parallel else 'off'}",
        f"recompute={recompute}",
        f"layers_per_stage={list(plan.layers_per_stage)}",
        f"order={'-'.join(a.value for a in plan.order)}",
    ]
    if plan.stage_pools:
        parts.append(f"stage_pools={list(plan.stage_pools)}")
    return " ".join(parts)
