"""Exporters: a planned Result rendered for the framework that will run it.

Each target lives in its own module (``megatron``, ``deepspeed``, ``torchtitan``, ``maxtext``,
``nemo``, ``torch``, ``trace``) with a ``render(ctx) -> str`` function, one mapping table of its
framework's option names, and a ``RULES`` tuple: that framework's validity rules (docs/frameworks.md
§2.3, §3.2-3.3, §4.1, §5, §7), including those the framework itself only catches at run time.
A plan a target cannot express raises ``ExportError`` naming the nearest plan it can express and
that plan's modelled step time next to the original's; nothing is ever dropped silently.

This module holds what the exporters share: the registry, the export context (the Result plus
the model, cluster and job rebuilt from its scenario), the rule/repair machinery that finds the
nearest expressible plan, and the header every output carries.
"""

from __future__ import annotations

import importlib
import json
import sys
import types
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import ValidationError

from paraplan.cost import Axis, CPComm, Plan, Precision, Recompute
from paraplan.errors import ConfigError, ExportError
from paraplan.graph import ModelSpec
from paraplan.hardware import Cluster
from paraplan.instance import Instance, build_instance
from paraplan.result import PlanOut, Result, evaluate_plan, paraplan_version
from paraplan.schema import load_scenario

__all__ = [
    "EXPORTERS", "Target", "ExportContext", "Draft", "Fix", "Refusal", "Rule",
    "export", "export_text", "write_exports", "load_result", "context", "to_cost_plan",
    "plan_summary", "header_lines", "enforce", "effective_order", "order_matches",
    "order_fixes", "recompute_fixes", "regroup", "repair", "uniform_recompute", "comment_block",
    "first_refusal", "check_dense_model", "check_no_expert_parallel", "check_expert_tp_is_tp",
    "uniform_recompute_rule", "micro_batch_repairs",
    "POOLED_TARGETS", "pool_lines", "SearchLimits", "TargetRules", "target_rules", "planning_context",
]

MAX_REPAIR_DEPTH = 3  # rule repairs chained when searching the nearest expressible plan
ERROR_PREVIEW = 5  # validation errors quoted when a result file is rejected


class Target(NamedTuple):
    """An export target: the module that renders it and the file ``write_exports`` writes."""

    module: str
    filename: str


EXPORTERS: dict[str, Target] = {
    "megatron": Target("paraplan.export.megatron", "megatron.sh"),
    "deepspeed": Target("paraplan.export.deepspeed", "deepspeed.json"),
    "torchtitan": Target("paraplan.export.torchtitan", "torchtitan.sh"),
    "maxtext": Target("paraplan.export.maxtext", "maxtext.yml"),  # MaxText reads only .yml
    "nemo": Target("paraplan.export.nemo", "nemo.py"),
    "torch": Target("paraplan.export.torch", "torch_plan.py"),
    "trace": Target("paraplan.export.trace", "trace.json"),
}
"""Target name -> (module with ``render(ctx) -> str``, output file name)."""


# --------------------------------------------------------------------------- context


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


# --------------------------------------------------------------------------- search limits


@dataclass(frozen=True, slots=True)
class SearchLimits:
    """What solver.target needs beyond a target's RULES, which are checked on each layout with
    an even split and one recompute mode: how the per-stage choices the CP-SAT model makes may
    vary. ``even_stages``: every stage holds the same number of layers; ``recompute_modes``: the
    modes the framework has (None: all); ``stage_split(layers, pp, vp)``: the one split the
    framework builds itself (None: it cannot), when it takes no layer counts."""

    uniform_recompute: bool = True
    even_stages: bool = False
    recompute_modes: tuple[Recompute, ...] | None = None
    stage_split: Callable[[int, int, int], tuple[int, ...] | None] | None = None


class TargetRules(NamedTuple):
    """What solver.target takes from an exporter module: ``RULES``, ``SEARCH`` and
    ``MODEL_RULES`` (those of RULES that read only the model and job, so one check decides)."""

    rules: tuple[Rule, ...]
    search: SearchLimits
    model_rules: tuple[Rule, ...]


def target_rules(name: str) -> TargetRules:
    """The rules and search limits of target ``name``; ExportError if unknown."""
    _, target = _target(name)
    module = importlib.import_module(target.module)
    return TargetRules(tuple(module.RULES), module.SEARCH, tuple(module.MODEL_RULES))


def planning_context(inst: Instance) -> ExportContext:
    """A context for checking rules while planning: no Result and no plan yet."""
    return ExportContext(result=None, inst=inst, plan=None)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- plan helpers


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
        base, extra = divmod(num_layers, new.pp)
        split = tuple(base + (1 if s < extra else 0) for s in range(new.pp))
        strongest = max(plan.recompute, key=list(Recompute).index)
        new = replace(new, vp=1, layers_per_stage=split, recompute=(strongest,) * new.pp)
    return new


# --------------------------------------------------------------------------- rules and repairs


@dataclass(frozen=True, slots=True)
class Draft:
    """A plan under consideration, with the job precision it would run at."""

    plan: Plan
    precision: Precision


@dataclass(frozen=True, slots=True)
class Fix:
    """One way to repair a refused plan: what changes, and the resulting draft."""

    change: str
    draft: Draft


@dataclass(frozen=True, slots=True)
class Refusal:
    """A rule the target's framework would break: the rule with its values, and repairs."""

    rule: str
    fixes: tuple[Fix, ...] = ()


Rule = Callable[[ExportContext, Draft], Refusal | None]
"""A framework rule: None when the draft passes, else the Refusal naming values and rule."""


def repair(change: str, draft: Draft, plan: Plan | None) -> tuple[Fix, ...]:
    """A one-element fix tuple when ``plan`` exists (helpers return None for impossible ones).
    A chunk layout the change no longer fits (other pp, vp or split) falls back to the default
    one of the new split (cost.plan.default_chunks)."""
    if plan is None:
        return ()
    rows = plan.layers_per_chunk
    if rows and (len(rows) != plan.pp or any(len(r) != plan.vp for r in rows)
                 or tuple(sum(r) for r in rows) != tuple(plan.layers_per_stage)):
        plan = replace(plan, layers_per_chunk=())
    return (Fix(change, replace(draft, plan=plan)),)


def order_fixes(draft: Draft, orders: Iterable[tuple[str, Sequence[Axis]]]) -> tuple[Fix, ...]:
    """Repairs that move the plan onto each of a framework's supported rank orders."""
    fixes: list[Fix] = []
    for name, order in orders:
        full = tuple(order) + tuple(a for a in draft.plan.order if a not in order)
        fixes += repair(f"order -> {name}", draft, replace(draft.plan, order=full))
    return tuple(fixes)


def recompute_fixes(draft: Draft, modes: Iterable[Recompute] | None = None) -> tuple[Fix, ...]:
    """Repairs that use one recompute mode on every stage (default: each mode the plan uses)."""
    plan = draft.plan
    chosen = list(dict.fromkeys(modes if modes is not None else plan.recompute))
    return tuple(
        Fix(f"recompute -> {mode.value} on every stage",
            replace(draft, plan=replace(plan, recompute=(mode,) * plan.pp)))
        for mode in chosen
    )


def micro_batch_repairs(draft: Draft, global_batch: int,
                        also: Callable[[int], bool] = lambda n: True) -> tuple[Fix, ...]:
    """The largest smaller micro-batch that divides global_batch / dp (and passes ``also``,
    given the resulting micro-batch count)."""
    p = draft.plan
    for mb in range(p.micro_batch - 1, 0, -1):
        if global_batch % (mb * p.dp) == 0 and also(global_batch // (mb * p.dp)):
            return repair(f"micro_batch -> {mb}", draft, replace(p, micro_batch=mb))
    return ()


def check_dense_model(ctx: ExportContext, draft: Draft) -> Refusal | None:
    """Expert parallelism needs experts, and num_experts % ep == 0."""
    p, s = draft.plan, ctx.spec
    if p.ep == 1 or (s.is_moe and s.num_experts % p.ep == 0):
        return None
    what = f"{s.name} is dense" if not s.is_moe else f"{s.name} has {s.num_experts} experts"
    return Refusal(f"plan.ep={p.ep} needs a mixture-of-experts model (num_experts % ep == 0) but "
                   f"{what}", repair("ep -> 1", draft, replace(p, ep=1)))


def check_no_expert_parallel(framework_note: str) -> Rule:
    """A rule refusing ep > 1 for targets whose config cannot express expert parallelism."""

    def check_expert_parallel_expressible(ctx: ExportContext, draft: Draft) -> Refusal | None:
        if draft.plan.ep == 1:
            return None
        return Refusal(f"plan.ep={draft.plan.ep}: {framework_note}",
                       repair("ep -> 1", draft, replace(draft.plan, ep=1)))

    return check_expert_parallel_expressible


def check_expert_tp_is_tp(framework_note: str) -> Rule:
    """A rule refusing etp != tp for targets with no separate expert tensor-parallel degree."""

    def check_expert_tp(ctx: ExportContext, draft: Draft) -> Refusal | None:
        p = draft.plan
        if p.expert_tp == p.tp:
            return None
        return Refusal(f"plan.etp={p.etp} with tp={p.tp}: {framework_note}",
                       repair(f"etp -> {p.tp}", draft, replace(p, etp=p.tp)))

    return check_expert_tp


def uniform_recompute_rule(framework_note: str) -> Rule:
    """A rule refusing per-stage recompute for targets whose recompute setting covers every
    stage alike (``framework_note`` says which setting)."""

    def check_recompute_uniform(ctx: ExportContext, draft: Draft) -> Refusal | None:
        if uniform_recompute(draft.plan) is not None:
            return None
        modes = [r.value for r in draft.plan.recompute]
        return Refusal(f"recompute differs per stage ({modes}); {framework_note}",
                       recompute_fixes(draft))

    return check_recompute_uniform


def first_refusal(ctx: ExportContext, draft: Draft, rules: Sequence[Rule]) -> Refusal | None:
    """The first rule that refuses ``draft``, or None when all pass."""
    for rule in rules:
        refusal = rule(ctx, draft)
        if refusal is not None:
            return refusal
    return None


class _Candidate(NamedTuple):
    changes: tuple[str, ...]
    draft: Draft
    result: Result


def _expressible(ctx: ExportContext, refusal: Refusal, rules: Sequence[Rule]) -> list[_Candidate]:
    """Drafts the target can express, reached by chaining at most MAX_REPAIR_DEPTH repairs."""
    frontier = [((f.change,), f.draft) for f in refusal.fixes]
    seen: set[Draft] = set()
    for _ in range(MAX_REPAIR_DEPTH):
        found: list[_Candidate] = []
        following: list[tuple[tuple[str, ...], Draft]] = []
        for changes, draft in frontier:
            if draft in seen:
                continue
            seen.add(draft)
            scored = ctx.score(draft)
            if scored is None:
                continue
            again = first_refusal(ctx, draft, rules)
            if again is None:
                found.append(_Candidate(changes, draft, scored))
            else:
                following += [(changes + (f.change,), f.draft) for f in again.fixes]
        if found:
            return found + _memory_rescue(ctx, found, rules)
        frontier = following
    return []


def _memory_rescue(ctx: ExportContext, found: list[_Candidate],
                   rules: Sequence[Rule]) -> list[_Candidate]:
    """When no candidate fits memory, the same candidates with full recompute on every stage."""
    if any(c.result.predicted.fits_memory for c in found):
        return []
    rescued = []
    for c in found:
        plan = c.draft.plan
        if set(plan.recompute) == {Recompute.FULL}:
            continue
        draft = replace(c.draft, plan=replace(plan, recompute=(Recompute.FULL,) * plan.pp))
        scored = ctx.score(draft)
        if scored is not None and first_refusal(ctx, draft, rules) is None:
            rescued.append(_Candidate(c.changes + ("recompute -> full to fit memory",), draft,
                                      scored))
    return rescued


def _nearest_text(ctx: ExportContext, framework: str, candidates: list[_Candidate]) -> str:
    if not candidates:
        return (f"no plan within {MAX_REPAIR_DEPTH} changes of this one is both valid and "
                f"expressible in {framework}; re-plan with that rule in mind or choose another "
                f"target ({', '.join(n for n in EXPORTERS if n != 'trace')})")
    best = min(candidates, key=lambda c: (not c.result.predicted.fits_memory, len(c.changes),
                                          c.result.predicted.step_time_s))
    new_s = best.result.predicted.step_time_s
    delta = (new_s / ctx.step_time_s - 1) * 100
    fits = "" if best.result.predicted.fits_memory else "; it does NOT fit in memory"
    precision = (f" precision={best.draft.precision.value}"
                 if best.draft.precision != ctx.precision else "")
    return (f"nearest plan {framework} can express: {plan_summary(best.draft.plan)}{precision} "
            f"({'; '.join(best.changes)}): modelled step time {new_s:.4g} s vs "
            f"{ctx.step_time_s:.4g} s for the original ({delta:+.1f}%){fits}")


def enforce(ctx: ExportContext, framework: str, rules: Sequence[Rule]) -> None:
    """Raise ExportError if any rule refuses the context's plan, naming the nearest valid plan."""
    draft = Draft(ctx.plan, ctx.precision)
    refusal = first_refusal(ctx, draft, rules)
    if refusal is None:
        return
    nearest = _nearest_text(ctx, framework, _expressible(ctx, refusal, rules))
    raise ExportError(f"{framework} cannot express this plan: {refusal.rule}. {nearest}.")


# --------------------------------------------------------------------------- output helpers


def header_lines(ctx: ExportContext, framework: str) -> list[str]:
    """The lines every export starts with: tool version, plan, prediction and scenario."""
    r, q = ctx.result, ctx.result.predicted
    version = paraplan_version()
    made_by = version if r.version == version else f"{version} (result from paraplan {r.version})"
    model = r.scenario.get("model", {})
    cluster = ctx.cluster
    return [
        f"Generated by paraplan {made_by} for {framework}.",
        f"plan: {plan_summary(ctx.plan)}",
        f"predicted step time: {q.step_time_s:.4f} s (compute {q.compute_s:.4f} s, exposed comm "
        f"{q.exposed_comm_s:.4f} s, bubble {q.bubble_s:.4f} s, optimizer {q.optimizer_s:.4f} s); "
        f"{q.num_micro_batches} micro-batches; peak memory {q.peak_memory_bytes / 2**30:.1f} GiB "
        f"of {q.memory_capacity_bytes / 2**30:.1f} GiB",
        f"scenario: model {model.get('preset') or model.get('name') or ctx.spec.name}, "
        f"{cluster.num_nodes} x {cluster.devices_per_node} {cluster.name} devices, "
        f"seq_len {ctx.inst.job.seq_len}, global_batch {ctx.inst.job.global_batch}, "
        f"precision {ctx.precision.value}",
        *pool_lines(ctx),
    ]


def comment_block(lines: Iterable[str], prefix: str = "# ") -> str:
    """``lines`` as comment lines (trailing spaces stripped)."""
    return "\n".join(f"{prefix}{line}".rstrip() for line in lines)


# --------------------------------------------------------------------------- public entry points


def _target(name: str) -> tuple[str, Target]:
    key = name.strip().lower()
    if key not in EXPORTERS:
        raise ExportError(
            f"unknown export target {name!r}; choose one of {', '.join(EXPORTERS)}"
        )
    return key, EXPORTERS[key]


POOLED_TARGETS = ("megatron", "trace")
"""Targets that take a plan on a mixed-GPU cluster (cluster.pools): one Megatron job whose pipeline
stages sit on different node types, launched with the pool -> node-rank mapping the header states
(pool_lines); the others build one mesh of one device type and refuse."""


def pool_lines(ctx: ExportContext) -> list[str]:
    """Pooled cluster: which node ranks (and global ranks) run on which pool and stages. Stages
    are the outermost rank axis (cost/pools.py), so stage s holds ranks s*S .. (s+1)*S - 1 with
    S = tp*cp*dp, and each used pool's nodes take consecutive node ranks in stage order."""
    plan, cluster = ctx.plan, ctx.cluster
    if not cluster.pools or not plan.stage_pools:
        return []
    per_stage = plan.tp * plan.cp * plan.dp
    lines = ["mixed-GPU cluster: launch each pool's nodes with these node ranks "
             "(pipeline stages are the outermost rank axis)"]
    first_rank = 0
    for p in dict.fromkeys(plan.stage_pools):
        pool = cluster.pools[p]
        stages = [s for s, q in enumerate(plan.stage_pools) if q == p]
        last_rank = first_rank + len(stages) * per_stage - 1
        lines.append(
            f"  pool {p} ({pool.num_nodes} x {pool.name}): NODE_RANK "
            f"{first_rank // pool.devices_per_node}-{last_rank // pool.devices_per_node}, ranks "
            f"{first_rank}-{last_rank}, stages {stages[0]}-{stages[-1]} "
            f"({sum(plan.layers_per_stage[s] for s in stages)} layers)")
        first_rank = last_rank + 1
    idle = [i for i in range(len(cluster.pools)) if i not in plan.stage_pools]
    if idle:
        lines.append(f"  pools {idle} stay idle (the plan is faster without them)")
    return lines


def _check_pooled(ctx: ExportContext, name: str) -> None:
    if not ctx.cluster.pools:
        return
    if name not in POOLED_TARGETS:
        raise ExportError(
            f"{name} cannot express a plan on a mixed-GPU cluster (cluster.pools): it builds one "
            "device mesh of one GPU type; export to megatron (stages on pools, uneven layers) or "
            "plan for one pool (cluster.preset)")
    used = {ctx.cluster.pools[p].devices_per_node for p in set(ctx.plan.stage_pools)}
    if len(used) > 1:
        raise ExportError(
            f"{name} cannot launch pools with different GPUs per node {sorted(used)} in one "
            "torchrun job (--nproc-per-node is one number)")


EXPORTED_PRECISIONS = (Precision.BF16, Precision.FP16, Precision.FP8)
"""Precisions the framework exporters write; the block-scaled ones (fp8_blockwise, mxfp8, nvfp4)
are modelled but not exported yet (each framework names its recipes differently)."""


def _check_precision(ctx: ExportContext, name: str) -> None:
    if name == "trace" or ctx.precision in EXPORTED_PRECISIONS:
        return
    raise ExportError(
        f"job.precision={ctx.precision.value} is modelled but not exported to {name} yet; "
        "export with job.precision fp8 and set the recipe by hand (Megatron-LM: --fp8-recipe "
        "blockwise|mxfp8, --fp4-format e2m1 --fp4-recipe nvfp4)")


def _render(ctx: ExportContext, target: Target) -> str:
    key = next(k for k, t in EXPORTERS.items() if t == target)
    _check_pooled(ctx, key)
    _check_precision(ctx, key)
    module = importlib.import_module(target.module)
    try:
        text: str = module.render(ctx)
    except ExportError as e:
        if key == "trace" or (ctx.result.solver and ctx.result.solver.target == key):
            raise
        raise ExportError(f"{e} For the fastest plan {key} can run, re-plan with solver.target: "
                          f"{key} (paraplan plan --target {key}).") from None
    return text if text.endswith("\n") else text + "\n"


def export_text(result: Result, name: str) -> str:
    """The text of ``result`` exported for target ``name``; ExportError if it cannot be."""
    _, target = _target(name)
    return _render(context(result), target)


def export(result: Result, name: str) -> str:
    """``paraplan.export(result, "megatron")``: same as ``export_text``."""
    return export_text(result, name)


def write_exports(result: Result, names: Sequence[str], out_dir: Path) -> list[Path]:
    """Write one file per target (plus ``trace.json``) into ``out_dir``; return their paths.

    Unknown names fail before anything is written. Targets that refuse the plan do not stop the
    others: their files are written, then one ExportError lists every refusal and what was written.
    """
    keys = list(dict.fromkeys(_target(n)[0] for n in names if n.strip()))
    if "trace" not in keys:
        keys.append("trace")
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


def load_result(path: str | Path) -> Result:
    """A Result from a ``paraplan plan --json`` / ``paraplan evaluate --json`` file.

    ConfigError names the file and what is wrong with it.
    """
    p = Path(path)
    try:
        data: Any = json.loads(p.read_text())
    except OSError as e:
        raise ConfigError(f"cannot read result file {str(p)!r}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"{p}: not a JSON result ({e.msg} at line {e.lineno}); write one with "
            "`paraplan plan SCENARIO --json > RESULT.json`"
        ) from None
    try:
        return Result.model_validate(data)
    except ValidationError as e:
        problems = [f"{'.'.join(str(x) for x in err['loc']) or 'result'}: {err['msg']}"
                    for err in e.errors()[:ERROR_PREVIEW]]
        raise ConfigError(
            f"{p}: not a paraplan result ({len(e.errors())} problems: {'; '.join(problems)}); "
            "write one with `paraplan plan SCENARIO --json > RESULT.json`"
        ) from None


class _CallableModule(types.ModuleType):
    """Lets ``paraplan.export(result, "megatron")`` work while ``paraplan.export`` stays the
    package of exporters (the API the planner issue names)."""

    def __call__(self, result: Result, name: str) -> str:
        return export(result, name)


sys.modules[__name__].__class__ = _CallableModule
