"""Parametrize marks expand the way pytest expands them (the product of the marks), and the
one fixture given is tmp_path."""

from __future__ import annotations

import pytest

from autograder.grading.testload import call_test, cases, find_test


@pytest.mark.parametrize("a, b", [(1, 2), pytest.param(3, 4, id="second")])
@pytest.mark.parametrize("c", [(5,), pytest.param(6, id="six")])
def sample(a, b, c):
    return a, b, c


def test_cases_are_the_product_of_the_marks():
    assert cases(sample) == [{"c": (5,), "a": 1, "b": 2}, {"c": (5,), "a": 3, "b": 4},
                             {"c": 6, "a": 1, "b": 2}, {"c": 6, "a": 3, "b": 4}]


def test_a_plain_test_has_one_case():
    assert cases(lambda: None) == [{}]


def test_tmp_path_is_given_and_other_fixtures_are_named(tmp_path):
    seen = []
    call_test(lambda tmp_path: seen.append(tmp_path), {}, lambda: tmp_path)
    assert seen == [tmp_path]
    with pytest.raises(TypeError, match=r"fixtures \['capsys'\]"):
        call_test(lambda capsys: None, {}, lambda: tmp_path)


class _Box:
    def test_method(self):
        return "ran"


def test_find_test_in_a_class():
    import sys
    assert find_test(sys.modules[__name__], "_Box::test_method", "here")() == "ran"
    with pytest.raises(LookupError, match="no test nope"):
        find_test(sys.modules[__name__], "nope", "here")
