"""Time limits for ``pytest assignments/`` (and so ``make check``): a test stuck in an endless loop
fails within seconds with a message naming it, the input that was running and the line that spun,
and the run goes on with the next.

Two limits, each on its own clock:

* **per example**, fitted to the test (:mod:`.example_times`): one Hypothesis example (or a test
  without Hypothesis as a whole) may run :data:`~.example_times.FACTOR` times the slowest example
  of the reference solution, scaled to this machine's speed, at least a few seconds. An endless
  loop is one call that never returns; a real failure's shrinking runs many short examples and is
  never cut by it. A test the table does not list has only the other limit.
* **per test**, :data:`DEFAULT_S` seconds of wall-clock time for the test's setup and its call,
  a backstop for a test slow as a whole. ``--test-time-limit S`` or ``$SERVELAB_TEST_TIME_LIMIT``
  changes it (and caps the per-example one); 0 switches both off.

When an example is stopped, the function of the student's file that was running is remembered: a
later test whose example has been inside that same function for a fifth of its own limit (at
least :data:`QUICK_FLOOR_S`) is stopped then, as spinning the same way, so that a loop reached by
four tests does not cost four full limits.

Why not pytest-timeout: its signal method ends a test with pytest's own ``Failed``, which
Hypothesis catches as a failing example and then shrinks, re-running the endless loop with no
alarm left; the run would hang anyway. :class:`TimeLimitExceeded` derives from
``BaseException`` (not ``Exception``), which Hypothesis lets through at once: it is never shrunk
into a second hang.

A timer (``SIGALRM`` every :data:`TICK_S` seconds) interrupts Python code between bytecodes: a
loop in the student's Python function is stopped where it spins, and pytest's traceback shows
that line. Where there is no ``SIGALRM`` (Windows: the README's devcontainer runs Linux) or
outside the main thread, no limit applies.
"""

from __future__ import annotations

import functools
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import pytest

from servelab.harness.example_times import FACTOR, FILE_NAME, ExampleTimes, Recorder, workload_s
from servelab.harness.stuck_input import describe_call, describe_example, student_codes, student_frames, where

DEFAULT_S = 120.0
ENV = "SERVELAB_TEST_TIME_LIMIT"
TICK_S = 0.1
QUICK_SHARE = 0.2  # of its example limit: a later example inside a function that spun before
QUICK_FLOOR_S = 1.0


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


def example_message(nodeid: str, limit_s: float, spinning: str, the_input: str) -> str:
    """What a test whose example ran past its limit says: the input last (the summary keeps a
    line's end).

    >>> example_message("a5_batching/test_a5_batching.py::test_hand_checked", 4.0,
    ...                 "simulate_static() at batching.py line 71", "simulate_static(batch_size=2)")
    "a5_batching/test_a5_batching.py::test_hand_checked ran one example past 4 s (10 times the reference solution's slowest, on this machine): an endless loop in simulate_static() at batching.py line 71? the input: simulate_static(batch_size=2)"
    """
    return (f"{nodeid} ran one example past {limit_s:.3g} s ({FACTOR:g} times the reference solution's "
            f"slowest, on this machine): an endless loop in {spinning}? the input: {the_input}")


def again_message(nodeid: str, ran_s: float, spinning: str, before: str, the_input: str) -> str:
    """What a later test stuck in a function that spun before says.

    >>> again_message("t.py::test_b", 1.04, "f() at m.py line 3", "t.py::test_a", "f(n=3)")
    't.py::test_b was stopped after 1 s inside f() at m.py line 3, where test_a ran past its limit: the same endless loop? the input: f(n=3)'
    """
    return (f"{nodeid} was stopped after {ran_s:.2g} s inside {spinning}, where {before.rpartition('::')[2]} "
            f"ran past its limit: the same endless loop? the input: {the_input}")


@dataclass
class _Clock:
    """The test running now: its clocks, its limits and its current example."""

    nodeid: str
    when: str
    start: float
    test_limit_s: float  # 0: none
    example_limit_s: float | None  # None: none
    example_start: float | None = None  # None: between examples
    example: dict[str, Any] | None = field(default=None)  # Hypothesis's current arguments

    @property
    def quick_s(self) -> float:
        limit = self.example_limit_s or self.test_limit_s
        return max(QUICK_FLOOR_S, QUICK_SHARE * limit)


def _hypothesis_handle(item: pytest.Item) -> Any:
    """The ``.hypothesis`` handle of ``item``'s test (a state machine's has no inner test to wrap)."""
    if not isinstance(item, pytest.Function) or item.name == "runTest":
        return None
    return getattr(getattr(item.obj, "__func__", item.obj), "hypothesis", None)


class TimeLimit:
    """The pytest plugin: a timer around each test's setup and call, the current example tracked
    through Hypothesis's inner test (the same hook :mod:`.fail_fast` wraps)."""

    def __init__(self, limit_s: float, times: ExampleTimes | None = None, root: Path | None = None,
                 files: frozenset[str] = frozenset(), recorder: Recorder | None = None) -> None:
        self.limit_s = limit_s
        self.times = times if limit_s > 0 else None
        self.root = root
        self.files = files  # the files students edit: where a spinning loop is looked for
        self.recorder = recorder
        self.here_s: float | None = None  # this machine's workload time, measured once when needed
        self.spun: dict[CodeType, str] = {}  # a student function that spun -> the test it stopped
        self.clock: _Clock | None = None

    def _test_id(self, item: pytest.Item) -> str:
        """``a5_batching/test_a5_batching.py::test_hand_checked``: the manifest's id of ``item``."""
        path = Path(str(item.path)).resolve()
        inside = item.nodeid.split("::", 1)[1].split("[", 1)[0] if "::" in item.nodeid else item.name
        try:
            return f"{path.relative_to(self.root).as_posix()}::{inside}" if self.root else item.nodeid
        except ValueError:
            return item.nodeid

    def _example_limit(self, item: pytest.Item) -> float | None:
        # a state machine's examples cannot be told apart from outside: its whole run, shrinking
        # included, would count as one, so it keeps only the limit per test
        if self.times is None or item.name == "runTest":
            return None
        if self.here_s is None:
            self.here_s = workload_s()
        fitted = self.times.limit_s(self._test_id(item), self.here_s)
        return None if fitted is None else min(fitted, self.limit_s)

    def _the_input(self, frame: FrameType | None) -> tuple[str, str, FrameType | None]:
        """(where it spins, the input that was running, the innermost frame of the student's
        code): the input is Hypothesis's example when there is one (the student's call then
        goes with where it spins), else the student's call with its arguments."""
        outer, inner = student_frames(frame, self.files)
        clock = self.clock
        example = describe_example(clock.example) if clock is not None and clock.example else ""
        call = describe_call(outer) if outer is not None else ""
        spinning = where(inner) if inner is not None else "the test"
        if example and call:
            spinning += f" (called as {call})"
        return spinning, example or call or "(none recorded)", inner

    def _remember(self, frame: FrameType | None, nodeid: str) -> None:
        """The student's functions on the stack of a stopped test: a later test found inside one
        of them for long is stopped as the same loop (the tick that stopped this one may have
        landed in a helper the loop calls, or in the loop's own function)."""
        for code in student_codes(frame, self.files):
            self.spun.setdefault(code, nodeid)

    def _tick(self, signum: int, frame: FrameType | None) -> None:
        clock = self.clock
        if clock is None:
            return
        now = time.monotonic()
        if clock.test_limit_s and now - clock.start >= clock.test_limit_s:
            spinning, the_input, inner = self._the_input(frame)
            self._remember(frame, clock.nodeid)
            raise TimeLimitExceeded(message(clock.nodeid, clock.when, clock.test_limit_s)
                                    + f"; it was in {spinning}; the input: {the_input}")
        if clock.example_start is None:
            return
        ran = now - clock.example_start
        # the same loop first: a tick that comes late (a loaded machine) still names it so
        if self.spun and ran >= clock.quick_s:
            spinning, the_input, inner = self._the_input(frame)
            if inner is not None and inner.f_code in self.spun:
                raise TimeLimitExceeded(again_message(clock.nodeid, ran, spinning, self.spun[inner.f_code], the_input))
        if clock.example_limit_s is not None and ran >= clock.example_limit_s:
            spinning, the_input, inner = self._the_input(frame)
            self._remember(frame, clock.nodeid)
            raise TimeLimitExceeded(example_message(clock.nodeid, clock.example_limit_s, spinning, the_input))

    @contextmanager
    def _timer(self, item: pytest.Item, when: str) -> Iterator[None]:
        example_limit = self._example_limit(item) if when == "call" else None
        now = time.monotonic()
        clock = _Clock(item.nodeid, when, now, self.limit_s, example_limit,
                       example_start=now if when == "call" else None)
        callspec = getattr(item, "callspec", None)
        if callspec is not None:  # a parametrised case: its parameters are its input
            clock.example = dict(callspec.params)
        usable = ((self.limit_s > 0 or example_limit is not None) and hasattr(signal, "SIGALRM")
                  and threading.current_thread() is threading.main_thread())
        self.clock = clock
        if not usable:
            try:
                yield
            finally:
                self.clock = None
            return
        previous = signal.signal(signal.SIGALRM, self._tick)
        signal.setitimer(signal.ITIMER_REAL, TICK_S, TICK_S)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            self.clock = None

    def _tracking_examples(self, item: pytest.Item) -> Any:
        """Wraps ``item``'s Hypothesis inner test: each example starts the example clock and
        shows its arguments; returns the handle and its own inner test (to put back), or None."""
        handle = _hypothesis_handle(item)
        if handle is None:
            return None
        inner = handle.inner_test
        key = self._test_id(item)

        @functools.wraps(inner)  # Hypothesis reads the name and signature
        def tracked(*args: Any, **kwargs: Any) -> Any:
            clock = self.clock
            start = time.monotonic()
            if clock is not None:
                clock.example_start, clock.example = start, kwargs
            try:
                return inner(*args, **kwargs)
            finally:
                if self.recorder is not None:
                    self.recorder.add(key, time.monotonic() - start)
                if clock is not None:
                    clock.example_start = None
        handle.inner_test = tracked
        return handle, inner

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item):
        with self._timer(item, "setup"):
            yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        tracked = self._tracking_examples(item)
        start = time.monotonic()
        try:
            with self._timer(item, "call"):
                yield
        finally:
            if tracked is not None:
                handle, inner = tracked
                handle.inner_test = inner
            elif self.recorder is not None:  # no Hypothesis: the test is one example
                self.recorder.add(self._test_id(item), time.monotonic() - start)

    def pytest_sessionfinish(self) -> None:
        if self.recorder is not None:
            self.recorder.write(workload_s())


def add_option(parser: pytest.Parser) -> None:
    parser.addoption("--test-time-limit", dest="servelab_test_time_limit", type=float, default=None,
                     help=f"seconds a test may run before it fails (default: ${ENV}, else {DEFAULT_S:g}; "
                          "0: no limit at all, not even the fitted one per example)")
    parser.addoption("--record-example-times", dest="servelab_record_example_times", default=None,
                     help="write each test's slowest example to this JSON file (instructors, on the "
                          "reference solutions: python -m servelab.harness.example_times)")


def from_config(config: pytest.Config, root: Path | None = None, files: frozenset[str] = frozenset()) -> TimeLimit:
    """The plugin for this run: the limits, the table of ``root`` (``assignments/``) if it has
    one, and the student's files, where a spinning loop is looked for."""
    try:
        limit = limit_of(config.getoption("servelab_test_time_limit", None))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    record = config.getoption("servelab_record_example_times", None)
    times = ExampleTimes.load(root / FILE_NAME) if root is not None and not record else None
    return TimeLimit(limit, times, root, files, Recorder(Path(record)) if record else None)
