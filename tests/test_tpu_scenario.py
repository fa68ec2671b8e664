"""TPU scenarios through the front door: slice presets, the slice shape as a plan knob, and the
errors a user gets for a TPU knob on the wrong cluster or a shape the slice cannot take."""

from __future__ import annotations

import pytest

import paraplan
from paraplan.errors import ConfigError

BASE = {
    "model": {"preset": "llama3-8b"},
    "cluster": {"preset": "v5p-256", "nodes": 1},
    "job": {"seq_len": 4096, "global_batch": 128},
}
PLAN = {"dp": 128, "tp": 1, "pp": 1, "micro_batch": 1, "zero": 3, "recompute": "full"}


def test_evaluate_reports_the_shape_it_was_given() -> None:
    r = paraplan.evaluate({**BASE, "plan": {**PLAN, "torus_shape": [8, 4, 4]}})
    assert r.plan.torus_shape == [8, 4, 4] and r.predicted.fits_memory


def test_a_fixed_shape_is_kept_by_the_solver() -> None:
    r = paraplan.solve({**BASE, "plan": {"torus_shape": [4, 8, 4]}}, time_limit_s=30, workers=1)
    assert r.solver.status == "OPTIMAL" and r.plan.torus_shape == [4, 8, 4]


@pytest.mark.parametrize(
    "scenario, words",
    [
        ({**BASE, "plan": {**PLAN, "torus_shape": [2, 8, 8]}}, "not a shape of this v5p slice"),
        (
            {
                **BASE,
                "cluster": {"preset": "dgx-h100", "nodes": 16},
                "plan": {**PLAN, "torus_shape": [4, 4, 8]},
            },
            "needs a TPU slice cluster",
        ),
        ({**BASE, "cluster": {"preset": "v5p-1023", "nodes": 1}, "plan": PLAN}, "multiple of 2"),
        (
            {**BASE, "cluster": {"pools": [{"preset": "v5p-256", "nodes": 1}]}, "plan": PLAN},
            "TPU slices are not pooled",
        ),
    ],
)
def test_tpu_knobs_misused_say_why(scenario: dict, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        paraplan.evaluate(scenario)
    if "torus_shape" in scenario.get("plan", {}):
        with pytest.raises(ConfigError, match=words):
            paraplan.solve(
                {**scenario, "plan": {"torus_shape": scenario["plan"]["torus_shape"]}},
                time_limit_s=10,
                workers=1,
            )
