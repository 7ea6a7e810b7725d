"""The fail-fast probe of ``pytest assignments/`` (servelab.harness.fail_fast) when a stub is
reached only by a later example, as a14's host tier calls the student's function only once it
is full: the test is reported ``not started`` in one line, and the stub is called once (not
shrunk, which was most of a stubbed release's run), even when a real bug's shrinking walks into
it; a real bug alone is still shrunk to its smallest counterexample. In a pytest of its own (pytester, in process)."""

from __future__ import annotations

pytest_plugins = ["pytester"]

CONFTEST = """
from servelab.harness import fail_fast

def pytest_configure(config):
    config.pluginmanager.register(fail_fast.FailFast(), "servelab-fail-fast")
"""

# derandomized, Hypothesis' first generated integer is 0: the probe passes, later ones reach the
# stub (or the bug); CALLS counts the calls into the student's function
LATE = """
from hypothesis import given, settings, strategies as st

CALLS = {"stub": 0, "bug": 0}

def stub(n):
    CALLS["stub"] += 1
    raise NotImplementedError("fill in the solution here")

def buggy(n):
    CALLS["bug"] += 1
    return n if n < 20 else n + 1

@settings(max_examples=200, database=None, deadline=None, derandomize=True)
@given(st.integers(min_value=0, max_value=10**6))
def test_reaches_the_stub_late(n):
    if n > 10:
        stub(n)

@settings(max_examples=200, database=None, deadline=None, derandomize=True)
@given(st.integers(min_value=0, max_value=10**6))
def test_reaches_a_bug_late(n):
    assert buggy(n) == n

@settings(max_examples=200, database=None, deadline=None, derandomize=True)
@given(st.integers(min_value=0, max_value=10**6))
def test_a_bug_shrinks_into_the_stub(n):
    # half done: a stub below 20 (past the probe's 0), a bug above it, so shrinking the bug
    # walks into the stub
    if 0 < n < 20:
        stub(n)
    assert n < 20, "wrong above 20"


def test_zz_counts():
    with open("calls.txt", "w") as f:
        f.write(f"{CALLS['stub']} {CALLS['bug']}")
"""


def test_a_stub_reached_late_is_not_started_and_not_shrunk(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_late=LATE)
    result = pytester.runpytest("-p", "no:cacheprovider", "-v")
    out = result.stdout.str()
    stub_calls, bug_calls = (int(x) for x in (pytester.path / "calls.txt").read_text().split())
    assert "test_reaches_the_stub_late NOT STARTED" in out, out[-2000:]
    assert stub_calls == 2, f"the stub was called {stub_calls} times: Hypothesis went on (shrinking) after it raised"
    # the real bug is shrunk as before: many calls, down to the smallest failing input
    assert bug_calls > 5 and "n=20" in out, out[-2000:]
    # shrinking a real failure into the stub ends the run there too: not started, not Flaky
    assert "test_a_bug_shrinks_into_the_stub NOT STARTED" in out and "Flaky" not in out, out[-2000:]
    assert "1 failed, 1 passed, 2 not started in" in out and result.ret == 1
