"""Partial (block) recompute: Megatron's --recompute-method block --recompute-num-layers N
(cost/recompute_layers.py): the first N layers of each chunk recomputed in full, the rest stored."""

from __future__ import annotations

from dataclasses import replace

import pytest
from paraplan.cost import Job, Plan, Recompute, evaluate, in_flight_micro_batches, stage_terms
from paraplan.cost.memory_reserve import ALLOCATOR_FRAGMENTATION
from paraplan.cost.recompute_layers import recomputed_counts, uniform_recompute_layers
from paraplan.graph import build_graph, preset
from paraplan.hardware import build_cluster

import paraplan
from paraplan.errors import ConfigError

GRAPH = build_graph(preset("llama3-8b"))  # 32 layers, one block kind
CLUSTER = build_cluster("dgx-h100", nodes=2)
JOB = Job(seq_len=8192, global_batch=64)
FULL, NONE = Recompute.FULL, Recompute.NONE


def _plan(**kw: object) -> Plan:
    base = dict(dp=2, tp=2, pp=4, micro_batch=1, recompute=(FULL,) * 4, layers_per_stage=(8,) * 4)
    return Plan(**{**base, **kw})  # type: ignore[arg-type]


def test_n_at_least_the_chunk_is_full_recompute() -> None:
    """N >= a chunk's layers recomputes the whole chunk (Megatron: layer_idx < N): today's FULL."""
    full = evaluate(GRAPH, CLUSTER, JOB, _plan())
    same = evaluate(GRAPH, CLUSTER, JOB, _plan(recompute_layers=(8, 9, 8, 100)))
    assert same.step_time_s == full.step_time_s
    assert [m.total_bytes for m in same.stage_memory] == [m.total_bytes for m in full.stage_memory]


def test_partial_time_and_memory_are_the_per_layer_mix() -> None:
    """time = time(NONE) + r (block_full - block_none); memory = memory(FULL) + (n - r) held
    (act_none - act_full)(1 + fragmentation), r the recomputed layers of the stage."""
    n_rec = (3, 5, 8, 1)
    plan = _plan(recompute_layers=n_rec)
    got = evaluate(GRAPH, CLUSTER, JOB, plan)
    full = evaluate(GRAPH, CLUSTER, JOB, _plan())
    none = evaluate(GRAPH, CLUSTER, JOB, _plan(recompute=(NONE,) * 4))
    terms = stage_terms(GRAPH, plan, JOB, CLUSTER)
    bf, bn = terms.block[FULL], terms.block[NONE]
    m = terms.num_micro_batches
    for s, r in enumerate(n_rec):
        assert got.stage_time_s[s] == pytest.approx(
            none.stage_time_s[s] + r * (bf.time_s - bn.time_s), rel=1e-12
        )
        held = in_flight_micro_batches(s, plan, m)
        stored = (8 - r) * held * (bn.activation_bytes - bf.activation_bytes) * (1 + ALLOCATOR_FRAGMENTATION)
        assert got.stage_memory[s].total_bytes == pytest.approx(
            full.stage_memory[s].total_bytes + stored, rel=1e-12
        )
    assert none.step_time_s < got.step_time_s < full.step_time_s


def test_interleaved_chunks_recompute_n_each() -> None:
    """vp 2, 10 layers per stage as chunks [5, 5]: N = 3 recomputes 3 + 3; N = 7 the whole stage."""
    plan = _plan(vp=2, layers_per_stage=(10, 6, 6, 10), recompute_layers=(3, 3, 7, 1))
    terms = stage_terms(GRAPH, plan, JOB, CLUSTER)
    assert recomputed_counts(terms) == ((6,), (6,), (6,), (2,))


def test_heterogeneous_kinds_come_from_positions() -> None:
    """DeepSeek-V3's three dense layers sit first: N = 2 on stage 0 recomputes two dense blocks."""
    graph = build_graph(preset("deepseek-v3"))
    kinds = graph.block_kinds
    plan = Plan(
        dp=1, tp=8, pp=2, ep=1, recompute=(FULL, FULL), recompute_layers=(2, 1), layers_per_stage=(30, 31)
    )
    terms = stage_terms(graph, plan, Job(seq_len=4096, global_batch=8), build_cluster("dgx-h100", nodes=2))
    rec = recomputed_counts(terms)
    dense = kinds[0]
    assert rec[0][dense] == 2 and sum(rec[0]) == 2
    assert rec[1][kinds[30]] == 1 and sum(rec[1]) == 1


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"recompute_layers": (1, 2)}, "one count per pipeline stage"),
        ({"recompute_layers": (0, 1, 1, 1)}, "recompute_layers[0]=0 must be at least 1"),
        (
            {"recompute": (NONE, FULL, FULL, FULL), "recompute_layers": (2, 1, 1, 1)},
            "recompute_layers[0]=2 must be 0",
        ),
    ],
)
def test_bad_counts_name_the_field(kw: dict[str, object], needle: str) -> None:
    with pytest.raises(ValueError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        _plan(**kw)


def test_megatron_one_n() -> None:
    """One --recompute-num-layers covers the plan when the partial stages share N and the
    all-recomputed stages have no chunk longer than N."""
    assert uniform_recompute_layers(_plan(recompute_layers=(3, 3, 3, 3))) == 3
    assert uniform_recompute_layers(_plan(recompute_layers=(3, 4, 3, 3))) is None
    uneven = _plan(layers_per_stage=(9, 9, 11, 3), recompute_layers=(5, 5, 5, 3))
    assert uniform_recompute_layers(uneven) == 5  # stage 3 holds 3 <= 5: all of it either way
    assert uniform_recompute_layers(_plan()) is None


SCENARIO = {
    "model": {"preset": "llama3-8b"},
    "cluster": {"preset": "dgx-h100", "nodes": 2},
    "job": {"seq_len": 8192, "global_batch": 64},
    "plan": {
        "dp": 2,
        "tp": 2,
        "pp": 4,
        "micro_batch": 1,
        "zero": 1,
        "recompute": "full",
        "recompute_layers": 3,
    },
}


def test_scenario_round_trips_through_the_result() -> None:
    """plan.recompute_layers: N applies to every full stage; the result's plan evaluates again to
    the same step time."""
    r = paraplan.evaluate(SCENARIO)
    assert r.plan.recompute_layers == [3, 3, 3, 3]
    sections = {k: v for k, v in r.scenario.items() if k != "plan"}
    again = paraplan.evaluate(paraplan.Scenario(**sections, plan=r.plan))
    assert again.predicted.step_time_s == r.predicted.step_time_s
    full = paraplan.evaluate({**SCENARIO, "plan": {**SCENARIO["plan"], "recompute_layers": None}})
    assert r.predicted.step_time_s < full.predicted.step_time_s


@pytest.mark.parametrize(
    ("plan", "needle"),
    [
        ({"recompute": "none", "recompute_layers": 2}, "needs plan.recompute=full"),
        ({"recompute": "full", "recompute_layers": 0}, "recompute_layers"),
        ({"recompute": "full", "recompute_layers": [1, 1]}, "recompute_layers"),
    ],
)
def test_scenario_errors_name_the_field(plan: dict[str, object], needle: str) -> None:
    with pytest.raises((ConfigError, ValueError), match=needle):
        paraplan.evaluate({**SCENARIO, "plan": {**SCENARIO["plan"], **plan}})


def test_partial_keeps_default_meaning() -> None:
    """No recompute_layers: FULL means every layer, as before."""
    assert _plan().recompute_layers == ()
    assert replace(_plan(), recompute_layers=()).recompute == (FULL,) * 4
