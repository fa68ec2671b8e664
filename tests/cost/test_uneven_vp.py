"""Megatron's uneven virtual pipeline (issue 11 item 4): unequal virtual stages in the cost model.

The schedule formula (cost/pp.py) is checked against an event simulation of Megatron's
interleaved 1F1B order; Llama 3.1 405B with pp 8 x vp 8 (126 layers, NVIDIA's recipe) is scored
by hand from the cost model's stage lines.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from paraplan.cost import Job, Plan, Recompute, check_plan, pipeline_s, stage_terms
from paraplan.cost.plan import chunk_layers, default_chunks, is_even_chunks

import paraplan
from paraplan.errors import ConfigError
from paraplan.instance import build_instance
from paraplan.scenario.schema import load_scenario

EXAMPLE_405B = Path(__file__).parents[2] / "examples" / "llama31-405b-1024xh100.yaml"


def _megatron_order(rank: int, p: int, v: int, m: int) -> list[tuple[str, int, int]]:
    """(F|B, chunk, micro-batch) in the order Megatron runs them on ``rank``
    (megatron/core/pipeline_parallel/schedules.py, forward_backward_pipelining_with_interleaving,
    micro-batch group size = pp: warm-up forwards (p - rank - 1) * 2 + (v - 1) * p, then 1F1B,
    then the cool-down backwards; forward k is chunk (k // p) % v of micro-batch
    (k // (p v)) * p + k % p, backward k the same with chunk v - 1 - (k // p) % v)."""
    total = m * v
    warm = min((p - rank - 1) * 2 + (v - 1) * p, total)

    def mb(k: int) -> int:
        return (k // (p * v)) * p + k % p

    fwd = [("F", (k // p) % v, mb(k)) for k in range(total)]
    bwd = [("B", v - 1 - (k // p) % v, mb(k)) for k in range(total)]
    ops = fwd[:warm]
    for k in range(total - warm):
        ops += [fwd[k + warm], bwd[k]]
    return ops + bwd[total - warm :]


def simulate_interleaved_s(f: list[list[float]], b: list[list[float]], m: int) -> float:
    """Makespan of Megatron's interleaved order with forward/backward times per (rank, chunk);
    each op starts when its rank is free and its input exists (no communication time)."""
    p, v = len(f), len(f[0])
    orders = [_megatron_order(s, p, v, m) for s in range(p)]
    done: dict[tuple[str, int, int, int], float] = {}
    pos, free = [0] * p, [0.0] * p
    moved = True
    while moved:
        moved = False
        for s in range(p):
            while pos[s] < len(orders[s]):
                kind, c, j = orders[s][pos[s]]
                if kind == "F":
                    deps = [("F", s - 1, c, j)] if s else ([("F", p - 1, c - 1, j)] if c else [])
                    dur = f[s][c]
                else:
                    deps = [("F", s, c, j)]
                    deps += [("B", s + 1, c, j)] if s < p - 1 else [("B", 0, c + 1, j)] if c < v - 1 else []
                    dur = b[s][c]
                if any(d not in done for d in deps):
                    break
                free[s] = max([free[s]] + [done[d] for d in deps]) + dur
                done[(kind, s, c, j)] = free[s]
                pos[s] += 1
                moved = True
    assert all(pos[s] == len(orders[s]) for s in range(p)), "the order deadlocked"
    return max(free)


def _times(chunks: list[list[int]]) -> tuple[list[list[float]], list[list[float]], list[float]]:
    f = [[1.0 * n for n in row] for row in chunks]  # forward 1, backward 2 per layer
    b = [[2.0 * n for n in row] for row in chunks]
    return f, b, [3.0 * sum(row) for row in chunks]


@pytest.mark.parametrize(("p", "v", "m"), [(2, 2, 4), (4, 2, 8), (4, 4, 8), (8, 8, 16)])
def test_formula_is_megatrons_schedule_for_equal_chunks(p: int, v: int, m: int) -> None:
    f, b, t = _times([[2] * v for _ in range(p)])
    assert pipeline_s(t, m, v) == pytest.approx(simulate_interleaved_s(f, b, m))


@pytest.mark.parametrize("m", [8, 16, 192])
def test_405b_account_for_slots_within_two_percent_of_megatrons_schedule(m: int) -> None:
    # 126 layers, pp 8 x vp 8: chunks of 2, the first (embedding) and the last (loss) of 1.
    chunks = [list(r) for r in default_chunks((15, 16, 16, 16, 16, 16, 16, 15), 8)]
    assert chunks[0] == [1] + [2] * 7 and chunks[7] == [2] * 7 + [1]
    f, b, t = _times(chunks)
    # by hand: t = [45, 48 x 6, 45]; m * 48 + (7 * 48 - 3 + 45 - 48 ... ) i.e. (sum - max) / 8
    assert t == [45.0] + [48.0] * 6 + [45.0]
    formula = pipeline_s(t, m, 8)
    assert formula == pytest.approx(m * 48 + (2 * 45 + 5 * 48) / 8)
    sim = simulate_interleaved_s(f, b, m)
    assert sim <= formula <= 1.021 * sim


def test_default_chunks_put_short_chunks_next_to_embedding_and_loss() -> None:
    assert default_chunks((7, 9, 9, 7), 4) == ((1, 2, 2, 2), (3, 2, 2, 2), (3, 2, 2, 2), (2, 2, 2, 1))
    plan = Plan(dp=1, tp=1, pp=2, vp=2, layers_per_stage=(4, 4))
    assert is_even_chunks(plan) and chunk_layers(plan) == ((2, 2), (2, 2))


def _check(plan: Plan, layers: int = 30) -> None:
    check_plan(
        plan,
        Job(seq_len=4096, global_batch=64),
        num_devices=plan.num_devices,
        num_layers=layers,
        num_heads=16,
        num_kv_heads=4,
    )


def test_vp_need_not_divide_a_stage() -> None:
    _check(Plan(dp=2, tp=2, pp=4, vp=4, layers_per_stage=(7, 8, 8, 7), recompute=(Recompute.NONE,) * 4))


@pytest.mark.parametrize(
    ("chunks", "message"),
    [
        (((4, 3), (4, 4), (4, 4)), "need pp=4 rows of vp=2"),
        (((4, 3, 0), (4, 4, 0), (4, 4, 0), (4, 3, 0)), "need pp=4 rows of vp=2"),
        (((7, 0), (4, 4), (4, 4), (4, 3)), r"layers_per_chunk\[0\]\[1\]=0"),
        (((3, 3), (4, 4), (4, 4), (4, 4)), "row sums"),
    ],
)
def test_bad_layers_per_chunk_names_the_field(chunks: tuple, message: str) -> None:
    plan = Plan(
        dp=2,
        tp=2,
        pp=4,
        vp=2,
        layers_per_stage=(7, 8, 8, 7),
        layers_per_chunk=chunks,
        recompute=(Recompute.NONE,) * 4,
    )
    with pytest.raises(ValueError, match=message):
        _check(plan)


def test_scenario_errors_name_plan_layers_per_chunk() -> None:
    scenario = load_scenario(EXAMPLE_405B).model_dump(mode="json", exclude_none=True)
    scenario["plan"]["layers_per_chunk"] = [[2] * 8] * 8  # 128 layers, not 126
    scenario["plan"].pop("layers_per_stage")
    with pytest.raises(ConfigError, match="layers_per_chunk"):
        paraplan.evaluate(scenario)
    scenario["plan"]["layers_per_chunk"] = [[2, 0, 2, 2, 2, 2, 2, 2]] + [[2] * 8] * 7
    with pytest.raises(ConfigError, match="layers_per_chunk"):
        paraplan.evaluate(scenario)


def test_405b_pp8_vp8_evaluates_to_its_hand_computed_schedule() -> None:
    res = paraplan.evaluate(EXAMPLE_405B)
    assert res.plan.layers_per_stage == [15] + [16] * 6 + [15]
    assert res.plan.layers_per_chunk == [[1] + [2] * 7] + [[2] * 8] * 6 + [[2] * 7 + [1]]
    inst = build_instance(load_scenario(EXAMPLE_405B))
    plan = Plan(
        dp=8,
        tp=8,
        pp=8,
        cp=2,
        vp=8,
        micro_batch=1,
        zero=1,
        recompute=(Recompute.NONE,) * 8,
        layers_per_stage=(15, 16, 16, 16, 16, 16, 16, 15),
    )
    terms = stage_terms(inst.graph, plan, inst.job, inst.cluster)
    # t_s = fixed_s + n_s * per_layer_s (cost/stage.py StageTerms.stage_time)
    lines = [terms.stage_time(s, Recompute.NONE) for s in range(8)]
    t = [ln.fixed + n * ln.per_layer for ln, n in zip(lines, plan.layers_per_stage, strict=True)]
    m = 1536 // (1 * 8)
    assert m == 192 and m % 8 == 0
    bubble = (sum(t) - max(t)) / 8
    dp_exposed = max(
        max(0.0, terms.dp_exposed(s, Recompute.NONE).at(n)) for s, n in enumerate(plan.layers_per_stage)
    )
    optimizer = max(terms.optimizer(s).at(n) for s, n in enumerate(plan.layers_per_stage))
    assert res.predicted.bubble_s == pytest.approx(bubble, rel=1e-9)
    assert res.predicted.step_time_s == pytest.approx(m * max(t) + bubble + dp_exposed + optimizer, rel=1e-9)
    assert max(t) == t[1]  # a middle stage (16 layers) paces the steady state
    assert t[0] < t[1] and t[7] < t[1]
