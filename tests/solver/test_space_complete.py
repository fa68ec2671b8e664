"""The search space holds every parallel layout the cost model accepts.

OPTIMAL means optimal over the space, and the enumeration oracle walks the same space, so a layout
``check_plan`` accepts but ``families`` never builds is a plan no proof covers (found by the memory
work: Mixtral 8x7B on 8 GB300 at ep 8 > dp*cp, Megatron's MoE parallel folding with etp = 1,
beat the "optimal" plan by 8%). Here every degree tuple (tp, cp, pp, dp, ep, etp) that
``check_plan`` accepts under some rank order must be a family of the space, and the solver's
optimum must be no slower than the best of those layouts evaluated directly."""

from __future__ import annotations

from dataclasses import replace
from itertools import permutations

import pytest
from paraplan.cost import DEFAULT_ORDER, Job, Plan, Recompute
from paraplan.cost.plan import PartialPlan
from paraplan.cost.validity import check_plan
from paraplan.graph import build_graph, preset
from paraplan.hardware import build_cluster
from paraplan.solver import Options
from paraplan.solver.space import divisors, families

import paraplan

CASES = [
    # model, node, nodes, seq_len, global_batch
    ("mixtral-8x7b", "gb300-nvl72", 1, 1000, 7),
    ("mixtral-8x7b", "dgx-h100", 2, 4096, 16),
    ("qwen3-30b-a3b", "dgx-h100", 1, 4096, 8),
]


def _accepted(spec, n: int, job: Job) -> set[tuple[int, int, int, int, int, int | None]]:
    """Degree tuples check_plan accepts under at least one rank order (one layer split, mb 1)."""
    out: set[tuple[int, int, int, int, int, int | None]] = set()
    for tp in divisors(n):
        for cp in divisors(n // tp):
            for pp in divisors(n // (tp * cp)):
                if pp > spec.num_layers:
                    continue
                dp = n // (tp * cp * pp)
                split = [spec.num_layers // pp] * pp
                split[-1] += spec.num_layers - sum(split)
                for ep in divisors(spec.num_experts):
                    for etp in {tp, 1} if tp > 1 else {None}:
                        base = Plan(
                            dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, micro_batch=1,
                            sequence_parallel=tp > 1, layers_per_stage=tuple(split),
                            recompute=(Recompute.NONE,) * pp,
                        )  # fmt: skip
                        for order in permutations(DEFAULT_ORDER):
                            try:
                                check_plan(
                                    replace(base, order=order), job, num_devices=n,
                                    num_layers=spec.num_layers, num_heads=spec.num_heads,
                                    num_kv_heads=spec.num_kv_heads, num_experts=spec.num_experts,
                                )  # fmt: skip
                            except ValueError:
                                continue
                            out.add((tp, cp, pp, dp, ep, etp))
                            break
    return out


@pytest.mark.parametrize(("model", "node", "nodes", "seq", "batch"), CASES)
def test_every_accepted_moe_layout_is_in_the_space(
    model: str, node: str, nodes: int, seq: int, batch: int
) -> None:
    spec = build_graph(preset(model)).spec
    cluster = build_cluster(node, nodes=nodes)
    job = Job(seq_len=seq, global_batch=batch)
    accepted = _accepted(spec, cluster.num_devices, job)
    assert any(ep > d * c for _, c, _, d, ep, _ in accepted), "the case should exercise folded EP"
    space = {
        (f.tp, f.cp, f.pp, f.dp, f.ep, f.etp)
        for f in families(spec, cluster, seq, batch, PartialPlan(), Options(allow_uneven_stages=True))
    }
    missing = sorted(accepted - space, key=str)
    assert not missing, f"layouts check_plan accepts but the space lacks (tp, cp, pp, dp, ep, etp): {missing}"


def test_folded_ep_beyond_dp_cp_is_planned() -> None:
    """The case that exposed the gap: the folded ep = 8 plan (tp 2, cp 4, dp 1) is faster than any
    plan with ep | dp*cp, so the solver must find it or one at least as fast."""
    scenario = {
        "model": {"preset": "mixtral-8x7b"},
        "cluster": {"preset": "gb300-nvl72", "gpus": 8},
        "job": {"seq_len": 1000, "global_batch": 7, "precision": "bf16"},
        "solver": {"target": "any", "memory_headroom": 0},
    }
    solved = paraplan.solve(scenario, time_limit_s=60)
    folded = {
        "dp": 1, "tp": 2, "pp": 1, "cp": 4, "ep": 8, "etp": 1, "micro_batch": 7, "zero": 1,
        "recompute": "none", "sequence_parallel": True,
    }  # fmt: skip
    direct = paraplan.evaluate({k: v for k, v in scenario.items() if k != "solver"} | {"plan": folded})
    assert direct.predicted.fits_memory
    assert solved.predicted.step_time_s <= direct.predicted.step_time_s * (1 + 1e-6)
