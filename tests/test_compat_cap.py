"""The ``compat`` profile (a second Python, a wheel in a fresh venv) runs every Hypothesis test
on at most ``COMPAT_EXAMPLES`` examples, those that set a larger count of their own and state
machines included; under ``ci`` a test's own count stands. In a pytest of its own (pytester,
in process), with the conftest hook the library's and the assignments' conftests use."""

from __future__ import annotations

import pytest

from servelab.harness.hypothesis_profiles import COMPAT_EXAMPLES

pytest_plugins = ["pytester"]

CONFTEST = """
from servelab.harness.hypothesis_profiles import cap_examples, register_and_load

register_and_load()

def pytest_collection_modifyitems(items):
    cap_examples(items)
"""

COUNTED = """
from hypothesis import given, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

RUNS = {"own": 0, "steps": 0}

@settings(max_examples=40, database=None)
@given(st.integers())
def test_own_count(n):
    RUNS["own"] += 1

class Machine(RuleBasedStateMachine):
    @rule()
    def step(self):
        RUNS["steps"] += 1

TestMachine = Machine.TestCase
TestMachine.settings = settings(max_examples=40, stateful_step_count=1, database=None)

def test_zz_counts():
    with open("runs.txt", "w") as f:
        f.write(f"{RUNS['own']} {RUNS['steps']}")
"""


@pytest.mark.parametrize("profile, most", [("compat", COMPAT_EXAMPLES), ("ci", 40)])
def test_compat_caps_every_test_and_ci_keeps_its_count(pytester, monkeypatch, profile, most):
    monkeypatch.setenv("HYPOTHESIS_PROFILE", profile)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_counted=COUNTED)
    pytester.runpytest("-p", "no:cacheprovider", "-q").assert_outcomes(passed=3)
    own, steps = (int(x) for x in (pytester.path / "runs.txt").read_text().split())
    # Hypothesis may stop short of a count (a small search space), never run past it
    assert own <= most and steps <= most
    if profile == "ci":
        assert own > COMPAT_EXAMPLES and steps > COMPAT_EXAMPLES
