"""The explanation's next plan with more memory headroom (issue 24, item 5; paraplan/headroom.py):
asked for (``more_headroom=True``, ``paraplan plan --more-headroom``), a plan at the edge of memory
gets one more search with the headroom raised past its own free share, and the line states that
plan's step time and free memory; by default the line only names that headroom and how to ask; a
plan with room to spare gets neither."""

from __future__ import annotations

import re
from typing import Any

import pytest

import paraplan
from paraplan.headroom import MORE_HEADROOM_STEP

EDGE: dict[str, Any] = {  # Llama 3.1 8B SFT on 8 H100: the fastest plan fills the usable memory
    "model": {"preset": "llama3.1-8b"},
    "cluster": {"preset": "dgx-h100", "gpus": 8},
    "job": {"seq_len": 8192, "global_batch": 32, "variable_seq_len": True},
}
ROOMY: dict[str, Any] = {**EDGE, "job": {"seq_len": 8192, "global_batch": 32}}  # peak 80% of usable


def _line(result: Any) -> str | None:
    return next((line for line in result.explanation if line.startswith("more headroom:")), None)


@pytest.fixture(scope="module")
def edge() -> Any:
    return paraplan.solve(EDGE, time_limit_s=60, more_headroom=True)


def test_a_plan_at_the_edge_states_the_next_plan_with_more_headroom(edge: Any) -> None:
    line = _line(edge)
    assert line is not None
    m = re.search(r"solver\.memory_headroom (0\.\d+)\): (.*): ([\d.]+) s \(([+-][\d.]+)%\)", line)
    assert m is not None
    headroom, shown, step_s = float(m.group(1)), m.group(2), float(m.group(3))
    free = re.search(r"([\d.]+)% free against this plan's ([\d.]+)%", line)
    assert free is not None and float(free.group(1)) > float(free.group(2))
    assert headroom == pytest.approx(float(free.group(2)) / 100 + MORE_HEADROOM_STEP, abs=0.001)
    # the line is what a search with that headroom gives: no faster than the plan, roomier
    again = paraplan.solve({**EDGE, "solver": {"memory_headroom": headroom}}, time_limit_s=60)
    p = again.plan
    assert shown.startswith(f"dp={p.dp} tp={p.tp} pp={p.pp} cp={p.cp} ") and f"mb={p.micro_batch} " in shown
    assert again.predicted.step_time_s == pytest.approx(step_s, abs=0.0005)
    assert again.predicted.step_time_s >= edge.predicted.step_time_s
    assert again.predicted.peak_memory_bytes < edge.predicted.peak_memory_bytes


def test_a_plan_with_room_to_spare_gets_no_second_search() -> None:
    assert _line(paraplan.solve(ROOMY, time_limit_s=60, more_headroom=True)) is None
    assert _line(paraplan.solve(ROOMY, time_limit_s=60)) is None


def test_by_default_the_line_names_the_headroom_and_how_to_ask(edge: Any) -> None:
    line = _line(paraplan.solve(EDGE, time_limit_s=60))
    assert line is not None
    assert line.startswith("more headroom: not searched; `paraplan plan --more-headroom`")
    asked = _line(edge)
    assert asked is not None
    wanted = re.search(r"solver\.memory_headroom (0\.\d+)", asked)
    assert wanted is not None and f"solver.memory_headroom {wanted.group(1)} plans it" in line
