"""The cluster search: which node type and how many devices train ``job.tokens`` fastest (or
cheapest, or on the fewest GPUs) under the cost model, with failures and checkpoints in the time
to train (cost/reliability.py), proven by the branch and bound of solver/capacity.py.

Candidates: every node type of ``cluster.choose.presets`` at every device count of its ``step``
between ``min_gpus`` and ``max_gpus``. Each gets a proven lower bound on its objective from the
step-time bound of solver/capacity.py (its goodput is non-increasing in the step time, so the
bound's goodput is an upper bound); candidates are solved in order of that bound with the planner
itself (``paraplan.solve``: its own branch and bound and CP-SAT, OPTIMAL per cluster), until the
least bound left exceeds the K-th best solved objective. On one cluster the fastest plan is also
the one with the shortest time to train and the least cost (goodput falls with the step time;
cost is time x GPUs x price), so each per-cluster optimum is the cluster's optimum.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paraplan.capacity.out import CapacityOut, ClusterOption
from paraplan.capacity.sections import ChooseSection
from paraplan.capacity.terms import (
    ClusterTerms,
    TrainingTerms,
    cluster_terms,
    training_bound_of,
    training_of,
)
from paraplan.errors import ConfigError, InfeasibleError, SolveTimeout
from paraplan.hardware import Cluster, build_cluster, node_type
from paraplan.instance import build_instance
from paraplan.reports.explain import summary
from paraplan.result import Result
from paraplan.scenario.plan_doc import plan_of
from paraplan.scenario.schema import Scenario, load_scenario
from paraplan.solver.capacity import (
    Candidate,
    CapacityOutcome,
    Examined,
    Key,
    Solved,
    branch_and_bound,
    least_device_seconds,
)

__all__ = ["solve_capacity", "gpu_counts", "MAX_CANDIDATES"]

MAX_CANDIDATES = 20_000
"""Clusters one search may consider (node types x device counts)."""
MIN_SOLVE_S = 1.0  # the least time a candidate's own solve is given


@dataclass(frozen=True, slots=True)
class Option:
    """One candidate cluster with its plan-independent terms."""

    preset: str
    gpus: int
    cluster: Cluster
    terms: ClusterTerms


def gpu_counts(choose: ChooseSection, devices_per_node: int) -> list[int]:
    """The device counts ``choose.step`` gives between min_gpus and max_gpus: whole nodes
    (``node``), one node doubled (``double``) or multiples of N (a count that is not whole nodes
    of this type is left out)."""
    lo, hi = choose.min_gpus, choose.max_gpus
    if choose.step == "node":
        first = max(1, -(-lo // devices_per_node))
        return [k * devices_per_node for k in range(first, hi // devices_per_node + 1)]
    if choose.step == "double":
        out, n = [], devices_per_node
        while n <= hi:
            if n >= lo:
                out.append(n)
            n *= 2
        return out
    step = int(choose.step)
    first = -(-lo // step) * step
    return [n for n in range(first, hi + 1, step) if n % devices_per_node == 0]


def _key(objective: str, tt: TrainingTerms, gpus: int) -> Key:
    """The objective as a tuple compared lexicographically (ties: the other measure)."""
    cost = tt.cost_usd if tt.cost_usd is not None else 0.0
    if objective == "cost":
        return (cost, tt.time.wall_s)
    if objective == "gpus":
        return (float(gpus), tt.time.wall_s)
    return (tt.time.wall_s, cost)


def _within(sc: Scenario, tt: TrainingTerms) -> bool:
    """The time to train and cost meet job.deadline_days and job.budget_usd."""
    job = sc.job
    if job.deadline_days is not None and tt.time.days > job.deadline_days:
        return False
    return not (job.budget_usd is not None and tt.cost_usd is not None and tt.cost_usd > job.budget_usd)


def _concrete(base: dict[str, Any], sc: Scenario, preset: str, gpus: int) -> dict[str, Any]:
    """The scenario on one candidate cluster (what the result records and evaluate reads back)."""
    data = copy.deepcopy(base)
    cluster: dict[str, Any] = {"preset": preset, "gpus": gpus}
    price = sc.cluster.price_per_gpu_hour
    if isinstance(price, dict):
        if preset in price:
            cluster["price_per_gpu_hour"] = price[preset]
    elif price is not None:
        cluster["price_per_gpu_hour"] = price
    if sc.cluster.storage is not None:
        cluster["storage"] = data["cluster"]["storage"]
    data["cluster"] = cluster
    if data.get("objective") == "gpus":
        data.pop("objective")
    return data


def _options(sc: Scenario, base: dict[str, Any], required_price: bool) -> list[tuple[Option, Any]]:
    """Every candidate cluster with its node type's step-time bound ``G``."""
    choose = sc.cluster.choose
    assert choose is not None
    out: list[tuple[Option, Any]] = []
    for preset in choose.presets:
        try:
            dpn = node_type(preset).devices_per_node
        except ValueError as e:
            raise ConfigError(f"cluster.choose.presets: {e}") from None
        counts = gpu_counts(choose, dpn)
        if not counts:
            continue
        if len(out) + len(counts) > MAX_CANDIDATES:
            raise ConfigError(
                f"cluster.choose gives more than {MAX_CANDIDATES:,} clusters; narrow min_gpus/max_gpus "
                "or use step: double"
            )
        inst = build_instance(load_scenario(_concrete(base, sc, preset, counts[-1])), search=True)
        bound = least_device_seconds(
            inst.graph, inst.cluster, inst.job, sc.solver.max_micro_batch, counts[-1]
        )
        for n in counts:
            cluster = build_cluster(preset, gpus=n)
            terms = cluster_terms(sc, preset, cluster, inst.graph.num_params, required_price)
            out.append((Option(preset, n, cluster, terms), bound))
    if not out:
        raise ConfigError(
            f"cluster.choose: no node of {choose.presets} gives a GPU count from {choose.min_gpus:,} to "
            f"{choose.max_gpus:,} with step {choose.step}; widen the range"
        )
    return out


def _option_out(ex: Examined[Option]) -> ClusterOption | None:
    detail = ex.solved.detail
    if not isinstance(detail, tuple):
        return None
    result, tt = detail
    o = ex.candidate.item
    return ClusterOption(
        preset=o.preset,
        gpus=o.gpus,
        nodes=o.cluster.num_nodes,
        time_to_train_days=tt.time.days,
        cost_usd=tt.cost_usd,
        effective_training_time_ratio=tt.good.ratio,
        step_time_s=result.predicted.step_time_s,
        plan=summary(plan_of(result.plan)),
        status=result.solver.status if result.solver else "EVALUATED",
    )


def solve_capacity(
    scenario: str | Path | dict[str, Any] | Scenario,
    *,
    time_limit_s: float = 30.0,
    workers: int = 2,
    top: int = 1,
    seed: int = 0,
) -> Result:
    """The proven-best cluster and its plan (module docstring); ``top``: the K best distinct
    clusters in ``result.capacity.clusters``. InfeasibleError when no cluster meets the limits."""
    from paraplan.api import solve  # the planner for each candidate (api imports this lazily)

    started = time.perf_counter()
    deadline = started + time_limit_s
    sc = load_scenario(scenario)
    objective = sc.objective or "time_to_train"
    base = sc.model_dump(mode="json", exclude_none=True)
    required_price = objective == "cost" or sc.job.budget_usd is not None
    cands: list[Candidate[Option]] = []
    least = [float("inf"), float("inf")]  # the least time (days) and cost any cluster can have
    options = _options(sc, base, required_price)
    no_layout = 0  # device counts no layout divides (proven infeasible without a solve)
    for opt, bound in options:
        step_lb = bound.step_lower_bound_s(opt.gpus, sc.job.global_batch)
        if step_lb == float("inf"):
            no_layout += 1
            continue
        tt = training_bound_of(sc, opt.terms, step_lb)
        least[0] = min(least[0], tt.time.days)
        least[1] = min(least[1], tt.cost_usd if tt.cost_usd is not None else float("inf"))
        cands.append(Candidate(opt, _key(objective, tt, opt.gpus), _within(sc, tt)))

    def solve_one(cand: Candidate[Option], until: float) -> Solved[Option]:
        o = cand.item
        left = until - time.perf_counter()
        if left < MIN_SOLVE_S:
            return Solved(None, False, cand.lower)
        try:
            result = solve(  # each candidate's search alone: no second search for more headroom
                _concrete(base, sc, o.preset, o.gpus),
                time_limit_s=left,
                workers=workers,
                seed=seed,
                more_headroom=False,
            )
        except InfeasibleError:
            return Solved(None, True, cand.lower)
        except SolveTimeout:
            return Solved(None, False, cand.lower)
        assert result.solver is not None
        tt = training_of(sc, o.terms, result.predicted.step_time_s)
        proven = result.solver.status == "OPTIMAL"
        bound_tt = training_bound_of(sc, o.terms, min(result.solver.bound_s, result.predicted.step_time_s))
        bound = max(cand.lower, _key(objective, bound_tt, o.gpus))
        key = _key(objective, tt, o.gpus) if _within(sc, tt) else None
        if key is None and not proven and _within(sc, bound_tt):
            return Solved(None, False, bound, (result, tt))
        return Solved(key, proven, bound, (result, tt))

    out = branch_and_bound(cands, solve_one, top, deadline)
    if not out.best:
        _no_cluster(sc, out, len(options), least)
    return _result(sc, objective, out, len(options), no_layout, cands)


def _no_cluster(sc: Scenario, out: CapacityOutcome[Option], count: int, least: list[float]) -> None:
    """InfeasibleError (proven) or SolveTimeout with what a person can change."""
    limits = []
    if sc.job.deadline_days is not None:
        limits.append(f"job.deadline_days={sc.job.deadline_days:g}")
    if sc.job.budget_usd is not None:
        limits.append(f"job.budget_usd={sc.job.budget_usd:,.0f}")
    near = [ex for ex in out.examined if isinstance(ex.solved.detail, tuple)]
    hint = ""
    if near:
        best = min(near, key=lambda ex: ex.solved.detail[1].time.days)  # type: ignore[index]
        tt = best.solved.detail[1]  # type: ignore[index]
        cost = f", ${tt.cost_usd:,.0f}" if tt.cost_usd is not None else ""
        hint = (
            f"; the fastest solved was {best.candidate.item.preset} x {best.candidate.item.gpus}: "
            f"{tt.time.days:.1f} days{cost}"
        )
    if out.status == "INFEASIBLE":
        what = " and ".join(limits) if limits else "memory and the layout rules"
        floor = []
        if sc.job.deadline_days is not None and least[0] < float("inf"):
            floor.append(f"no cluster can train in under {least[0]:,.1f} days")
        if sc.job.budget_usd is not None and least[1] < float("inf"):
            floor.append(f"none for less than ${least[1]:,.0f}")
        bounds = f" (by the bounds, {' and '.join(floor)})" if floor else ""
        raise InfeasibleError(
            f"no cluster of the {count:,} in cluster.choose meets {what}{bounds}{hint}; raise the "
            "limit or widen cluster.choose (node types, min_gpus / max_gpus)"
        )
    raise SolveTimeout(
        f"no cluster solved within the time limit ({out.wall_s:.1f} s, {len(out.examined)} of {count:,} "
        f"examined){hint}; raise --time-limit"
    )


def _result(
    sc: Scenario,
    objective: str,
    out: CapacityOutcome[Option],
    count: int,
    no_layout: int,
    cands: list[Candidate[Option]],
) -> Result:
    from paraplan.capacity.explain import explain_choice

    winner = out.best[0]
    detail = winner.solved.detail
    assert isinstance(detail, tuple)
    result: Result = detail[0]
    options = [o for o in (_option_out(ex) for ex in out.best) if o is not None]
    solved = [ex for ex in out.examined if isinstance(ex.solved.detail, tuple)]
    cheaper = [ex for ex in solved if _cost(ex) < _cost(winner) and ex is not winner]
    faster = [ex for ex in solved if _days(ex) < _days(winner) and ex is not winner]
    next_cheaper = _option_out(max(cheaper, key=_cost)) if cheaper else None
    next_faster = _option_out(max(faster, key=_days)) if faster else None
    key = winner.solved.key
    assert key is not None and out.bound is not None
    gap = (key[0] - out.bound[0]) / key[0] if key[0] > 0 else 0.0
    infeasible = no_layout + sum(1 for ex in out.examined if ex.solved.key is None and ex.solved.proven)
    cap = CapacityOut(
        objective=objective,
        status=out.status,
        objective_value=key[0],
        bound=out.bound[0],
        gap=max(0.0, gap),
        candidates=count,
        solved=len(out.examined),
        pruned_by_bound=out.pruned_by_bound,
        pruned_by_limits=out.pruned_by_limits,
        infeasible=infeasible,
        not_examined=out.not_examined,
        wall_s=out.wall_s,
        clusters=options,
        examined=[o for o in (_option_out(ex) for ex in solved) if o is not None],
        next_cheaper=next_cheaper,
        next_faster=next_faster,
    )
    unsolved = _unsolved_bounds(sc, out, cands)
    cap = cap.model_copy(update={"explanation": explain_choice(sc, cap, out, unsolved)})
    return result.model_copy(update={"capacity": cap})


def _unsolved_bounds(
    sc: Scenario, out: CapacityOutcome[Option], cands: list[Candidate[Option]]
) -> dict[str, str]:
    """Per node type none of whose clusters was solved: why (its least bound, and whether every
    one of its clusters misses the limits by bound)."""
    solved = {ex.candidate.item.preset for ex in out.examined}
    why: dict[str, str] = {}
    for preset in {c.item.preset for c in cands} - solved:
        mine = [c for c in cands if c.item.preset == preset]
        if all(not c.feasible_bound for c in mine):
            limits = " and ".join(
                f"{k}={v:g}"
                for k, v in (
                    ("job.deadline_days", sc.job.deadline_days),
                    ("job.budget_usd", sc.job.budget_usd),
                )
                if v is not None
            )
            why[preset] = f"every one of its {len(mine)} clusters misses {limits} by its bound"
        else:
            least = min(c.lower[0] for c in mine if c.feasible_bound)
            unit = "$" if (sc.objective or "time_to_train") == "cost" else ""
            value = f"${least:,.0f}" if unit else f"{least / 86_400:,.1f} days"
            if sc.objective == "gpus":
                value = f"{least:,.0f} GPUs"
            why[preset] = f"its {len(mine)} clusters' least bound, {value}, is worse than the choice"
    return why


def _cost(ex: Examined[Option]) -> float:
    tt = ex.solved.detail[1]  # type: ignore[index]
    return tt.cost_usd if tt.cost_usd is not None else tt.time.gpu_hours


def _days(ex: Examined[Option]) -> float:
    return float(ex.solved.detail[1].time.days)  # type: ignore[index]
