"""Every ``>>>`` example in the library's docstrings runs and prints what it says."""

import doctest
import importlib
import pkgutil

import pytest

import servelab

MODULES = sorted(m.name for m in pkgutil.walk_packages(servelab.__path__, "servelab.")
                 if not m.name.startswith("servelab._"))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"


def test_the_examples_exist():
    # a docstring pass that attempted nothing would prove nothing
    attempted = doctest.testmod(importlib.import_module("servelab.hw_model")).attempted
    assert attempted >= 10
