"""The disaggregated serving search (issue 23): one prefill worker layout, one decode worker
layout and max_batch, and the integer numbers of each that balance their rates, proven best by
CP-SAT (solver/serving.py's module docstring has the objectives).

Tables (cost/serving_pools.py, the same physics as cost/serving.py; of the max_batch values that
leave a decode worker the same cap on its batch, closed loop the same min(cap, C / n_d), only the
least: max_batch enters the disaggregated model only through those, so the others tie with it
and lose the tie-break): per prefill layout i its
GPUs g_i, its capacity r_i (prompts/s per worker) and the least workers m_i whose mean TTFT can
meet the SLO at the offered rate; per decode layout and max_batch j its GPUs g_j and its rate
r_j (requests/s per worker at its largest batch within the KV cache, max_batch and the TPOT
SLO); closed loop one decode row per worker count n as well, its rate at the batch
min(cap, SLO batch, max(1, C / n)) each of n workers holds at most, and c_j: one sequence over
osl x its round, so that (C + n_d) c_j bounds what n_d such workers complete, and with a TTFT
SLO the least rate q_j Little's law leaves for it (cost/serving_pools.py closed_loop_min_rate:
rows below it are dropped, and the prefill pool must carry it) and W_j, the first wave's
prompts min(C, n cap), which n_p prefill workers must take within the SLO: W_j <= Q_i n_p
(cost/serving_pools.py ``_wave_limit``). Rates enter as
integers of one unit
(``RATE_LEVELS``), rounded up (the bounds stay bounds).

CP-SAT model: Booleans x_i, z_j (exactly one of each), workers n_i in [m_i x_i, N x_i] and
n_j in [z_j, N z_j], GPUs G = sum g_i n_i + sum g_j n_j <= N (= plan.num_devices when fixed),
T <= sum r_i n_i, T <= sum r_j n_j, T <= the offered rate (open loop) or
T <= sum (C c_j z_j + c_j n_j) (closed loop). goodput_per_gpu, in Dinkelbach's parametric form
of max T / G: T - lambda G >= 1 with lambda the incumbent's goodput per GPU in units, maximising
T - lambda G (linear; an earlier y G <= T over a Boolean per value of G made one bounding solve of
DeepSeek-V3 on 72 GPUs take 2.5 s); min_gpus: minimise G with
T >= the offered rate; min_ttft: minimise the chosen prefill layout's TTFT floor with T >= the rate.
That objective bounds the true one of every assignment (cost/serving_pools.py says why), so the
search is branch and bound with CP-SAT as the bounding step: solve, score the assignment's whole
plan with ``evaluate_serving``, keep the best, forbid that assignment (a no-good) and ask for a
strictly better bound, until CP-SAT proves none is left (OPTIMAL: the incumbent is the optimum of
the whole space, as enumerating every plan would find; tests/solver/test_oracle_serving.py) or
the time runs out (FEASIBLE, with the last bound). The aggregated optimum, when aggregated plans
are searched too, is the first incumbent. One CP-SAT worker inside the loop, so the
order of the assignments, and the plan among ties, does not depend on the worker count.

Size: the tables, the CP-SAT model and the branch-and-bound loop are one algorithm whose parts
share the same row types and units (a bound computed in one is a constraint in the next); split,
each would re-declare them.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

from ortools.sat.python import cp_model
from paraplan.cost.serving import Engine, ServingPlan, ServingPrediction, WorkerPlan, Workload
from paraplan.cost.serving_pools import (
    closed_loop_min_rate,
    decode_bound,
    decode_rate_at,
    decode_slo_batch,
    prefill_bound,
)
from paraplan.graph import ModelSpec
from paraplan.hardware import Cluster
from paraplan.solver.scale import SERVING_RESOLUTION, serving_units
from paraplan.solver.serving_objective import Candidate, qualify
from paraplan.solver.serving_space import ServingFixed, ServingOptions, WorkerFixed, worker_layouts

__all__ = ["DisaggSearch", "search_disaggregated"]


@dataclass(frozen=True, slots=True)
class _Prefill:
    worker: WorkerPlan
    gpus: int
    rate_rps: float
    min_workers: int
    max_workers: int
    floor_units: int  # TTFT floor, SERVING_RESOLUTION["ms"] units
    wave_per_worker: float = math.inf  # closed loop: most first-wave prompts per worker (TTFT SLO)


@dataclass(frozen=True, slots=True)
class _Decode:
    worker: WorkerPlan
    max_batch: int
    gpus: int
    rate_rps: float
    max_workers: int
    closed_rps: float  # closed loop: C / (osl tau(1)) + n_d / (osl tau(1)) bounds the pool
    closed_per_worker_rps: float
    workers: int | None = None  # closed loop: the row's own number of workers
    min_rate_rps: float = 0.0  # closed loop: the least requests/s whose mean TTFT meets the SLO
    wave: float = 0.0  # closed loop: the first wave's prompts, min(C, n_d cap)


@dataclass(frozen=True, slots=True)
class DisaggSearch:
    """The outcome: the best plan found (None: no plan qualifies), its prediction and objective
    value, the status, the bound in the objective's unit, candidates scored, CP-SAT rounds."""

    plan: ServingPlan | None
    prediction: ServingPrediction | None
    value: float | None
    status: str
    bound: float
    num_candidates: int
    rounds: int
    runners: tuple[Candidate, ...] = ()


RATE_LEVELS = 2**20
"""Rates enter CP-SAT as integers of one unit = the largest pool rate / RATE_LEVELS (rounded up,
so the bounds stay bounds): coefficients of ~10^6 keep CP-SAT's LP relaxation well conditioned
(units of 1e-9 req/s, ~10^11, made one bounding solve of 8 GPUs take 18 s). An assignment is
then left out when its bound beats the incumbent by less than one unit: optimal to 2^-20 of the
largest pool rate."""


def _up(rate_rps: float, unit: float) -> int:
    """A rate as integer units, rounded up (and one more against the float division)."""
    return math.ceil(rate_rps / unit) + 1 if rate_rps > 0 else 0


def _tables(
    spec: ModelSpec,
    cluster: Cluster,
    workload: Workload,
    engine: Engine,
    fixed: ServingFixed,
    options: ServingOptions,
    deadline: float = math.inf,
    incumbent: float | None = None,
) -> tuple[list[_Prefill], list[_Decode], int]:
    """The two tables (module docstring). ``incumbent`` (goodput per GPU): a layout none of whose
    rows can beat it is left out before its rows are built, by the bounds ``_can_win`` applies
    to the rows (the same rows reach CP-SAT): a prefill layout by its rate per GPU, a decode
    layout by its rate B / (osl tau(B)) at B = the largest max_batch (closed loop: at most
    max(1, C)), which no row's batch exceeds (a row's batch is at most its cap, its max_batch,
    and closed loop max(1, C / n_d)) and the rate does not fall as B grows (solver/serving.py
    ``_per_gpu_bound``): the TPOT SLO's bisection and the rows are skipped for it."""
    n = cluster.num_devices
    defaults = ServingPlan()
    mnt = fixed.max_num_tokens or defaults.max_num_tokens
    pf, df = fixed.prefill or WorkerFixed(), fixed.decode or WorkerFixed()
    prefills, decodes, count = [], [], 0
    for w in worker_layouts(spec, cluster, pf, options):
        _in_time(deadline, count)
        count += 1
        b = prefill_bound(spec, cluster, w, mnt, workload, engine)
        top = n // b.gpus if pf.workers is None else pf.workers
        low = max(b.min_workers, pf.workers or 1)
        if incumbent is not None and b.rate_per_worker_rps / b.gpus <= incumbent:
            continue  # _can_win would drop the row
        if b.fits and low <= top:
            floor = math.floor(b.ttft_floor_s * 1e3 / SERVING_RESOLUTION["ms"])
            prefills.append(_Prefill(w, b.gpus, b.rate_per_worker_rps, low, top, floor, b.wave_per_worker))
    batches = [fixed.max_batch] if fixed.max_batch is not None else list(options.max_batches)
    conc = workload.concurrency
    for w in worker_layouts(spec, cluster, df, options):
        _in_time(deadline, count)
        if incumbent is not None:
            widest = float(max(batches)) if conc is None else min(float(max(batches)), max(1.0, float(conc)))
            if decode_rate_at(spec, cluster, w, workload, engine, widest) / (w.tp * w.pp) <= incumbent:
                count += 1
                continue  # every row of the layout is at or below the incumbent: _can_win drops them
        slo_batch = decode_slo_batch(spec, cluster, w, workload, engine, float(max(batches)))
        rate_at: dict[float, float] = {}
        caps: set[float] = set()
        seen: set[tuple[int, float]] = set()
        for mb in sorted(batches):
            count += 1
            d = decode_bound(spec, cluster, w, mb, workload, engine, slo_batch)
            top = n // d.gpus if df.workers is None else df.workers
            if not d.fits or top < 1:
                continue
            if conc is None:  # a larger max_batch with the same cap: the same plans, later in the tie order
                if d.cap_batch in caps:
                    continue
                caps.add(d.cap_batch)
            if conc is None:
                decodes.append(_Decode(w, mb, d.gpus, d.rate_per_worker_rps, top, 0.0, 0.0))
                continue
            # closed loop: one row per worker count, each worker's batch at most max(1, C / n_d)
            for nd in [df.workers] if df.workers is not None else list(range(1, top + 1)):
                held = min(d.cap_batch, max(1.0, conc / nd))  # the batch and wave the plan sees
                if (nd, held) in seen:
                    continue
                seen.add((nd, held))
                batch = min(held, slo_batch)
                if batch not in rate_at:
                    rate_at[batch] = (
                        decode_rate_at(spec, cluster, w, workload, engine, batch) if batch > 0 else 0.0
                    )
                rate = rate_at[batch]
                tau_s = batch / (rate * workload.osl) if rate > 0 else float("inf")
                need = closed_loop_min_rate(workload, tau_s)
                if nd * rate >= need * (1 - 1e-12):  # else no plan with this row meets the TTFT SLO
                    decodes.append(
                        _Decode(
                            w,
                            mb,
                            d.gpus,
                            rate,
                            nd,
                            d.closed_loop_rps,
                            d.closed_per_worker_rps,
                            nd,
                            need,
                            min(float(conc), nd * d.cap_batch),
                        )
                    )
    return prefills, decodes, count


def _in_time(deadline: float, count: int) -> None:
    if time.perf_counter() > deadline:
        raise TimeoutError(f"the time limit ran out while bounding {count:,} disaggregated pool layouts")


class _Model:
    """The CP-SAT bounding model over the two tables (module docstring)."""

    def __init__(
        self,
        prefills: list[_Prefill],
        decodes: list[_Decode],
        cluster: Cluster,
        workload: Workload,
        fixed: ServingFixed,
    ) -> None:
        m = cp_model.CpModel()
        self.m, self.prefills, self.decodes = m, prefills, decodes
        n = cluster.num_devices
        top_rps = max(
            max(p.rate_rps * p.max_workers for p in prefills),
            max(d.rate_rps * d.max_workers for d in decodes),
        )
        self.unit = max(top_rps, 1e-300) / RATE_LEVELS
        pr = [_up(p.rate_rps, self.unit) for p in prefills]
        dr = [_up(d.rate_rps, self.unit) for d in decodes]
        dc = [_up(d.closed_rps, self.unit) for d in decodes]
        dw = [_up(d.closed_per_worker_rps, self.unit) for d in decodes]
        self.x = [m.new_bool_var(f"x{i}") for i in range(len(prefills))]
        self.z = [m.new_bool_var(f"z{j}") for j in range(len(decodes))]
        m.add_exactly_one(self.x)
        m.add_exactly_one(self.z)
        self.np = []
        for i, p in enumerate(prefills):
            v = m.new_int_var(0, p.max_workers, f"np{i}")
            m.add(v >= p.min_workers * self.x[i])
            m.add(v <= p.max_workers * self.x[i])
            self.np.append(v)
        self.nd = []
        for j, d in enumerate(decodes):
            v = m.new_int_var(0, d.max_workers, f"nd{j}")
            m.add(v >= (d.workers or 1) * self.z[j])
            m.add(v <= d.max_workers * self.z[j])
            self.nd.append(v)
        self.gpus = m.new_int_var(1, n, "gpus")
        m.add(
            self.gpus
            == sum(p.gpus * v for p, v in zip(prefills, self.np, strict=True))
            + sum(d.gpus * v for d, v in zip(decodes, self.nd, strict=True))
        )
        if fixed.num_devices is not None:
            m.add(self.gpus == fixed.num_devices)
        top_rate = RATE_LEVELS + 2
        self.pr, self.dr = pr, dr
        self.t = m.new_int_var(0, top_rate, "goodput")
        m.add(self.t <= sum(r * v for r, v in zip(pr, self.np, strict=True)))
        m.add(self.t <= sum(r * v for r, v in zip(dr, self.nd, strict=True)))
        self.rate_units: int | None = None
        if workload.request_rate is not None:
            self.rate_units = min(_up(workload.request_rate, self.unit), top_rate)
            m.add(self.t <= self.rate_units)
        for j, d in enumerate(decodes):  # closed loop: the TTFT SLO's least rate (Little's law)
            if d.min_rate_rps > 0:
                need = math.floor(d.min_rate_rps / self.unit)
                m.add(sum(r * v for r, v in zip(pr, self.np, strict=True)) >= need).only_enforce_if(self.z[j])
        if workload.concurrency is not None and workload.ttft_ms is not None:
            # the first wave's prompts per prefill worker within the TTFT SLO: W_j <= Q_i n_p
            k, cap = 1000, 1000 * workload.concurrency + 1
            q = [
                min(cap, math.ceil(p.wave_per_worker * k)) if math.isfinite(p.wave_per_worker) else cap
                for p in prefills
            ]
            m.add(
                sum(qi * v for qi, v in zip(q, self.np, strict=True))
                >= sum(math.floor(d.wave * k) * b for d, b in zip(decodes, self.z, strict=True))
            )
        if workload.concurrency is not None:  # closed loop: n_d B <= C + n_d sequences at once
            m.add(
                self.t
                <= sum(min(c, top_rate) * b for c, b in zip(dc, self.z, strict=True))
                + sum(min(c, top_rate) * v for c, v in zip(dw, self.nd, strict=True))
            )
        self.per_gpu_units = 0  # goodput per GPU: the incumbent lambda (units), T - lambda G >= 1
        self.floor = m.new_int_var(0, max((p.floor_units for p in prefills), default=0), "ttft_floor")
        m.add(self.floor == sum(p.floor_units * b for p, b in zip(prefills, self.x, strict=True)))

    def serve_the_rate(self) -> None:
        if self.rate_units is not None:
            m = self.m
            m.add(sum(r * v for r, v in zip(self.pr, self.np, strict=True)) >= self.rate_units - 1)
            m.add(sum(r * v for r, v in zip(self.dr, self.nd, strict=True)) >= self.rate_units - 1)

    def forbid(self, i: int, a: int, j: int, b: int) -> None:
        m = self.m
        e1, e2 = m.new_bool_var(""), m.new_bool_var("")
        m.add(self.np[i] == a).only_enforce_if(e1)
        m.add(self.np[i] != a).only_enforce_if(e1.Not())
        m.add(self.nd[j] == b).only_enforce_if(e2)
        m.add(self.nd[j] != b).only_enforce_if(e2.Not())
        m.add_bool_or([self.x[i].Not(), self.z[j].Not(), e1.Not(), e2.Not()])

    def assignment(self, s: cp_model.CpSolver) -> tuple[int, int, int, int]:
        i = next(k for k, b in enumerate(self.x) if s.boolean_value(b))
        j = next(k for k, b in enumerate(self.z) if s.boolean_value(b))
        return i, int(s.value(self.np[i])), j, int(s.value(self.nd[j]))


def _plan(p: _Prefill, a: int, d: _Decode, b: int, fixed: ServingFixed) -> ServingPlan:
    defaults = ServingPlan()
    return ServingPlan(
        mode="disaggregated",
        max_batch=d.max_batch,
        max_num_tokens=fixed.max_num_tokens or defaults.max_num_tokens,
        chunked_prefill=defaults.chunked_prefill if fixed.chunked_prefill is None else fixed.chunked_prefill,
        prefill=replace(p.worker, workers=a),
        decode=replace(d.worker, workers=b),
    )


def search_disaggregated(
    spec: ModelSpec,
    cluster: Cluster,
    workload: Workload,
    engine: Engine,
    fixed: ServingFixed,
    options: ServingOptions,
    deadline: float,
    seed: int = 0,
    top: int = 2,
    incumbent: float | None = None,
) -> DisaggSearch:
    """Branch and bound over the disaggregated plans (module docstring); ``incumbent``: an
    objective value already found (the aggregated optimum), which a plan must beat strictly to
    be returned (plan None, status OPTIMAL: proven that none does)."""
    # min_ttft minimises TTFT rather than holding it to its SLO: no TTFT cut in the bounds
    bounded = replace(workload, ttft_ms=None) if options.objective == "min_ttft" else workload
    beat = incumbent if options.objective == "goodput_per_gpu" else None
    prefills, decodes, count = _tables(spec, cluster, bounded, engine, fixed, options, deadline, beat)
    if options.objective == "goodput_per_gpu" and incumbent is not None:
        prefills, decodes = _can_win(prefills, decodes, incumbent)
    if not prefills or not decodes:
        return DisaggSearch(None, None, None, "OPTIMAL", 0.0, count, 0)
    mdl = _Model(prefills, decodes, cluster, bounded, fixed)
    objective = options.objective
    if objective in ("min_gpus", "min_ttft"):
        mdl.serve_the_rate()
    bound_var = {"goodput_per_gpu": mdl.t, "min_gpus": mdl.gpus, "min_ttft": mdl.floor}[objective]
    if objective == "goodput_per_gpu":  # Dinkelbach's parametric form of max T / G
        _tighten(mdl, objective, bound_var, incumbent or 0.0)
    else:
        mdl.m.minimize(bound_var)
        if incumbent is not None:
            _tighten(mdl, objective, bound_var, incumbent)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = seed
    solver.parameters.linearization_level = 2  # the full LP relaxation of the rate rows: fewer nodes
    found: list[Candidate] = []
    best: Candidate | None = None
    status, rounds = "OPTIMAL", 0
    bound = _trivial_bound(objective, prefills, decodes)  # until CP-SAT gives a better one
    while True:
        left = deadline - time.perf_counter()
        if left <= 0:
            status = "FEASIBLE"
            break
        solver.parameters.max_time_in_seconds = left
        st = solver.solve(mdl.m)
        rounds += 1
        if st == cp_model.INFEASIBLE:
            break
        if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            status = "FEASIBLE"
            break
        if objective != "goodput_per_gpu":  # (a bound on T - lambda G is not one on T / G)
            raw = solver.best_objective_bound if st == cp_model.FEASIBLE else solver.objective_value
            bound = _in_unit(objective, raw, mdl.unit)
        i, a, j, b = mdl.assignment(solver)
        plan = _plan(prefills[i], a, decodes[j], b, fixed)
        count += 1
        row = qualify(spec, cluster, workload, engine, plan, objective)
        mdl.forbid(i, a, j, b)
        if row is None:
            continue
        found.append(row)
        if best is None or _better(objective, row[2], best[2]):
            best = row
            _tighten(mdl, objective, bound_var, row[2])
    if best is None:
        return DisaggSearch(None, None, None, status, bound, count, rounds)
    others = sorted(
        (f for f in found if f[0] != best[0]),
        key=lambda f: -f[2] if objective == "goodput_per_gpu" else f[2],
    )
    if status == "OPTIMAL":
        bound = best[2]
    return DisaggSearch(best[0], best[1], best[2], status, bound, count, rounds, tuple(others[: top - 1]))


def _can_win(
    prefills: list[_Prefill], decodes: list[_Decode], incumbent: float
) -> tuple[list[_Prefill], list[_Decode]]:
    """The rows that can still beat an ``incumbent`` goodput per GPU: a plan with n_p workers of
    prefill row i and n_d of decode row j completes T <= r_i n_p and T <= r_j n_d requests/s on
    G > g_i n_p, G > g_j n_d GPUs, so T / G < r_i / g_i and < r_j / g_j (the rows' rates bound
    evaluate_serving's, cost/serving_pools.py); a row at or below the incumbent per GPU cannot
    be in a strictly better plan and leaves the CP-SAT model before the first bounding solve."""
    return (
        [p for p in prefills if p.rate_rps / p.gpus > incumbent],
        [d for d in decodes if d.rate_rps / d.gpus > incumbent],
    )


def _trivial_bound(objective: str, prefills: list[_Prefill], decodes: list[_Decode]) -> float:
    """A bound before any CP-SAT round: goodput per GPU <= the best prefill rate per GPU (T <= n_p
    r_i, G >= n_p g_i); GPUs >= the least pair; TTFT >= the least prefill floor."""
    if objective == "goodput_per_gpu":
        return max(p.rate_rps / p.gpus for p in prefills)
    if objective == "min_gpus":
        return float(min(p.gpus for p in prefills) + min(d.gpus for d in decodes))
    return min(p.floor_units for p in prefills) * SERVING_RESOLUTION["ms"]


def _in_unit(objective: str, v: float, unit: float) -> float:
    if objective == "goodput_per_gpu":
        return v * unit
    if objective == "min_ttft":
        return v * SERVING_RESOLUTION["ms"]
    return v


def _better(objective: str, a: float, b: float) -> bool:
    return a > b if objective == "goodput_per_gpu" else a < b


def _tighten(mdl: _Model, objective: str, var: cp_model.IntVar, value: float) -> None:
    """Only assignments whose bound beats the incumbent ``value`` strictly are left."""
    if objective == "goodput_per_gpu":  # T / G > lambda, i.e. T - lambda G >= 1, as high as it goes
        lam = math.floor(value / mdl.unit)
        mdl.per_gpu_units = lam
        mdl.m.add(var - lam * mdl.gpus >= 1)
        mdl.m.maximize(var - lam * mdl.gpus)
    elif objective == "min_gpus":
        mdl.m.add(var <= int(value) - 1)
    else:
        mdl.m.add(var <= serving_units(value, "ms") - 1)
