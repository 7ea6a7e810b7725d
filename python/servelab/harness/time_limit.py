"""A time limit per test for ``pytest assignments/`` (and so ``make check``): a test stuck in an
endless loop fails with a message naming it and the limit, and the run goes on with the next.

The limit is :data:`DEFAULT_S` seconds of wall-clock time per test (its setup and its call, each
on its own clock), ``--test-time-limit S`` or ``$SERVELAB_TEST_TIME_LIMIT`` to change it, 0 for
none. It is six times what the slowest reference test takes on a busy 2-core machine (a9's
kernels, 20 s with the ``student`` profile's 100 examples): a slow but correct solution passes,
a test that would never end is stopped within two minutes.

Why not pytest-timeout: its signal method ends a test with pytest's own ``Failed``, which
Hypothesis catches as a failing example and then shrinks, re-running the endless loop with no
alarm left; the run would hang anyway. :class:`TimeLimitExceeded` derives from
``BaseException`` (not ``Exception``), which Hypothesis lets through at once: a property test is
limited as a whole, not per example, and is never shrunk into a second hang.

An alarm (``SIGALRM``) interrupts Python code between bytecodes: a loop in the student's Python
function is stopped where it spins, and pytest's traceback shows that line. Where there is no
``SIGALRM`` (Windows: the README's devcontainer runs Linux) or outside the main thread, no
limit applies.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

DEFAULT_S = 120.0
ENV = "SERVELAB_TEST_TIME_LIMIT"


class TimeLimitExceeded(BaseException):
    """Raised in a test that ran past the limit (a ``BaseException``: Hypothesis does not shrink it)."""


def message(nodeid: str, when: str, limit_s: float) -> str:
    """What a stuck test's failure says.

    >>> message("a5_batching/test_a5_batching.py::test_static", "call", 120.0)
    'a5_batching/test_a5_batching.py::test_static ran past the time limit of 120 s per test (an endless loop?); the run goes on with the next test (SERVELAB_TEST_TIME_LIMIT=600 allows more)'
    """
    where = "" if when == "call" else f" (in {when})"
    return (f"{nodeid}{where} ran past the time limit of {limit_s:g} s per test (an endless loop?); "
            f"the run goes on with the next test ({ENV}=600 allows more)")


def limit_of(option: float | None, environ=os.environ) -> float:
    """The limit in seconds: the option, else ``$SERVELAB_TEST_TIME_LIMIT``, else :data:`DEFAULT_S`.

    >>> limit_of(None, {}), limit_of(5, {}), limit_of(None, {ENV: "0"})
    (120.0, 5.0, 0.0)
    >>> limit_of(None, {ENV: "soon"})
    Traceback (most recent call last):
    ...
    ValueError: SERVELAB_TEST_TIME_LIMIT must be a number of seconds >= 0 (0: no limit), got 'soon'
    """
    raw = option if option is not None else environ.get(ENV, DEFAULT_S)
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = -1.0
    if not value >= 0:  # also NaN
        name = "--test-time-limit" if option is not None else ENV
        raise ValueError(f"{name} must be a number of seconds >= 0 (0: no limit), got {raw!r}")
    return value


class TimeLimit:
    """The pytest plugin: an alarm around each test's setup and call."""

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s

    @contextmanager
    def _alarm(self, nodeid: str, when: str) -> Iterator[None]:
        usable = (self.limit_s > 0 and hasattr(signal, "SIGALRM")
                  and threading.current_thread() is threading.main_thread())
        if not usable:
            yield
            return

        def expired(signum, frame):
            raise TimeLimitExceeded(message(nodeid, when, self.limit_s))

        previous = signal.signal(signal.SIGALRM, expired)
        signal.setitimer(signal.ITIMER_REAL, self.limit_s)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item):
        with self._alarm(item.nodeid, "setup"):
            yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        with self._alarm(item.nodeid, "call"):
            yield


def add_option(parser: pytest.Parser) -> None:
    parser.addoption("--test-time-limit", dest="servelab_test_time_limit", type=float, default=None,
                     help=f"seconds a test may run before it fails (default: ${ENV}, else {DEFAULT_S:g}; 0: none)")


def from_config(config: pytest.Config) -> TimeLimit:
    try:
        return TimeLimit(limit_of(config.getoption("servelab_test_time_limit", None)))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
