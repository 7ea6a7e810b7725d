"""The time limits of ``pytest assignments/`` (servelab.harness.time_limit): a planted endless loop,
in a plain test and in a Hypothesis property, each fails naming the test, the limit and the input
that was running, and the run goes on; with a table of the reference's example times the limit is
fitted (seconds, not the flat two minutes), and a later test stuck in the same function is
stopped as the same loop. Run in a pytest of its own (a subprocess with a wall-clock bound, so
that a broken limit fails this test instead of hanging it). No assertion is on a duration: a
loop that never ends exceeds every limit, however loaded the machine."""

from __future__ import annotations

import json

import pytest

pytest_plugins = ["pytester"]

# as assignments/conftest.py registers them: the student profile's probe runs first, and a stuck
# probe is a stuck test too; student.py is the file a student edits
CONFTEST = """
import os
from pathlib import Path
from servelab.harness import fail_fast, time_limit

def pytest_addoption(parser):
    time_limit.add_option(parser)

def pytest_configure(config):
    root = Path(__file__).resolve().parent
    config.pluginmanager.register(fail_fast.FailFast(), "servelab-fail-fast")
    config.pluginmanager.register(time_limit.from_config(config, root, frozenset({os.path.realpath(root / "student.py")})),
                                  "servelab-time-limit")
"""

STUDENT = """
def student_function(n):
    while n >= 0:  # the planted bug: n never changes
        pass
"""

STUCK = """
from hypothesis import given, settings, strategies as st
from student import student_function

def test_stuck():
    student_function(3)

@settings(max_examples=50, database=None, deadline=None)
@given(st.integers(min_value=0))
def test_stuck_property(n):
    student_function(n)

def test_after_them():
    assert student_function(-1) is None
"""


def planted(pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(student=STUDENT, test_planted=STUCK)


def test_a_stuck_test_fails_naming_the_limit_and_the_input_and_the_run_goes_on(pytester):
    planted(pytester)  # no table: the flat limit per test
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--test-time-limit", "1", timeout=120)
    result.assert_outcomes(failed=2, passed=1)
    result.stdout.fnmatch_lines([
        "*TimeLimitExceeded: test_planted.py::test_stuck ran past the time limit of 1 s per test*"
        "it was in student_function() at student.py line ?; the input: student_function(n=3)",
        "*TimeLimitExceeded: test_planted.py::test_stuck_property ran past the time limit of 1 s per test*"
        "it was in student_function() at student.py line ? (called as student_function(n=0)); the input: n=0",
    ])
    # the traceback shows where it spun; Hypothesis neither shrank nor reported a falsifying example
    assert "while n >= 0" in result.stdout.str() and "Falsifying example" not in result.stdout.str()


def test_the_fitted_limit_stops_the_first_and_the_same_loop_stops_the_next_sooner(pytester):
    planted(pytester)
    # the reference's examples took milliseconds: each limit is the floor (3 s on a machine as
    # fast as the table's; the workload time is set high so that none is slower)
    times = {"test_planted.py::test_stuck": 0.001, "test_planted.py::test_stuck_property": 0.001,
             "test_planted.py::test_after_them": 0.001}
    (pytester.path / "example_times.json").write_text(json.dumps({"workload_s": 1e6, "slowest_example_s": times}))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    result.assert_outcomes(failed=2, passed=1)
    result.stdout.fnmatch_lines([
        "*TimeLimitExceeded: test_planted.py::test_stuck ran one example past 3 s (10 times the reference "
        "solution's slowest, on this machine): an endless loop in student_function() at student.py line ?? "
        "the input: student_function(n=3)",
        "*TimeLimitExceeded: test_planted.py::test_stuck_property was stopped after * s inside "
        "student_function() at student.py line ? (called as student_function(n=0)), where test_stuck ran "
        "past its limit: the same endless loop? the input: n=0",
    ])


def test_a_bad_limit_is_a_usage_error(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_ok="def test_ok():\n    pass\n")
    result = pytester.runpytest_subprocess("--test-time-limit", "-1", timeout=120)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--test-time-limit must be a number of seconds >= 0 (0: no limit), got -1.0*"])
