"""The ``>>>`` examples in tiny_llm, timing and demos 01/04 run and say what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "servelab.tiny_llm",
    "servelab.tiny_llm.config",
    "servelab.tiny_llm.counters",
    "servelab.tiny_llm.cache",
    "servelab.tiny_llm.model",
    "servelab.tiny_llm.sampling",
    "servelab.tiny_llm.generation",
    "servelab.tiny_llm._blas",
    "servelab.timing",
    "servelab.demos.demo01",
    "servelab.demos.demo04",
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
    if name not in ("servelab.demos.demo01",):
        assert result.attempted > 0, f"{name} has no examples"
