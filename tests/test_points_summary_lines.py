"""The summary under the points table (servelab.harness.plugin, failure_line): each failure's line
keeps what was expected and what came out, a Hypothesis group of failures shows its first
failure's message after the group's title, pytest's explanation of a bare ``assert`` is left out,
and the headline's counts are those of the lines below it. A pytest of its own on a two-task
manifest (pytester), with the students' plugins registered as assignments/conftest.py does."""

from __future__ import annotations

import re

pytest_plugins = ["pytester"]

CONFTEST = """
from pathlib import Path
from servelab.harness import fail_fast, plugin

def pytest_configure(config):
    config.pluginmanager.register(plugin.GradingPlugin(Path(__file__).with_name("manifest.toml")), "servelab-grading")
    config.pluginmanager.register(fail_fast.FailFast(), "servelab-fail-fast")
"""

MANIFEST = """
[[task]]
id = "t1_sums"
title = "Sums"
lecture = "§1"
edit = ["t1_sums/sums.py"]
[task.tests]
"t1_sums/test_sums.py::test_two_kinds_of_failure" = 2
"t1_sums/test_sums.py::test_long_state_then_expected_and_got" = 1
"t1_sums/test_sums.py::test_bare_assert" = 1

[[task]]
id = "t2_stub"
title = "A stub"
lecture = "§2"
edit = ["t2_stub/stub.py"]
[task.tests]
"t2_stub/test_stub.py::test_stub" = 1
"""

TESTS = """
from hypothesis import given, settings, strategies as st

class ScheduleError(AssertionError):
    pass

@settings(derandomize=True, database=None, max_examples=200)
@given(st.integers(0, 100))
def test_two_kinds_of_failure(n):
    if n == 0:
        raise ValueError("zero")
    if n > 10:
        raise ScheduleError(f"step {n}: expected at most 10, got {n}")

def test_long_state_then_expected_and_got():
    state = ", ".join(f"request {i} with {i * 7} tokens" for i in range(60))
    raise ScheduleError(f"step 3: schedule(state) with {state}: expected ([1], [], []),\\n got ([2], [], [])")

def test_bare_assert():
    assert [3, 2] == [0, 1]
"""


def test_each_line_keeps_expected_and_got(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makefile(".toml", manifest=MANIFEST)
    (pytester.path / "t1_sums").mkdir()
    (pytester.path / "t1_sums" / "test_sums.py").write_text(TESTS)
    (pytester.path / "t2_stub").mkdir()
    (pytester.path / "t2_stub" / "test_stub.py").write_text(
        "def test_stub():\n    raise NotImplementedError('t2_stub/stub.py: fill in the solution here')\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    out = result.stdout.str()
    tail = out[out.index("servelab: "):out.index("points by task")]
    # rich wraps the lines: one string, cut again before each task's id
    headline, *rest = re.split(r" (?=t\d_\w+: )", " ".join(tail.split()))
    assert headline == "servelab: 1 not started (a stub raises NotImplementedError), 3 failing (details above):", tail
    assert len(rest) == 1 + 3, rest  # the counts are those of the lines
    # the group: its title, then its first failure's own message, not "ExceptionGroup: ..."
    group = next(line for line in rest if "test_two_kinds_of_failure" in line)
    assert re.fullmatch(r"t1_sums: test_two_kinds_of_failure: Hypothesis found 2 distinct failures; the first: "
                        r"(ValueError: zero|ScheduleError: step \d+: expected at most 10, got \d+)", group), group
    # a long state cut in its middle: the end (expected, got) stays
    long = next(line for line in rest if "test_long_state" in line)
    assert long.startswith("t1_sums: test_long_state_then_expected_and_got: ScheduleError: step 3: schedule(state)")
    assert long.endswith("expected ([1], [], []), got ([2], [], [])"), long
    # a bare assert: the expression, without pytest's explanation
    assert "t1_sums: test_bare_assert: assert [3, 2] == [0, 1]" in rest, rest
