"""solver.memory_headroom and the modelled runtime reserve (issue 11 / issue 15 item 3)."""

from __future__ import annotations

import pytest
from paraplan.cost.memory_reserve import runtime_reserve_bytes
from paraplan.hardware import default_memory_headroom, memory_band

import paraplan
from paraplan.errors import ConfigError
from paraplan.instance import build_instance, fixed_plan

SCENARIO = {
    "model": {"preset": "llama3-8b"},
    "cluster": {"preset": "dgx-h100", "gpus": 8},
    "job": {"seq_len": 8192, "global_batch": 64, "precision": "bf16"},
    "plan": {"dp": 8, "tp": 1, "pp": 1, "micro_batch": 1, "zero": 1, "recompute": "none"},
}


def _with(headroom: float | None, plan: bool = True) -> dict:
    sc = {k: v for k, v in SCENARIO.items() if plan or k != "plan"}
    if headroom is not None:
        sc["solver"] = {"memory_headroom": headroom}
    return sc


@pytest.mark.parametrize("bad", [-0.1, 0.5, 0.9])
def test_headroom_outside_zero_to_half_is_a_config_error_naming_the_field(bad: float) -> None:
    with pytest.raises(ConfigError, match=r"solver\.memory_headroom"):
        paraplan.evaluate(_with(bad))


def test_headroom_takes_its_fraction_off_the_capacity_and_is_reported() -> None:
    base = paraplan.evaluate(_with(None)).predicted
    kept = paraplan.evaluate(_with(0.1)).predicted
    assert base.memory_headroom_bytes == 0.0
    hbm = base.memory_capacity_bytes
    # capacity = HBM x (1 - headroom); headroom bytes = HBM x headroom
    assert kept.memory_capacity_bytes == pytest.approx(0.9 * hbm)
    assert kept.memory_headroom_bytes == pytest.approx(0.1 * hbm)
    assert kept.peak_memory_bytes == pytest.approx(base.peak_memory_bytes)


def test_reserve_is_part_of_the_peak_and_reported() -> None:
    p = paraplan.evaluate(_with(None)).predicted
    inst = build_instance(paraplan.load_scenario(_with(None)))
    # context + NCCL buffers, plus the fragmentation share of the activations
    assert p.memory_reserve_bytes > runtime_reserve_bytes(fixed_plan(inst))
    assert p.memory_reserve_bytes <= p.stages[0].buffers_bytes


def test_solver_plans_within_the_capacity_left_by_the_headroom() -> None:
    """A headroom that rules out the unconstrained optimum's memory makes the solver pick a plan
    that fits HBM x (1 - headroom)."""
    free = paraplan.solve(_with(0.0, plan=False), workers=1)  # 0: no headroom
    peak = free.predicted.peak_memory_bytes
    hbm = free.predicted.memory_capacity_bytes
    headroom = min(0.49, 1.0 - 0.97 * peak / hbm)  # leaves less than the free optimum's peak
    tight = paraplan.solve(_with(headroom, plan=False), workers=1)
    assert tight.predicted.fits_memory
    assert tight.predicted.peak_memory_bytes <= hbm * (1 - headroom)
    assert tight.predicted.memory_headroom_bytes == pytest.approx(hbm * headroom)


def test_search_keeps_the_memory_band_by_default_and_evaluate_does_not() -> None:
    """Unset, solver.memory_headroom is the memory band's margin for a search, 1 - 1/p90 of
    measured/predicted peak memory (hardware/data/uncertainty.yaml), and none for evaluate."""
    band = memory_band()
    assert band.rows >= 40 and band.p90_ratio > 1.0
    default = default_memory_headroom()
    assert default == pytest.approx(1 - 1 / band.p90_ratio, abs=1e-3)
    searched = paraplan.solve(_with(None, plan=False), workers=1).predicted
    hbm = searched.memory_capacity_bytes + searched.memory_headroom_bytes
    assert searched.memory_headroom_bytes == pytest.approx(default * hbm)
    assert searched.peak_memory_bytes * band.p90_ratio <= hbm * (1 + 1e-3)
    assert paraplan.evaluate(_with(None)).predicted.memory_headroom_bytes == 0.0
    assert paraplan.solve(_with(0.0, plan=False), workers=1).predicted.memory_headroom_bytes == 0.0
