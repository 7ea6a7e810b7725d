"""The decoder lets only plain data through; every autograder module's examples run."""

from __future__ import annotations

import doctest
import importlib
import json
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


@pytest.mark.parametrize("a", [np.array([1.5, -0.0, np.nan, np.inf, 2.0**-1074]), np.array([[1e-45, -3.0]], dtype=np.float32),
                               np.arange(12, dtype=">i2").reshape(3, 4)[:, ::2], np.zeros((0, 3)),
                               np.array(True), np.array([2**64 - 1], dtype=np.uint64)])
def test_numeric_arrays_travel_as_their_bits(a):
    """Through JSON text (as on the pipe): every bit kept (the sign of zero, NaN, subnormals),
    the dtype and shape too, in a writable array of its own."""
    back = wire.decode(json.loads(json.dumps(wire.encode(a))))
    assert back.dtype == a.dtype and back.shape == a.shape and back.tobytes() == np.ascontiguousarray(a).tobytes()
    assert back.flags.writeable


@pytest.mark.parametrize("reply", [{"__tuple__": [1], "x": 2}, {"a": 1}, {"__ndarray__": {"dtype": "|O", "shape": [1], "data": [1]}},
                                   {"__ndarray__": {"dtype": "<f8", "shape": [1], "data": ["1"]}},
                                   {"__ns__": {"not an identifier": 1}}, {"__ns__": {"__class__": 1}}, {"__dict__": [[[1], 2]]},
                                   # an array's bytes: too few or too many for its shape, not base64, not text
                                   {"__ndarray__": {"dtype": "<f8", "shape": [2], "b64": "AAAAAAAA8D8="}},
                                   {"__ndarray__": {"dtype": "<i4", "shape": [1], "b64": "AAAAAAAAAAA="}},
                                   {"__ndarray__": {"dtype": "<f8", "shape": [1], "b64": "not base64!"}},
                                   {"__ndarray__": {"dtype": "<f8", "shape": [1], "b64": [0, 0]}},
                                   {"__ndarray__": {"dtype": "|O", "shape": [1], "b64": "AAAAAAAA8D8="}}])
def test_anything_else_is_refused(reply):
    with pytest.raises(ValueError):
        wire.decode(reply)
    # inside a list of plain values too (a list of plain values alone skips the call per value)
    with pytest.raises(ValueError):
        wire.decode([1, 2.5, "s", None, True, reply])


def test_a_list_of_plain_values_comes_back_as_a_list_of_its_own():
    sent = [1, 2.5, "s", None, False]
    encoded = wire.encode(sent)
    assert encoded == sent and encoded is not sent  # the caller's list is never the one sent
    assert wire.decode(json.loads(json.dumps(encoded))) == sent
    assert wire.encode([1, (2, 3)]) == [1, {"__tuple__": [2, 3]}]  # a tuple in it is still tagged
