"""Cache keys derived from Plan's fields (issue 12): a knob added to Plan enters every key unless a
cache declares it irrelevant, and a declared field that Plan does not have is refused."""

from dataclasses import fields, replace

import pytest
from paraplan.cost import Plan
from paraplan.cost.floor import FLOOR_IGNORES
from paraplan.cost.plan import plan_key


def test_a_key_holds_every_field_not_ignored() -> None:
    plan = Plan(dp=2, tp=4, pp=2, micro_batch=2)
    key = plan_key(plan, frozenset({"dp"}))
    assert len(key) == len(fields(Plan)) - 1
    assert plan_key(replace(plan, tp=2, dp=4), frozenset({"dp"})) != key  # tp is in the key
    assert plan_key(replace(plan, dp=8), frozenset({"dp"})) == key


def test_an_ignored_name_must_be_a_field() -> None:
    with pytest.raises(ValueError, match="not Plan fields"):
        plan_key(Plan(dp=1, tp=1, pp=1), frozenset({"data_parallel"}))


def test_the_floor_key_separates_what_the_floor_depends_on() -> None:
    plan = Plan(dp=2, tp=4, pp=2, micro_batch=1)
    key = plan_key(plan, FLOOR_IGNORES)
    assert plan_key(replace(plan, dp=1, pp=4, vp=2, zero=3), FLOOR_IGNORES) == key
    for change in ({"tp": 2, "dp": 4}, {"micro_batch": 2}, {"sequence_parallel": False}):
        assert plan_key(replace(plan, **change), FLOOR_IGNORES) != key, change
