"""The properties every answer must have (issue 16, item 2), checked on fuzz cases
(benchmarks/fuzz_cases.py) by the hypothesis suite and the long-run driver. The checks raise
``PropertyFailure`` naming the property broken:

- ``error``: solve/evaluate return a Result or raise ParaplanError with a non-empty message that
  names the offending field; any other exception is a crash (left to propagate);
- ``time``: the call returns within its time limit (+ a margin) measured from its start;
- ``reeval``: the plan re-evaluates (``paraplan.evaluate`` with every knob fixed) to its own step
  time and the solver's objective, fits memory and respects the fixed knobs and search options;
- ``neighbour``: an OPTIMAL plan is not beaten by a plan one knob (or one moved layer) away that is
  valid, fits and lies inside the search space, nor (small instances) by exhaustive enumeration;
- ``top`` / ``top-order``: nor by ``top=K``'s runner-ups, which come sorted, nor by another ``top``;
- ``workers``: the same plan for 1 and 2 workers;
- ``json``: the result is strict JSON and reloads through ``paraplan.export.load_result``;
- ``export``: under ``solver.target`` the plan exports to that framework without a refusal.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from paraplan.cost import DEFAULT_ORDER, Axis, CPComm, Plan, Recompute
from paraplan.cost import evaluate as cost_evaluate
from paraplan.cost.plan import chunk_layers

import paraplan
from benchmarks.fuzz_cases import Case, divisors
from paraplan.errors import ConfigError, ExportError, ParaplanError

__all__ = [
    "PropertyFailure",
    "run_case",
    "write_case",
    "check_solve",
    "check_evaluate",
    "check_error",
    "check_neighbours",
    "check_oracle",
    "check_fields",
    "outside_space",
    "neighbours",
    "solve_timed",
    "WATCH",
    "TIME_MARGIN_S",
    "TIME_FACTOR",
]

TIME_MARGIN_S = 1.0  # the margin over time_limit_s: 1 s + 20 %
TIME_FACTOR = 1.2
REL_TOL = 1e-9


class PropertyFailure(AssertionError):
    """A property broke; ``prop`` names it (module docstring)."""

    def __init__(self, prop: str, message: str) -> None:
        super().__init__(f"[{prop}] {message}")
        self.prop = prop


ROUND_TRIP_LIMIT_S = 60.0  # a fully fixed plan is one layout: solved in well under a second


def _fail(prop: str, message: str) -> None:
    raise PropertyFailure(prop, message)


def write_case(case: Case, where: Path) -> str | dict[str, Any]:
    """The scenario as ``paraplan.solve`` takes it: a file path (text cases and cases with a
    Hugging Face config, written under ``where``) or the dict itself."""
    for name, value in (case.files or {}).items():
        path = where / name
        if value == "<dir>":
            path.mkdir(exist_ok=True)
        elif isinstance(value, bytes):
            path.write_bytes(value)
        else:
            path.write_text(json.dumps(value))
    if isinstance(case.scenario, dict) and not case.files:
        return case.scenario
    path = where / "scenario.yaml"
    if isinstance(case.scenario, bytes):
        path.write_bytes(case.scenario)
    elif isinstance(case.scenario, str):
        path.write_text(case.scenario)
    else:
        path.write_text(json.dumps(case.scenario))
    return str(path)


def check_error(err: ParaplanError, expect_keys: Sequence[str]) -> None:
    """A ParaplanError carries a non-empty message that names one of ``expect_keys``."""
    message = str(err)
    if not message.strip():
        _fail("error", f"{type(err).__name__} with an empty message")
    if expect_keys and not any(k in message for k in expect_keys):
        _fail("error", f"{type(err).__name__} does not name any of {list(expect_keys)}: {message[:300]!r}")


WATCH: list[Any] = []
"""Optional (before(time_limit_s), after()) hooks around every solve: the long-run driver arms a
faulthandler dump there, so a hang reports where it was stuck."""


def solve_timed(scenario: Any, args: dict[str, Any]) -> tuple[Any, float]:
    """(Result or ParaplanError, seconds from the call's start); other exceptions propagate."""
    for before, _ in WATCH:
        before(args.get("time_limit_s", 30.0))
    start = time.perf_counter()
    try:
        out: Any = paraplan.solve(scenario, **args)
    except ParaplanError as e:
        out = e
    finally:
        for _, after in WATCH:
            after()
    return out, time.perf_counter() - start


def check_time(
    elapsed_s: float, time_limit_s: float, factor: float = TIME_FACTOR, margin_s: float = TIME_MARGIN_S
) -> None:
    if not time_limit_s > 0 or math.isinf(time_limit_s):
        return
    if elapsed_s > time_limit_s * factor + margin_s:
        _fail("time", f"returned after {elapsed_s:.2f} s on a {time_limit_s:g} s limit")


def _instance(scenario: Any) -> tuple[Any, Any, Any]:
    from paraplan.api import fixed_knobs, search_options
    from paraplan.instance import build_instance

    inst = build_instance(paraplan.load_scenario(scenario), search=True)  # as paraplan.solve builds it
    return inst, fixed_knobs(inst), search_options(inst)


def _scenario_dict(scenario: Any) -> dict[str, Any]:
    return paraplan.load_scenario(scenario).model_dump(mode="json", exclude_none=True)


def _tolerance_s(inst: Any, plan: Plan, step_s: float) -> float:
    from paraplan.solver.scale import tolerance_s

    m = plan.num_micro_batches(inst.job)
    return 2 * tolerance_s(m, plan.pp, inst.spec.num_layers) + REL_TOL * step_s


def check_reeval(scenario: Any, result: Any) -> None:
    """(c) the plan re-evaluates to its own step time and respects fixed knobs and options."""
    from paraplan.export import to_cost_plan

    inst, fixed, options = _instance(scenario)
    plan = to_cost_plan(result.plan)
    sc = _scenario_dict(scenario)
    sc["plan"] = result.plan.model_dump(mode="json")  # the result's plan document, as returned
    sc.pop("solver", None)
    try:
        again = paraplan.evaluate(sc)
    except ParaplanError as e:
        _fail("reeval", f"the returned plan does not evaluate: {e}")
    step = result.predicted.step_time_s
    if abs(again.predicted.step_time_s - step) > REL_TOL * step:
        _fail("reeval", f"evaluate gives {again.predicted.step_time_s!r} s, the result says {step!r}")
    if not result.predicted.fits_memory:
        _fail("reeval", "the returned plan does not fit memory")
    if result.solver is not None:
        tol = _tolerance_s(inst, plan, step)
        if abs(result.solver.objective_s - step) > tol:
            _fail("reeval", f"objective {result.solver.objective_s!r} s vs step {step!r} s")
    reason = outside_space(plan, inst, fixed, options)
    if reason:
        _fail("reeval", f"the returned plan is outside the search space: {reason}")
    check_solve_round_trip(scenario, result)


def check_solve_round_trip(scenario: Any, result: Any) -> None:
    """(c) solve of the scenario with its plan fixed to the result's plan document, as returned
    (every knob, empty lists included), gives the same plan and step time (issue 26)."""
    sc = {**_scenario_dict(scenario), "plan": result.plan.model_dump(mode="json")}
    try:
        again = paraplan.solve(sc, time_limit_s=ROUND_TRIP_LIMIT_S, workers=1)
    except ParaplanError as e:
        _fail("roundtrip", f"the returned plan, fixed, does not solve: {e}")
    if again.plan != result.plan:
        diff = {k: (v, getattr(again.plan, k)) for k, v in result.plan if getattr(again.plan, k) != v}
        _fail("roundtrip", f"the returned plan, fixed, solves to another plan: {diff}")
    if again.predicted.step_time_s != result.predicted.step_time_s:
        _fail(
            "roundtrip",
            f"the returned plan, fixed, solves to {again.predicted.step_time_s!r} s, "
            f"the result says {result.predicted.step_time_s!r}",
        )


def check_fields(scenario: Any, result: Any, args: dict[str, Any] | None = None) -> None:
    """(c) the numbers of a Result agree with each other: degrees, batch, stages, memory, MFU and
    (from the planner) the proof status, bound and gap, echoed arguments."""
    from paraplan.instance import build_instance

    inst = build_instance(paraplan.load_scenario(scenario))  # evaluate ignores solver options
    p, pr = result.plan, result.predicted
    problems = []
    if p.dp * p.tp * p.pp * p.cp != p.num_devices:
        problems.append(f"dp*tp*pp*cp != num_devices {p.num_devices}")
    if p.micro_batch * p.grad_accum * p.dp != inst.job.global_batch:
        problems.append("micro_batch * grad_accum * dp != global_batch")
    if len(p.layers_per_stage) != p.pp or sum(p.layers_per_stage) != inst.spec.num_layers:
        problems.append(f"layers_per_stage {p.layers_per_stage} vs pp {p.pp}")
    if len(pr.stages) != p.pp or [st.layers for st in pr.stages] != p.layers_per_stage:
        problems.append("predicted.stages do not match the plan's stages")
    if not (math.isfinite(pr.step_time_s) and pr.step_time_s > 0):
        problems.append(f"step_time_s {pr.step_time_s}")
    if not 0 < pr.mfu <= 1:
        problems.append(f"mfu {pr.mfu}")
    for st in pr.stages:  # each stage against its own pool's memory (pooled clusters)
        pool = inst.cluster.pools[st.pool] if st.pool is not None else inst.cluster
        if pr.fits_memory and st.total_bytes > pool.memory_capacity_bytes * (1 + 1e-9):
            problems.append(
                f"fits_memory but stage {st.stage} needs {st.total_bytes:.4g} B of "
                f"{pool.memory_capacity_bytes:.4g} B"
            )
    if pr.num_micro_batches != p.grad_accum:
        problems.append("num_micro_batches != grad_accum")
    sv = result.solver
    if sv is not None:
        tol = _tolerance_s(inst, paraplan.export.to_cost_plan(p), pr.step_time_s)
        if not (0 <= sv.gap <= 1 and sv.bound_s <= sv.objective_s + tol):
            problems.append(f"bound {sv.bound_s} / gap {sv.gap} vs objective {sv.objective_s}")
        if sv.status == "OPTIMAL" and sv.bound_s < sv.objective_s - tol:
            problems.append(f"OPTIMAL with bound {sv.bound_s} < objective {sv.objective_s} (gap {sv.gap})")
        if sv.status not in ("OPTIMAL", "FEASIBLE"):
            problems.append(f"status {sv.status} with a plan")
        if not 0 <= sv.num_layouts_pruned <= sv.num_layouts:
            problems.append(f"num_layouts {sv.num_layouts} pruned {sv.num_layouts_pruned}")
        for key in ("workers", "seed", "time_limit_s"):
            if args and key in args and getattr(sv, key) != args[key]:
                problems.append(f"solver.{key}={getattr(sv, key)} but the call gave {args[key]}")
    if problems:
        _fail("reeval", "; ".join(problems))


def outside_space(plan: Plan, inst: Any, fixed: Any, options: Any) -> str | None:
    """Why ``plan`` lies outside the space the solver searches (solver/space.py docstring, before
    dominance pruning, which claims the pruned plans are never faster); None when inside."""
    from paraplan.solver.space import exact_split

    spec, cluster = inst.spec, inst.cluster
    for knob in ("dp", "tp", "pp", "cp", "ep", "vp", "micro_batch", "zero", "sequence_parallel", "cp_comm"):
        want = getattr(fixed, knob)
        if want is not None and getattr(plan, knob) != want:
            if knob == "zero" and plan.dp * plan.cp == 1:
                continue  # nothing to shard: the solver may report 0
            return f"plan.{knob}={getattr(plan, knob)} but the scenario fixes {want}"
    if fixed.etp is not None and plan.expert_tp != fixed.etp and spec.is_moe:
        return f"expert tp {plan.expert_tp} but plan.etp={fixed.etp}"
    if fixed.recompute is not None:
        want_modes = fixed.recompute if len(fixed.recompute) == plan.pp else (fixed.recompute[0],) * plan.pp
        if plan.recompute != want_modes:
            return f"recompute {plan.recompute} but the scenario fixes {fixed.recompute}"
    split = exact_split(plan, spec.num_layers, fixed, options)
    if split is not None and plan.layers_per_stage != split:
        return f"layers_per_stage {plan.layers_per_stage} but the split must be {split}"
    if fixed.order is not None and plan.order != fixed.order:
        return f"order {plan.order} but the scenario fixes {fixed.order}"
    if fixed.order is None and not options.search_placement and plan.order != DEFAULT_ORDER:
        return f"order {plan.order} with solver.search_placement false"
    if cluster.pools and plan.pp > 1 and plan.order[-1] is not Axis.PP:
        return "pooled cluster: pp must be the outermost axis"
    if fixed.stage_pools is not None and plan.stage_pools != fixed.stage_pools:
        return f"stage_pools {plan.stage_pools} but fixed {fixed.stage_pools}"
    if plan.cp not in (1, 2, 4, 8, 16, 32, 64):
        return f"cp={plan.cp} is not a power of two up to 64"
    if plan.micro_batch > options.max_micro_batch and plan.micro_batch != fixed.micro_batch:
        return f"micro_batch={plan.micro_batch} over solver.max_micro_batch"
    if plan.vp > options.max_vp:
        return f"vp={plan.vp} over solver.max_vp"
    if not options.allow_uneven_stages and len(set(plan.layers_per_stage)) > 1:
        return f"uneven split {plan.layers_per_stage} with uneven stages off"
    if options.uniform_recompute and len(set(plan.recompute)) > 1:
        return f"per-stage recompute {plan.recompute} under uniform_recompute"
    if options.recompute_modes is not None and not set(plan.recompute) <= set(options.recompute_modes):
        return f"recompute {plan.recompute} not among {options.recompute_modes}"
    if plan.recompute_layers and not options.partial_recompute:
        return "partial recompute (recompute_layers) is not searched here"
    if plan.recompute_layers and len(inst.graph.kind_blocks) > 1:
        return "partial recompute is searched for models with one block kind"
    if plan.recompute_layers and options.uniform_recompute:
        from paraplan.cost.recompute_layers import uniform_recompute_layers

        if uniform_recompute_layers(plan) is None:
            return f"recompute_layers {plan.recompute_layers}: not one N under uniform_recompute"
    if fixed.recompute_layers is not None:
        given = fixed.recompute_layers
        full = [r is Recompute.FULL for r in plan.recompute]
        want = tuple(given) if len(given) == plan.pp else tuple(given[0] if f else 0 for f in full)
        if plan.recompute_layers != want:
            return f"recompute_layers {plan.recompute_layers} but the scenario fixes {given}"
    if plan.dp * plan.cp == 1 and plan.zero != 0 and fixed.zero is None:
        return "zero > 0 with nothing to shard"
    if plan.tp == 1 and plan.sequence_parallel and fixed.sequence_parallel is None:
        return "sequence parallelism without tp"
    if spec.is_moe and plan.tp > 1 and plan.etp not in (1, plan.tp):
        return f"etp={plan.etp}"
    if options.layout_filter is not None and not options.layout_filter(plan):
        return "the target's rules refuse the layout"
    if options.layout_limits is not None:  # the runnable default: some framework that runs the
        from paraplan.solver.limits import narrowed  # layout runs its per-stage choices too

        limits = options.layout_limits(plan)
        why = [outside_space(plan, inst, fixed, narrowed(options, lim)) for lim in limits]
        if why and all(w is not None for w in why):
            return f"no framework that runs the layout runs its stages: {why[0]}"
    return None


def _valid_split(layers: int, pp: int, vp: int) -> tuple[int, ...] | None:
    k = layers // vp
    if layers % vp or k < pp:
        return None
    base, extra = divmod(k, pp)
    return tuple(vp * (base + (1 if i < extra else 0)) for i in range(pp))


def neighbours(plan: Plan, inst: Any) -> list[tuple[str, Plan]]:
    """Plans one knob (or one moved layer) away from ``plan``, possibly invalid."""
    out: list[tuple[str, Plan]] = []
    layers = inst.spec.num_layers

    def resplit(p: Plan) -> Plan | None:
        if len(p.layers_per_stage) == p.pp and all(n % p.vp == 0 and n >= p.vp for n in p.layers_per_stage):
            return p
        split = _valid_split(layers, p.pp, p.vp)
        return None if split is None else replace(p, layers_per_stage=split)

    def add(name: str, p: Plan | None) -> None:
        if p is not None and p != plan:
            out.append((name, p))

    def with_pp(p: Plan, pp: int) -> list[Plan]:
        if pp == p.pp:
            return [p]
        return [
            q
            for mode in dict.fromkeys((p.recompute[0], *Recompute))
            for vp in dict.fromkeys((p.vp, 1))
            if (
                q := resplit(
                    replace(p, pp=pp, vp=vp, recompute=(mode,) * pp, recompute_layers=(), layers_per_stage=())
                )
            )
            is not None
        ]

    pooled = bool(inst.cluster.pools)
    if not pooled:
        for a, b in itertools.permutations(("tp", "pp", "dp", "cp"), 2):
            for f in (2, 3):
                da, db = getattr(plan, a), getattr(plan, b)
                if db % f:
                    continue
                counts = () if "pp" in (a, b) else plan.recompute_layers  # per old stage
                changes: dict[str, Any] = {a: da * f, b: db // f}
                tp = changes.get("tp", plan.tp)
                if inst.spec.is_moe:  # etp follows the new tp in the same step (a Plan checks it)
                    changes["etp"] = None if tp == 1 else plan.etp if plan.etp in (1, tp) else tp
                p = replace(plan, **changes, recompute_layers=counts)
                if p.tp == 1:
                    p = replace(p, sequence_parallel=False)
                elif plan.tp == 1:
                    p = replace(p, sequence_parallel=True)
                for q in with_pp(p, p.pp):
                    add(f"{a}x{f},{b}/{f}", q)
    for mb in range(1, 17):
        add(f"micro_batch={mb}", replace(plan, micro_batch=mb))
    for z in range(4):
        add(f"zero={z}", replace(plan, zero=z))
    for vp in range(1, 7):
        add(f"vp={vp}", resplit(replace(plan, vp=vp)))
        add(f"vp={vp},even", resplit(replace(plan, vp=vp, layers_per_stage=())))
    for s in range(plan.pp):
        for mode in Recompute:
            rec = list(plan.recompute)
            rec[s] = mode
            counts = list(plan.recompute_layers)
            if counts:  # partial recompute: a full stage keeps its count (or all), others 0
                counts[s] = (counts[s] or max(chunk_layers(plan)[s])) if mode is Recompute.FULL else 0
            add(
                f"recompute[{s}]={mode.value}",
                replace(plan, recompute=tuple(rec), recompute_layers=tuple(counts)),
            )
            if mode is Recompute.FULL:  # one layer more or fewer recomputed per chunk
                for n in (1, -1):
                    more = list(plan.recompute_layers) or [
                        max(row) if r is Recompute.FULL else 0
                        for r, row in zip(plan.recompute, chunk_layers(plan), strict=True)
                    ]
                    if plan.recompute[s] is Recompute.FULL and more[s] + n >= 1:
                        more[s] += n
                        add(f"recompute_layers[{s}]{n:+d}", replace(plan, recompute_layers=tuple(more)))
    for mode in Recompute:
        add(f"recompute={mode.value}", replace(plan, recompute=(mode,) * plan.pp, recompute_layers=()))
    add("sequence_parallel", replace(plan, sequence_parallel=not plan.sequence_parallel))
    add(
        "cp_comm",
        replace(plan, cp_comm=CPComm.P2P if plan.cp_comm is CPComm.ALL_GATHER else CPComm.ALL_GATHER),
    )
    for order in itertools.permutations(DEFAULT_ORDER):
        add("order=" + "-".join(order), replace(plan, order=order))
    for s in range(plan.pp - 1):
        for src, dst in ((s, s + 1), (s + 1, s)):
            split = list(plan.layers_per_stage)
            split[src] -= plan.vp
            split[dst] += plan.vp
            if min(split) >= plan.vp:
                add(f"move {plan.vp} layer(s) {src}->{dst}", replace(plan, layers_per_stage=tuple(split)))
    if inst.spec.is_moe:
        for ep in divisors(inst.spec.num_experts):
            add(f"ep={ep}", replace(plan, ep=ep))
        if plan.tp > 1:
            for etp in (1, plan.tp):
                add(f"etp={etp}", replace(plan, etp=etp))
    return out


def check_neighbours(scenario: Any, result: Any) -> None:
    """(d) no valid, fitting neighbour inside the search space beats an OPTIMAL plan."""
    from paraplan.export import to_cost_plan

    if result.solver is None or result.solver.status != "OPTIMAL":
        return
    inst, fixed, options = _instance(scenario)
    best = to_cost_plan(result.plan)
    step = result.predicted.step_time_s
    tol = _tolerance_s(inst, best, step)
    for name, p in neighbours(best, inst):
        if outside_space(p, inst, fixed, options):
            continue
        try:
            b = cost_evaluate(inst.graph, inst.cluster, inst.job, p)
        except ValueError:
            continue
        if b.fits and b.step_time_s < step - tol:
            _fail("neighbour", f"OPTIMAL {step!r} s beaten by neighbour '{name}' at {b.step_time_s!r} s: {p}")


ORACLE_MAX_DEVICES = 16
ORACLE_MAX_LAYERS = 8
ORACLE_BUDGET_S = 3.0


def check_oracle(scenario: Any, result: Any) -> None:
    """(d) on small instances: an OPTIMAL objective equals exhaustive enumeration of the same space
    (solver/enumerate.py, dominated plans included); skipped past ORACLE_BUDGET_S."""
    from paraplan.solver.enumerate import EnumerationBudgetExceeded, enumerate_plans

    if result.solver is None or result.solver.status != "OPTIMAL":
        return
    inst, fixed, options = _instance(scenario)
    if inst.cluster.num_devices > ORACLE_MAX_DEVICES or inst.spec.num_layers > ORACLE_MAX_LAYERS:
        return
    try:
        truth = enumerate_plans(inst.graph, inst.cluster, inst.job, fixed, options, budget_s=ORACLE_BUDGET_S)
    except EnumerationBudgetExceeded:
        return
    step = result.predicted.step_time_s
    if truth.best is None:
        _fail("neighbour", f"OPTIMAL {step!r} s but enumeration finds no plan that fits")
    tol = _tolerance_s(inst, truth.best, step)
    if truth.best_s < step - tol:
        _fail("neighbour", f"OPTIMAL {step!r} s but enumeration finds {truth.best_s!r} s: {truth.best}")


def check_alternatives(scenario: Any, result: Any) -> None:
    """(d) runner-ups: sorted, each re-evaluates to its step time, none beats an OPTIMAL best."""
    inst = _instance(scenario)[0]
    from paraplan.export import to_cost_plan

    step = result.predicted.step_time_s
    previous = result.solver.objective_s if result.solver else step
    for i, alt in enumerate(result.alternatives):
        plan = to_cost_plan(alt.plan)
        b = cost_evaluate(inst.graph, inst.cluster, inst.job, plan)
        tol = _tolerance_s(inst, plan, b.step_time_s)
        if abs(b.step_time_s - alt.step_time_s) > tol:
            _fail("reeval", f"alternative {i} lists {alt.step_time_s!r} s, evaluates to {b.step_time_s!r} s")
        if not b.fits:
            _fail("reeval", f"alternative {i} does not fit memory")
        if alt.step_time_s < previous - tol:
            kind = "neighbour" if i == 0 and result.solver.status == "OPTIMAL" else "top-order"
            _fail(
                kind,
                f"runner-up {i} at {alt.step_time_s!r} s is faster than the plan "
                f"before it ({previous!r} s; status {result.solver.status})",
            )
        previous = alt.step_time_s


def check_json(result: Any, where: Path) -> None:
    """(f) strict JSON that reloads through the export loader."""
    from paraplan.export import load_result

    try:
        text = json.dumps(result.model_dump(mode="json"), allow_nan=False)
    except ValueError as e:
        _fail("json", f"result is not strict JSON: {e}")
    path = where / "result.json"
    path.write_text(text)
    try:
        again = load_result(path)
    except ParaplanError as e:
        _fail("json", f"load_result refuses the result: {e}")
    if again.model_dump(mode="json") != json.loads(text):
        _fail("json", "the reloaded result differs")


def check_export(scenario: Any, result: Any) -> None:
    """Every exporter renders the plan or refuses with an ExportError (exit 4) naming why;
    under solver.target the plan exports to that framework without a refusal. Other
    exceptions propagate (a crash)."""
    from paraplan.export import EXPORTERS

    target = paraplan.load_scenario(scenario).solver.target
    for name in EXPORTERS:
        try:
            text = paraplan.export(result, name)
        except ExportError as e:
            if name == target:
                _fail("export", f"solver.target={target} but the export refuses: {e}")
            check_error(e, ())
            continue
        except ParaplanError as e:
            _fail("export", f"export to {name} raises {type(e).__name__} (not ExportError): {e}")
        if not text.strip():
            _fail("export", f"export to {name} is empty")
        if name in ("deepspeed", "trace"):
            try:
                json.loads(text, parse_constant=_refuse_constant)
            except ValueError as e:
                _fail("export", f"export to {name} is not strict JSON: {e}")


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _plan_key(result: Any) -> dict[str, Any]:
    return result.plan.model_dump(mode="json")


def check_case_error(case: Case, err: ParaplanError) -> None:
    """check_error with the case's keys: any error must name them, except a non-ConfigError on
    odd-but-valid API arguments (a timeout) or on huge sizes (infeasible)."""
    lenient = (case.kind == "api-args" and not case.refuse) or not case.strict_keys
    check_error(err, case.expect_keys if isinstance(err, ConfigError) or not lenient else ())


def check_evaluate(case: Case, scenario: Any, where: Path) -> Any:
    """``paraplan.evaluate``: a Result (strict JSON, reloads, fits or not, stable) or a
    ParaplanError naming a field."""
    try:
        out = paraplan.evaluate(scenario)
    except ParaplanError as e:
        check_case_error(case, e)
        return e
    check_json(out, where)
    check_fields(scenario, out)
    again = paraplan.evaluate(scenario)
    if again.predicted.step_time_s != out.predicted.step_time_s:
        _fail("reeval", "evaluate is not deterministic")
    return out


def check_solve(
    case: Case,
    scenario: Any,
    where: Path,
    *,
    factor: float = TIME_FACTOR,
    margin_s: float = TIME_MARGIN_S,
    deep: bool = True,
) -> Any:
    """Every property of one solve; ``deep``: also neighbours, top=1 vs top=K and 1 vs 2
    workers (more solves). Returns the Result or the ParaplanError."""
    out, elapsed = solve_timed(scenario, case.args)
    check_time(elapsed, case.args["time_limit_s"], factor, margin_s)
    if isinstance(out, ParaplanError):
        check_case_error(case, out)
        return out
    if case.refuse:
        _fail("error", f"bad API arguments {case.expect_keys} accepted: {case.args}")
    check_json(out, where)
    check_fields(scenario, out, case.args)
    check_reeval(scenario, out)
    check_alternatives(scenario, out)
    check_export(scenario, out)
    if not deep or out.solver is None:
        return out
    check_neighbours(scenario, out)
    check_oracle(scenario, out)
    if out.solver.status != "OPTIMAL":
        return out
    step = out.predicted.step_time_s
    tol = _tolerance_s(_instance(scenario)[0], paraplan.export.to_cost_plan(out.plan), step)
    other_top = 3 if case.args.get("top", 1) == 1 else 1
    again, elapsed = solve_timed(scenario, {**case.args, "top": other_top})
    check_time(elapsed, case.args["time_limit_s"], factor, margin_s)
    if isinstance(again, ParaplanError):
        _fail("top", f"top={other_top} raises {type(again).__name__}: {again}")
    if again.predicted.step_time_s < step - tol:
        _fail(
            "top",
            f"OPTIMAL {step!r} s with top={case.args.get('top', 1)}, "
            f"{again.predicted.step_time_s!r} s with top={other_top}",
        )
    if again.solver.status == "OPTIMAL" and step < again.predicted.step_time_s - tol:
        _fail(
            "top",
            f"OPTIMAL {again.predicted.step_time_s!r} s with top={other_top}, "
            f"{step!r} s with top={case.args.get('top', 1)}",
        )
    other_workers = 1 if case.args.get("workers", 2) != 1 else 2
    third, elapsed = solve_timed(scenario, {**case.args, "workers": other_workers})
    check_time(elapsed, case.args["time_limit_s"], factor, margin_s)
    if isinstance(third, ParaplanError):
        _fail("workers", f"workers={other_workers} raises {type(third).__name__}: {third}")
    if third.solver.status == "OPTIMAL" and _plan_key(third) != _plan_key(out):
        diff = {k: (v, _plan_key(third)[k]) for k, v in _plan_key(out).items() if _plan_key(third)[k] != v}
        _fail("workers", f"workers={case.args.get('workers', 2)} vs {other_workers}: {diff}")
    return out


def run_case(case: Case, where: Path, **kw: Any) -> Any:
    """Write the case's files under ``where`` and check it (``check_solve``, ``check_evaluate``)."""
    if case.kind == "choose":  # capacity planning (benchmarks/fuzz_capacity.py)
        from benchmarks.fuzz_capacity import check_choose

        return check_choose(case)
    if case.kind == "sweep":
        from benchmarks.fuzz_capacity import check_sweep

        return check_sweep(case, where)
    scenario = write_case(case, where)
    if case.kind == "serving":
        return check_serving(case, scenario, where)
    if case.api == "evaluate":
        return check_evaluate(case, scenario, where)
    return check_solve(case, scenario, where, **kw)


def check_serving(case: Case, scenario: Any, where: Path) -> Any:
    """A serving case (fuzz_cases.serving_case): a ServingResult or a ParaplanError naming the
    field; a result must fit, re-evaluate to the same prediction from its own JSON (its plan
    round-trips), reproduce its objective, print as strict JSON and come within the time limit
    (``check_time``). ``refuse``: a malformed key,
    so only a ConfigError naming it is right."""
    import paraplan
    from paraplan.errors import ConfigError
    from paraplan.serving import ServingResult

    if case.api == "evaluate":
        try:
            result = paraplan.evaluate(scenario)
        except ParaplanError as e:
            result = e
    else:
        result, elapsed = solve_timed(scenario, dict(case.args))
        check_time(elapsed, case.args["time_limit_s"])
    if isinstance(result, ParaplanError):
        e = result
        if case.refuse and not isinstance(e, ConfigError):
            _fail("serving-refusal", f"a malformed key gave {type(e).__name__}, not a ConfigError: {e}")
        check_error(e, case.expect_keys)
        return e
    if case.refuse:
        _fail("serving-refusal", f"a malformed key {case.expect_keys[:1]} was accepted")
    if not isinstance(result, ServingResult):
        _fail("serving-type", f"a serving scenario gave {type(result).__name__}")
    text = json.dumps(result.model_dump(mode="json"), allow_nan=False)
    again = paraplan.evaluate(json.loads(text))
    if again.predicted != result.predicted or again.plan != result.plan:
        _fail("serving-reeval", f"{result.plan} re-evaluates to {again.predicted}, not {result.predicted}")
    if result.solver is not None:
        if not result.predicted.fits_memory:
            _fail("serving-fits", f"the solver returned a plan that does not fit: {result.plan}")
        q = result.predicted
        value = {
            "goodput_per_gpu": q.goodput_requests_per_s / q.gpus,
            "min_gpus": float(q.gpus),
        }.get(result.solver.objective)
        if value is not None and not math.isclose(value, result.solver.objective_value, rel_tol=1e-9):
            _fail(
                "serving-objective", f"objective {result.solver.objective_value} but the plan gives {value}"
            )
    return result
