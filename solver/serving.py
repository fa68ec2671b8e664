"""The serving search (issue 23): the best serving plan for an objective, proven by CP-SAT.

Objectives (``ServingOptions.objective``):
- ``goodput_per_gpu`` (default): maximise requests/s meeting the SLO per GPU (the DistServe
  "per-GPU goodput": Zhong et al., DistServe, OSDI'24, Sec. 2), among plans that fit memory and serve
  some requests within the SLO;
- ``min_gpus``: the fewest GPUs whose plan meets the SLO at ``workload.request_rate`` and serves
  it (output tokens/s >= rate x osl); ties: the higher goodput per GPU among aggregated plans,
  the first found by the disaggregated search (it proves the primary objective only);
- ``min_ttft``: the lowest TTFT at the SLO percentile with TPOT within the SLO (and the rate
  served, open loop); ties as for min_gpus.

Every figure is ``cost.serving.evaluate_serving``'s (the one cost model); this module only turns
them into integers (solver/scale.py ``serving_units``) and chooses. What qualifies for each
objective, its value and its integer key are solver/serving_objective.py's.

Aggregated: the table holds every candidate of solver/serving_space.py (layout x max_batch x
replicas, each scored by evaluate_serving at its own per-replica load); CP-SAT picks one row
(a Boolean per row, exactly one true) minimising the integer objective.

Disaggregated (the integer rate matching the anchors do with fixed factors): a prefill table
over (prefill layout, workers n_p) and a decode table over (decode layout, max_batch, workers
n_d), each row the pool's rate and latency from ``cost.serving`` at its own share of the load;
CP-SAT picks one row of each, with n_p g_p + n_d g_d <= GPUs, goodput G <= min(prefill rate,
decode rate) and, for goodput per GPU, the ratio objective y (G's integer units per GPU) under
y x (GPUs used) <= G (AddMultiplicationEquality), maximised. The chosen plan is re-scored by
``evaluate_serving`` itself and must reproduce the objective within the rounding of one unit
(``_check``), or the solve fails loudly.

Ties are broken by a documented order (``rank``): fewer GPUs, then the candidate order of
solver/serving_space.py (smaller tp, pp, ep, attention DP off, smaller max_batch, fewer
replicas), so the plan does not depend on the worker count.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ortools.sat.python import cp_model
from paraplan.cost.serving import (
    Engine,
    ServingPlan,
    ServingPrediction,
    WorkerPlan,
    Workload,
    evaluate_serving,
)
from paraplan.cost.serving_pools import decode_rate_at
from paraplan.graph import ModelSpec
from paraplan.hardware import Cluster
from paraplan.solver.serving_objective import (
    Candidate,
    meets_slo,
    objective_units,
    objective_value,
    qualify,
    score,
    serves_rate,
)
from paraplan.solver.serving_space import (
    ServingFixed,
    ServingObjective,
    ServingOptions,
    aggregated_plans,
    plan_gpus,
    searched_modes,
)

__all__ = [
    "ServingNoPlan",
    "ServingSolution",
    "ServingOutcome",
    "meets_slo",
    "serves_rate",
    "objective_value",
    "objective_units",
    "score",
    "Candidate",
    "qualify",
    "solve_serving",
]


class ServingNoPlan(ValueError):
    """No serving plan of the space fits memory (or meets the SLO / serves the rate, as the
    objective needs); ``families`` names what binds."""

    def __init__(self, message: str, families: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.families = families


@dataclass(frozen=True, slots=True)
class ServingSolution:
    plan: ServingPlan
    prediction: ServingPrediction
    value: float  # the objective in its unit: req/s per GPU, GPUs, or ms


@dataclass(frozen=True, slots=True)
class ServingOutcome:
    status: str  # OPTIMAL | FEASIBLE
    solutions: tuple[ServingSolution, ...]
    bound: float
    wall_s: float
    num_candidates: int


def _aggregated_rows(
    spec: ModelSpec,
    cluster: Cluster,
    workload: Workload,
    engine: Engine,
    fixed: ServingFixed,
    options: ServingOptions,
    deadline: float,
    top: int = 1,
) -> tuple[list[Candidate], int]:
    """Every aggregated candidate scored by evaluate_serving, except (goodput per GPU) those a
    bound proves worse than a row already scored: a replica completes at most its share of the
    offered rate, or closed loop its b = min(max_batch, max(1, C / r)) sequences at their
    decode-only round (cost/serving_pools.py decode_rate_at), so r replicas of g GPUs give at
    most rate / (r g), or b / (osl tau(b) g), per GPU. Best first: the candidates are scored in
    the order of their bounds, highest first, until the next bound is below the ``top``-th best
    value of distinct layouts scored (``layout_of``; every later bound is too, so no unscored
    plan can tie the optimum or displace a runner-up of another layout); the rows are returned
    in the table order of ``aggregated_plans`` (CP-SAT's tie-break, ``_pick``)."""
    plans = list(aggregated_plans(spec, cluster, fixed, options))
    order = list(range(len(plans)))
    bounds = [math.inf] * len(plans)
    if options.objective == "goodput_per_gpu":
        one_seq: dict[tuple[int, int, int, bool, float], float] = {}
        bounds = [_per_gpu_bound(spec, cluster, workload, engine, p, g, one_seq) for p, g in plans]
        order.sort(key=lambda i: -bounds[i])  # stable: table order among equal bounds
    scored: list[tuple[int, Candidate]] = []
    count = 0
    best_of: dict[tuple[object, ...], float] = {}  # goodput per GPU: the best value per layout
    for i in order:
        if time.perf_counter() > deadline:
            raise TimeoutError(f"the time limit ran out while scoring {count:,} serving candidates")
        if len(best_of) >= top and bounds[i] < sorted(best_of.values(), reverse=True)[top - 1]:
            break
        count += 1
        row = qualify(spec, cluster, workload, engine, plans[i][0], options.objective)
        if row is not None:
            scored.append((i, row))
            if options.objective == "goodput_per_gpu":
                key = layout_of(row[0])
                best_of[key] = max(best_of.get(key, -1.0), row[2])
    return [row for _, row in sorted(scored, key=lambda r: r[0])], count


def _per_gpu_bound(
    spec: ModelSpec,
    cluster: Cluster,
    workload: Workload,
    engine: Engine,
    plan: ServingPlan,
    gpus: int,
    memo: dict[tuple[int, int, int, bool, float], float],
) -> float:
    """An upper bound on an aggregated plan's goodput per GPU (``_aggregated_rows``), with a
    margin of 1e-6 against rounding."""
    if workload.request_rate is not None:
        return workload.request_rate * (1 + 1e-6) / gpus
    # a replica runs at most b = min(max_batch, max(1, C / r)) sequences, and B / tau(B) (the
    # decode-only round, which a mixed round only lengthens) does not fall as B grows: every part
    # of a step is linear in B, a maximum of linear parts or concave (experts hit, the fastest
    # collective), so tau(B) / B does not rise; r replicas of g GPUs: r rate(b) / (r g)
    batch = min(float(plan.max_batch), max(1.0, float(workload.concurrency or 1) / plan.replicas))
    key = (plan.tp, plan.pp, plan.ep, plan.dp_attention, batch)
    if key not in memo:
        worker = WorkerPlan(tp=plan.tp, pp=plan.pp, ep=plan.ep, dp_attention=plan.dp_attention)
        memo[key] = decode_rate_at(spec, cluster, worker, workload, engine, batch)
    return plan.replicas * memo[key] * (1 + 1e-6) / gpus


def _lex_units(keys: Sequence[tuple[int, ...]]) -> list[int]:
    """Lexicographic integer keys as one integer each, order kept: each key's rank among them
    (0 for the least; keys are distinct, the last component being the row index)."""
    order = sorted(range(len(keys)), key=lambda i: keys[i])
    rank = [0] * len(keys)
    for r, i in enumerate(order):
        rank[i] = r
    return rank


def _select(units: list[int], time_limit_s: float, workers: int, seed: int) -> tuple[int, str, int]:
    """CP-SAT: exactly one row, least units. Returns (row, status, bound units)."""
    model = cp_model.CpModel()
    use = [model.new_bool_var(f"use_{i}") for i in range(len(units))]
    model.add_exactly_one(use)
    model.minimize(sum(u * b for u, b in zip(units, use, strict=True)))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, time_limit_s)
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = seed
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise TimeoutError("CP-SAT found no serving plan within the time limit")
    chosen = next(i for i, b in enumerate(use) if solver.boolean_value(b))
    return chosen, "OPTIMAL" if status == cp_model.OPTIMAL else "FEASIBLE", int(solver.best_objective_bound)


def _pick(
    candidates: list[Candidate],
    objective: ServingObjective,
    time_limit_s: float,
    workers: int,
    seed: int,
) -> tuple[list[int], str]:
    """CP-SAT's choice of one row (the best by ``objective_units``, ties by table order) and the
    rows in objective order after it."""
    keys = [objective_units(v, p, objective) for _, p, v in candidates]
    units = _lex_units([(*k, i) for i, k in enumerate(keys)])
    best, status, _bound = _select(units, max(time_limit_s, 1.0), workers, seed)
    order = sorted(range(len(candidates)), key=lambda i: units[i])
    return [best] + [i for i in order if i != best], status


def solve_serving(
    spec: ModelSpec,
    cluster: Cluster,
    workload: Workload,
    engine: Engine,
    fixed: ServingFixed,
    options: ServingOptions,
    *,
    time_limit_s: float = 30.0,
    workers: int = 2,
    seed: int = 0,
    top: int = 2,
) -> ServingOutcome:
    """The best plan (and runners-up of other layouts) of the serving space for
    ``options.objective``: the aggregated table's CP-SAT choice and the disaggregated branch and
    bound (solver/serving_disagg.py), the better of the two; OPTIMAL when both are proven."""
    from paraplan.solver.serving_disagg import search_disaggregated

    start = time.perf_counter()
    deadline = start + time_limit_s
    objective = options.objective
    modes = searched_modes(fixed, options)
    candidates: list[Candidate] = []
    count, status, bounds = 0, "OPTIMAL", []
    if "aggregated" in modes:
        rows, n = _aggregated_rows(spec, cluster, workload, engine, fixed, options, deadline, top)
        count += n
        if rows:
            order, st = _pick(rows, objective, deadline - time.perf_counter(), workers, seed)
            status = st if st != "OPTIMAL" else status
            candidates += [rows[i] for i in order]
    if "disaggregated" in modes:  # the aggregated optimum is the incumbent to beat
        incumbent = candidates[0][2] if candidates else None
        d = search_disaggregated(
            spec, cluster, workload, engine, fixed, options, deadline, seed, top, incumbent
        )
        count += d.num_candidates
        status = d.status if d.status != "OPTIMAL" else status
        if d.status != "OPTIMAL":
            bounds.append(d.bound)
        if d.plan is not None and d.prediction is not None and d.value is not None:
            candidates += [(d.plan, d.prediction, d.value), *d.runners]
    if not candidates:
        if status != "OPTIMAL":
            raise TimeoutError("the time limit ran out before any serving plan was scored; raise it")
        raise ServingNoPlan(_no_plan_message(objective, count), _families(objective))
    order, _ = _pick(candidates, objective, deadline - time.perf_counter(), workers, seed)
    picked = _distinct([candidates[i] for i in order], top)
    solutions = tuple(_check(spec, cluster, workload, engine, objective, *c) for c in picked)
    best = solutions[0].value
    bound = best
    if bounds:  # an unproven disaggregated search: the best it could still find
        bound = max([best, *bounds]) if objective == "goodput_per_gpu" else min([best, *bounds])
    return ServingOutcome(
        status=status,
        solutions=solutions,
        bound=bound,
        wall_s=time.perf_counter() - start,
        num_candidates=count,
    )


def layout_of(plan: ServingPlan) -> tuple[object, ...]:
    """What a runner-up must differ in: the mode, the degrees and the replica / worker counts
    (a plan that differs only in max_batch, e.g. above the batch its KV cache holds, is the same
    partition)."""
    if plan.mode == "disaggregated":
        return (plan.mode, plan.prefill, plan.decode)
    return (plan.mode, plan.tp, plan.pp, plan.ep, plan.dp_attention, plan.replicas)


def _distinct(ordered: list[Candidate], top: int) -> list[Candidate]:
    out, seen = [], set()
    for c in ordered:
        key = layout_of(c[0])
        if key in seen:
            continue
        seen.add(key)
        out.append(c)
        if len(out) == top:
            break
    return out


def _check(
    spec: ModelSpec,
    cluster: Cluster,
    workload: Workload,
    engine: Engine,
    objective: ServingObjective,
    plan: ServingPlan,
    pred: ServingPrediction,
    value: float,
) -> ServingSolution:
    """Re-score the chosen plan with evaluate_serving itself: it must qualify and reproduce the
    table's objective (to 1e-9 relative), or the solve fails loudly (invariant 2)."""
    again = evaluate_serving(spec, cluster, plan, workload, engine)
    if again.gpus != plan_gpus(plan):
        raise AssertionError(
            f"serving solver: {plan} uses {again.gpus} GPUs, the search counted {plan_gpus(plan)}"
        )
    v = objective_value(again, workload, objective)
    if v is None or not math.isclose(v, value, rel_tol=1e-9, abs_tol=1e-12):
        raise AssertionError(f"serving solver: {plan} re-scores to {v}, the table said {value}")
    return ServingSolution(plan, again, v)


def _families(objective: ServingObjective) -> tuple[str, ...]:
    return ("memory",) if objective == "goodput_per_gpu" else ("memory", "slo")


def _no_plan_message(objective: ServingObjective, count: int) -> str:
    why = {
        "goodput_per_gpu": "fits memory",
        "min_gpus": "fits memory, meets the SLO and serves workload.request_rate",
        "min_ttft": "fits memory, meets the TPOT SLO and serves the load",
    }[objective]
    return (
        f"no serving plan of the {count:,} candidates searched {why}; a larger cluster, lower "
        "precision (workload.weights_precision / kv_precision) or a looser SLO may"
    )
