"""Malformed documents and API arguments: a ConfigError (or another ParaplanError) whose message
names the offending key, never another exception (issue 16, item 2; budgets: test_valid.py).

The ``known_bad`` documents issue 16 already reports (non-UTF-8 files, broken Hugging Face
configs, deep nesting, huge integers) are left out of the green test and exercised by the xfail
test below until the fixes land on main."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given

from benchmarks.fuzz_cases import Case, run_case
from tests.property.strategies import api_arg_cases, malformed_cases, settings_for


def _run(case: Case) -> None:
    with tempfile.TemporaryDirectory() as where:
        run_case(case, Path(where), factor=2.0, margin_s=5.0, deep=False)


@settings_for(300)
@given(malformed_cases(known_bad=False))
def test_malformed_document_raises_an_error_naming_the_key(case: Case) -> None:
    _run(case)


@settings_for(100)
@given(api_arg_cases(known_bad=True))
def test_bad_api_arguments_raise_config_error(case: Case) -> None:
    _run(case)


@pytest.mark.xfail(reason="issue 16: non-UTF-8 scenario files and malformed Hugging Face configs "
                   "crash (UnicodeDecodeError, TypeError, KeyError, AttributeError, "
                   "IsADirectoryError); remove once main has the schema/HF-import fixes",
                   strict=False)
@settings_for(60)
@given(malformed_cases(known_bad=True))
def test_known_bad_documents_raise_an_error_naming_the_key(case: Case) -> None:
    _run(case)

