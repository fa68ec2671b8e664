"""A ``top`` = 1 solve names its runner-up from what the search saw (solver/solve.py ``Seen``;
issue 26, the speed line): the best plan is the top-2 search's, and what the runner-up line
claims holds against the top-2 search's proven next best.

- proven: the same step as the top-2 search's runner-up (the next best, proven);
- not proven: never faster than that runner-up, and the stated bound on every other layout
  (``others_bound_s``) is no more than its step: "no other layout is below X s" is true;
- the explanation says which (paraplan/reports/explain.py ``RunnerProof``);
- ``_runner_up`` itself, on two layouts whose optima are known: proven when every other layout
  is bounded above the runner-up, else the bound it states is the least one.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from paraplan.cost import Layout, PartialPlan, Recompute
from paraplan.solver.cpsat import SolverOptions
from paraplan.solver.distinct import DUPLICATE_REL
from paraplan.solver.scale import TIME_RESOLUTION_S, objective_scale, resolution_for
from paraplan.solver.solve import Outcome, _runner_up, _solve_layout, solve_instance
from paraplan.solver.tables import build_tables

import paraplan
from paraplan.api import fixed_knobs, search_options
from paraplan.instance import build_instance
from paraplan.planning import runnable_options, target_options

SCENARIOS = [
    ("llama3-8b", "dgx-h100", 1, 4096, 64, None),
    ("llama3-8b", "dgx-h100", 4, 4096, 256, "megatron"),
    ("llama2-13b", "dgx-a100-40gb", 2, 4096, 128, None),
    ("gpt3-6.7b", "dgx-a100-80gb", 4, 2048, 256, "deepspeed"),
    ("llama3.1-8b", "dgx-h100", 2, 8192, 128, "torchtitan"),
    ("mixtral-8x7b", "dgx-h100", 2, 4096, 64, None),
    ("llama2-70b", "dgx-h100", 8, 4096, 256, "any"),
]


def _both(
    model: str, node: str, nodes: int, seq: int, batch: int, target: str | None
) -> tuple[Outcome, Outcome]:
    scenario = {
        "model": {"preset": model},
        "cluster": {"preset": node, "nodes": nodes},
        "job": {"seq_len": seq, "global_batch": batch},
    }
    if target is not None:
        scenario["solver"] = {"target": target}
    inst = build_instance(paraplan.load_scenario(scenario))
    base = search_options(inst)
    if target is None:  # the runnable default's one search (planning.runnable_options)
        options = runnable_options(base, inst).options or base
    else:
        options = base if target == "any" else target_options(base, target, inst)
    fixed = fixed_knobs(inst)
    opts = SolverOptions(
        time_limit_s=120, num_workers=2, top=1, duplicate_rel=DUPLICATE_REL, runner_up_seen=True
    )
    one = solve_instance(inst.graph, inst.cluster, inst.job, fixed, options, opts)
    two = solve_instance(inst.graph, inst.cluster, inst.job, fixed, options, replace(opts, top=2))
    return one, two


def test_the_runner_up_seen_holds_against_the_top2_proof() -> None:
    checked = 0
    for case in SCENARIOS:
        one, two = _both(*case)
        assert one.status == two.status == "OPTIMAL", case
        assert one.solutions[0].plan == two.solutions[0].plan, case
        assert one.solutions[0].objective_s == two.solutions[0].objective_s
        seen = one.seen
        assert seen is not None and len(one.solutions) == 1
        if len(two.solutions) < 2:  # no other layout: nothing seen can be proven second
            assert seen.plan is None or not seen.proven, case
            continue
        second = two.solutions[1].objective_s
        slack = 1e-9 * second + 1e3 * TIME_RESOLUTION_S  # the ticks' rounding (scale.tolerance_s)
        assert seen.others_bound_s <= second + slack, case  # "no other layout below X" is true
        assert seen.plan is not None, case
        assert seen.plan.objective_s >= second - slack, case  # never faster than the proven next best
        if seen.proven:
            assert seen.plan.objective_s == pytest.approx(second, rel=1e-9, abs=slack), case
            assert seen.others_bound_s == seen.plan.objective_s
        checked += 1
    # a top-1 search seldom reaches past its own plan, so these runner-ups are unproven; the
    # proven case: test_the_runner_up_is_proven_when_every_other_layout_is_bounded_above_it
    assert checked >= 5


def test_the_explanation_says_whether_the_runner_up_is_proven() -> None:
    scenario = {
        "model": {"preset": "llama3-8b"},
        "cluster": {"preset": "dgx-h100", "nodes": 4},
        "job": {"seq_len": 4096, "global_batch": 256},
    }
    lazy = paraplan.solve(scenario, workers=2)
    full = paraplan.solve(scenario, workers=2, top=2)
    line = next(e for e in lazy.explanation if e.startswith("runner-up"))
    full_line = next(e for e in full.explanation if e.startswith("runner-up"))
    assert "not proven" not in full_line  # the top-2 search proved it: today's line
    assert lazy.plan == full.plan and lazy.predicted.step_time_s == full.predicted.step_time_s
    if "not proven the next best" in line:
        bound = float(line.split("no other layout is below ")[1].split(" s")[0])
        assert bound <= full.alternatives[0].step_time_s + 5e-4  # printed to the millisecond
        assert line.endswith("(--top 2 proves the next best)")
    else:  # proven: the top-2 search's own line
        assert line == full_line


def _two_tables() -> tuple:
    """Two layouts of Llama 3 8B on one DGX H100 node, their tables and their own optima."""
    inst = build_instance(
        paraplan.load_scenario(
            {
                "model": {"preset": "llama3-8b"},
                "cluster": {"preset": "dgx-h100", "nodes": 1},
                "job": {"seq_len": 4096, "global_batch": 64},
            }
        )
    )
    layouts = [Layout(dp=8, tp=1, pp=1), Layout(dp=2, tp=2, pp=2)]
    tables = [build_tables(inst.graph, inst.cluster, inst.job, lay, list(Recompute)) for lay in layouts]
    res = resolution_for(
        max(t.ceiling_s() for t in tables),
        objective_scale([t.terms.bubble_weight.denominator for t in tables]),
    )
    kept = [replace(t, resolution_s=res) for t in tables]
    opts = SolverOptions(num_workers=1, duplicate_rel=DUPLICATE_REL, runner_up_seen=True)
    memo = {}
    for i, tab in enumerate(kept):
        memo[i] = _solve_layout(tab, inst.graph, PartialPlan(), opts, None, float("inf"), None, 0.0)
        assert memo[i][0] == "OPTIMAL"
    best = min(range(2), key=lambda i: memo[i][1].objective_s)
    return inst, kept, memo, best, opts


def test_the_runner_up_is_proven_when_every_other_layout_is_bounded_above_it() -> None:
    inst, kept, memo, best, opts = _two_tables()
    other = 1 - best
    where = (inst.graph, inst.cluster, inst.job, float("inf"))
    step = memo[other][1].objective_s
    args = (kept, [], float("inf"), memo, best, memo[best][1], PartialPlan(), opts, where)
    seen = _runner_up(*args)  # every other layout solved: the next best, proven
    assert seen.proven and seen.plan is not None and seen.others_bound_s == step
    assert seen.plan.objective_s == step and seen.plan.plan.layout == kept[other].plan
    low = step * 0.99  # a layout never built might hold a plan below it: not proven, and said
    seen = _runner_up(kept, [], low, memo, best, memo[best][1], PartialPlan(), opts, where)
    assert not seen.proven and seen.others_bound_s == low and seen.plan is not None
    unsolved = {best: memo[best]}  # the other layout's own optimum unknown: its upper plan, its bound
    seen = _runner_up(kept, [], float("inf"), unsolved, best, memo[best][1], PartialPlan(), opts, where)
    assert not seen.proven and seen.plan is not None
    assert seen.plan.objective_s == kept[other].upper_bound_s >= step
    assert seen.others_bound_s == kept[other].lower_bound_s <= step
