"""Table-driven bad-input tests: every row is an input a user may give and the clear
error (class and words) they must get instead of a silent wrong answer. The tables
are in ``tests/bad_input/``, one module per layer."""

from __future__ import annotations

import warnings

import pytest

from bad_input import core_cases, frontends_cases, inference_cases, modeling_cases, transform_cases

CASES = [case for module in (core_cases, modeling_cases, transform_cases, inference_cases, frontends_cases)
         for case in module.CASES]


def test_case_ids_are_unique():
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_gets_a_clear_error(case):
    if issubclass(case.raises, Warning):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            case.run()
        messages = [str(w.message) for w in caught if issubclass(w.category, case.raises)]
        assert messages, f"expected a {case.raises.__name__}"
        message = " ".join(messages)
    else:
        with pytest.raises(case.raises) as info:
            case.run()
        message = str(info.value)
    for word in case.words:
        assert word.lower() in message.lower(), f"{word!r} not in the message: {message}"
