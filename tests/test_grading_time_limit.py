"""The per-test time limit of ``pytest assignments/`` (servelab.harness.time_limit): a planted endless
loop, in a plain test and in a Hypothesis property, each fails naming the test and the limit, and
the run goes on. Run in a pytest of its own (a subprocess with a wall-clock bound, so that a broken
limit fails this test instead of hanging it); a limit of 1 s: about 5 s in all."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

# as assignments/conftest.py registers them: the student profile's probe runs first, and a stuck
# probe is a stuck test too
CONFTEST = """
from servelab.harness import fail_fast, time_limit

def pytest_addoption(parser):
    time_limit.add_option(parser)

def pytest_configure(config):
    config.pluginmanager.register(fail_fast.FailFast(), "servelab-fail-fast")
    config.pluginmanager.register(time_limit.from_config(config), "servelab-time-limit")
"""

STUCK = """
from hypothesis import given, settings, strategies as st

def student_function(n):
    while n >= 0:  # the planted bug: n never changes
        pass

def test_stuck():
    student_function(3)

@settings(max_examples=50, database=None, deadline=None)
@given(st.integers(min_value=0))
def test_stuck_property(n):
    student_function(n)

def test_after_them():
    assert student_function(-1) is None
"""


def test_a_stuck_test_fails_naming_the_limit_and_the_run_goes_on(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_planted=STUCK)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--test-time-limit", "1", timeout=120)
    result.assert_outcomes(failed=2, passed=1)
    result.stdout.fnmatch_lines([
        "*TimeLimitExceeded: test_planted.py::test_stuck ran past the time limit of 1 s per test*",
        "*TimeLimitExceeded: test_planted.py::test_stuck_property ran past the time limit of 1 s per test*",
    ])
    # the traceback shows where it spun; Hypothesis neither shrank nor reported a falsifying example
    assert "while n >= 0" in result.stdout.str() and "Falsifying example" not in result.stdout.str()


def test_a_bad_limit_is_a_usage_error(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_ok="def test_ok():\n    pass\n")
    result = pytester.runpytest_subprocess("--test-time-limit", "-1", timeout=120)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--test-time-limit must be a number of seconds >= 0 (0: no limit), got -1.0*"])
