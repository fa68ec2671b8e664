"""Malformed documents and API arguments: a ConfigError (or another ParaplanError) whose message
names the offending key, never another exception, within the time limit (issue 16, item 2;
budgets: test_valid.py). Includes the inputs issue 16 reported (non-UTF-8 and binary files,
broken Hugging Face configs, deep nesting, 5,000-digit integers, NaN/inf time limits, seeds past
int32) and huge, deep and alias-bomb documents."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given

from benchmarks.fuzz_cases import Case
from benchmarks.fuzz_checks import run_case
from tests.property.strategies import api_arg_cases, malformed_cases, settings_for


def _run(case: Case) -> None:
    with tempfile.TemporaryDirectory() as where:
        run_case(case, Path(where), factor=2.0, margin_s=5.0, deep=False)


@settings_for(300)
@given(malformed_cases())
def test_malformed_document_raises_an_error_naming_the_key(case: Case) -> None:
    _run(case)


@settings_for(30)
@given(malformed_cases(extreme=True))
def test_huge_deep_and_alias_bomb_documents_are_refused_in_time(case: Case) -> None:
    _run(case)


@settings_for(100)
@given(api_arg_cases(known_bad=True))
def test_bad_api_arguments_raise_config_error(case: Case) -> None:
    _run(case)
