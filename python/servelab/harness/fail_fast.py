"""A student's first runs fail fast: a test of a task not started yet costs one example and one
line, not a Hypothesis report.

An untouched stub raises ``NotImplementedError`` on every input, so there is nothing for
Hypothesis to look for: today's profile would still generate, then shrink, then look for more
bugs, for tens of seconds a test. So before a Hypothesis test runs, a probe calls it on its
``@example`` cases and one generated example, with no shrinking and no database (the
``student_probe`` settings of :mod:`servelab.harness.hypothesis_profiles`):

* the probe raises ``NotImplementedError``: the test fails at once, reported as the one line
  ``not started: param_count() in a1_ledger/ledger.py still raises NotImplementedError``;
* the probe meets an import the grader refuses (:mod:`.submission_guard`): the test fails at
  once with the grader's message, which every input would repeat;
* anything else (it passes, or fails another way): the test runs in full under the loaded
  profile, shrinking included, so a bug's report ends at the smallest counterexample. An
  example of that run that reaches a stub (the probe's one did not: a14's host tier only calls
  your function once it is full) ends the run as the probe would: nothing is shrunk (a stub
  fails on every input), and the test is ``not started``. Shrinking a stub's error was most of a stubbed release's ``pytest assignments/``.

A test without Hypothesis that raises ``NotImplementedError`` gets the same one line. Such
failures are filed under ``not started`` in pytest's tally (not ``failed``, so that they print no
traceback section), and still make the run fail. ``assignments/conftest.py`` registers this
plugin for students; the autograder neither loads it nor needs it (it does not shrink).

>>> not_implemented(NotImplementedError("a1_ledger/ledger.py: fill in the solution here"))
NotImplementedError('a1_ledger/ledger.py: fill in the solution here')
>>> not_implemented(ValueError("param_count: expected 12, got 11")) is None
True
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import settings

from servelab.harness.hypothesis_profiles import PROBE
from servelab.harness.submission_guard import refusal_in
from servelab.harness.time_limit import TimeLimitExceeded

NOT_STARTED = "not started"
if sys.version_info >= (3, 11):
    GROUP = BaseExceptionGroup
else:  # Python 3.10: Hypothesis raises the exceptiongroup backport's groups
    from exceptiongroup import BaseExceptionGroup as GROUP


def not_implemented(exc: BaseException) -> NotImplementedError | None:
    """``exc`` if it is a ``NotImplementedError``, or the first one of an exception group whose
    every member is one (a group that also holds another error is a real bug); else None.

    >>> not_implemented(GROUP("two", [NotImplementedError("a"), NotImplementedError("b")]))
    NotImplementedError('a')
    >>> not_implemented(GROUP("mixed", [NotImplementedError("a"), AssertionError("b")])) is None
    True
    """
    if isinstance(exc, NotImplementedError):
        return exc
    if isinstance(exc, GROUP):
        found = [not_implemented(e) for e in exc.exceptions]
        return found[0] if found and all(found) else None
    return None


def not_started_line(exc: NotImplementedError) -> str:
    """The one line a not-started test prints: the stub that raised, by function and file.

    >>> def param_count(model):
    ...     raise NotImplementedError("a1_ledger/ledger.py: fill in the solution here")
    >>> try:
    ...     param_count(None)
    ... except NotImplementedError as exc:
    ...     print(not_started_line(exc))
    not started: param_count() in <doctest ...> still raises NotImplementedError
    """
    return f"{NOT_STARTED}: {stub_of(exc)} still raises NotImplementedError"


def stub_of(exc: BaseException) -> str:
    """``function() in folder/file.py``: where ``exc`` was raised (its innermost frame)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return "a stub"
    path = Path(tb.tb_frame.f_code.co_filename)
    where = f"{path.parent.name}/{path.name}" if path.parent.name else path.name
    return f"{tb.tb_frame.f_code.co_name}() in {where}"


def _probe(item: pytest.Item) -> Callable[[], None] | None:
    """A callable that runs ``item``'s Hypothesis test under the probe settings, or None when
    the item is not a Hypothesis test."""
    if not isinstance(item, pytest.Function):  # a doctest, say: never a Hypothesis test
        return None
    function = item

    def probe_of(current: settings) -> settings:
        return settings(current, **PROBE)

    # the TestCase class of a state machine carries its settings as a class attribute
    case: Any = function.cls
    machine = getattr(getattr(case, "runTest", None), "_hypothesis_state_machine_class", None)
    if machine is not None and function.name == "runTest":  # a RuleBasedStateMachine's TestCase
        from hypothesis.stateful import run_state_machine_as_test
        return lambda: run_state_machine_as_test(machine, settings=probe_of(case.settings))
    func: Any = getattr(function.obj, "__func__", function.obj)
    current = getattr(func, "_hypothesis_internal_use_settings", None)
    if current is None or getattr(func, "hypothesis", None) is None:
        return None

    def run() -> None:
        func._hypothesis_internal_use_settings = probe_of(current)
        try:
            function.obj(**{name: function.funcargs[name] for name in function._fixtureinfo.argnames})
        finally:
            func._hypothesis_internal_use_settings = current
    return run


class _StubReached(BaseException):
    """Carries a stub's ``NotImplementedError`` out of a Hypothesis run. Hypothesis takes an
    ``Exception`` for a failure, to shrink and to replay; this is none (as with
    ``KeyboardInterrupt``, it lets it through at once), so the run ends at that example, even
    in the middle of shrinking a real failure of another input."""

    def __init__(self, stub: NotImplementedError) -> None:
        super().__init__(str(stub))
        self.stub = stub


def _stopping_at_a_stub(inner: Callable[..., Any]) -> Callable[..., Any]:
    """A Hypothesis test's inner function (``test.hypothesis.inner_test``, which Hypothesis
    reads at each run for such wrappers), wrapped for its full run: an example that raises
    ``NotImplementedError`` ends the run with :class:`_StubReached`."""

    @functools.wraps(inner)  # Hypothesis reads the name and signature
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            return inner(*args, **kwargs)
        except NotImplementedError as exc:
            raise _StubReached(exc) from None
    return wrapped


def _hypothesis_handle(item: pytest.Item) -> Any:
    """The ``.hypothesis`` handle of ``item``'s test function, or None (no Hypothesis test, or
    a state machine's, which has no inner function to wrap: its probe runs every step)."""
    if not isinstance(item, pytest.Function) or item.name == "runTest":
        return None
    return getattr(getattr(item.obj, "__func__", item.obj), "hypothesis", None)


class FailFast:
    """The probe before each Hypothesis test, the full run's stop at a stub, and the one-line
    report of a not-started test."""

    # innermost of the wrappers: inside the time limit's (a stuck probe is a stuck test)
    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Any:
        run = _probe(item)
        if run is None:
            return (yield)
        try:
            run()
        except (KeyboardInterrupt, SystemExit, TimeLimitExceeded):  # a stuck probe is a stuck test
            raise
        except BaseException as exc:  # noqa: BLE001 - only a stub's NotImplementedError stops here
            stub = not_implemented(exc)
            if stub is not None:
                raise stub.with_traceback(stub.__traceback__) from None
            if refusal_in(exc) is not None:  # the grader's rule, broken on every input alike
                raise
            # a real failure: the full run below finds it again and shrinks it
        handle = _hypothesis_handle(item)
        if handle is None:
            return (yield)
        inner = handle.inner_test
        handle.inner_test = _stopping_at_a_stub(inner)
        try:
            return (yield)
        except _StubReached as reached:
            raise reached.stub.with_traceback(reached.stub.__traceback__) from None
        finally:
            handle.inner_test = inner

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        stub = not_implemented(call.excinfo.value) if call.excinfo is not None and report.failed else None
        if stub is not None:
            report.longrepr = not_started_line(stub)
            report.servelab_not_started = stub_of(stub)
        return report

    def pytest_report_teststatus(self, report: pytest.TestReport, config: pytest.Config):
        if getattr(report, "servelab_not_started", False):
            return NOT_STARTED, "n", ("NOT STARTED", {"yellow": True})
        return None
