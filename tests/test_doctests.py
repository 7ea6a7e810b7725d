"""Every ``>>>`` example in the library's docstrings runs and prints what it says."""

import doctest
import importlib
import pkgutil

import pytest

import servelab

# every module but the Rust extension (its typed surface is _core.pyi, checked by stubtest) and
# ``python -m servelab`` (importing it runs the CLI)
MODULES = sorted(m.name for m in pkgutil.walk_packages(servelab.__path__, "servelab.")
                 if m.name not in ("servelab._core", "servelab.__main__"))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"


# Modules allowed to have no example, each for a reason; any other module must show one.
NO_EXAMPLES = {
    "servelab.cli": "argument parsing; tests/test_*_cli.py run it",
    "servelab.demos": "package of demos",
    "servelab.demos.demo01": "writes files and prints; tests/test_demo01*.py",
    "servelab.demos.demo02": "writes files and prints; tests/test_demo02*.py",
    "servelab.demos.demo03": "writes files and prints; tests/test_demo03*.py",
    "servelab.demos.demo_paged": "writes files and prints; tests/test_demo_paged*.py",
    "servelab.harness": "package docstring only",
    "servelab.harness.plugin": "a pytest plugin; tests/test_assignments_grading.py drives it",
    "servelab.plots": "writes PNG files; the demo tests check them",
}


def test_every_module_shows_an_example():
    finder = doctest.DocTestFinder()
    missing = [name for name in MODULES if name not in NO_EXAMPLES
               and not any(t.examples for t in finder.find(importlib.import_module(name)))]
    assert missing == [], f"modules without a >>> example: {missing}"


def test_the_examples_exist():
    # a docstring pass that attempted nothing would prove nothing
    attempted = doctest.testmod(importlib.import_module("servelab.hw_model")).attempted
    assert attempted >= 10
