"""The decoder lets only plain data through; every autograder module's examples run."""

from __future__ import annotations

import doctest
import importlib
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from autograder.sandbox import wire

PACKAGE = Path(__file__).resolve().parents[1]
# every module of the grader that shows examples (test code and exercise scripts aside)
MODULES = sorted(".".join(("autograder", *p.relative_to(PACKAGE).with_suffix("").parts))
                 for p in PACKAGE.rglob("*.py")
                 if p.relative_to(PACKAGE).parts[0] not in ("tests", "exercises") and ">>> " in p.read_text())


def test_the_examples_found_include_each_subpackage():
    assert {"autograder.markers", "autograder.sandbox.wire", "autograder.notebooks.recheck",
            "autograder.release.repository", "autograder.grading.calibrate"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("value", [None, True, 3, -2.5, "s", [1, [2]], (1, (2, 3)), {"a": 1, 2: (3,)},
                                   SimpleNamespace(x=1, y=[2.0])])
def test_round_trip(value):
    assert wire.decode(wire.encode(value)) == value


def test_arrays_and_special_floats_round_trip():
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    back = wire.decode(wire.encode(a))
    assert back.dtype == np.int32 and back.shape == (2, 3) and (back == a).all()
    assert math.isnan(wire.decode(float("nan")))


@pytest.mark.parametrize("reply", [{"__tuple__": [1], "x": 2}, {"a": 1}, {"__ndarray__": {"dtype": "|O", "shape": [1], "data": [1]}},
                                   {"__ndarray__": {"dtype": "<f8", "shape": [1], "data": ["1"]}},
                                   {"__ns__": {"not an identifier": 1}}, {"__ns__": {"__class__": 1}}, {"__dict__": [[[1], 2]]}])
def test_anything_else_is_refused(reply):
    with pytest.raises(ValueError):
        wire.decode(reply)
