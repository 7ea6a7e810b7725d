"""Hypothesis profiles for the library's tests (``ci`` under ``make test``; see
:mod:`servelab.harness.hypothesis_profiles`), and ``assignments/`` on ``sys.path``: the
library's tests draw from the assignments' strategies module (``assignment_strategies``), so
that one set of ranges serves both."""

import sys
from pathlib import Path

from servelab.harness.hypothesis_profiles import cap_examples, register_and_load

ASSIGNMENTS = str(Path(__file__).resolve().parents[1] / "assignments")
if ASSIGNMENTS not in sys.path:
    sys.path.append(ASSIGNMENTS)  # after tests/, so a name there is never shadowed by a task's

register_and_load()


def pytest_collection_modifyitems(items):
    cap_examples(items)  # the compat profile's few examples hold for the tests that set their own
