"""The one line that the points table's summary prints for a failed test: what was expected and
what came out, kept whole however the exception was printed.

The line is read from the exception itself (:func:`summary_of`), not from pytest's printout of
it, whose first line may stop inside a wrapped ``assert`` (``assert ([1, 0] == [0,``). An
exception group (Hypothesis found several distinct failures) is summarised by its first failure,
after the group's title: the title alone says nothing a student can act on.

>>> summary_of(AssertionError("param_count of ModelSpec(n_layers=1): expected 12,\\n got 11"), "t::x")
'param_count of ModelSpec(n_layers=1): expected 12, got 11'
>>> class ScheduleError(AssertionError): pass
>>> summary_of(GROUP("Hypothesis found 2 distinct failures.", [ScheduleError("step 2: expected 1, got 2"),
...                                                            ValueError("other")]), "t::x")
'Hypothesis found 2 distinct failures; the first: ScheduleError: step 2: expected 1, got 2'
"""

from __future__ import annotations

import re
import sys

import pytest

from servelab.harness.time_limit import TimeLimitExceeded

if sys.version_info >= (3, 11):
    GROUP = BaseExceptionGroup
else:  # Python 3.10: Hypothesis raises the exceptiongroup backport's groups
    from exceptiongroup import BaseExceptionGroup as GROUP


def summary_of(exc: BaseException, nodeid: str) -> str:
    """``exc`` in one line: an assertion's own message (the tests' messages say what was
    expected), another exception's type and message, a group's first failure."""
    title = ""
    while isinstance(exc, GROUP) and exc.exceptions:
        title = title or f"{exc.message.rstrip('.')}; the first: "
        exc = exc.exceptions[0]
    text = " ".join(_without_explanation(str(exc)).split())
    if isinstance(exc, TimeLimitExceeded):  # the summary line names the test already
        return title + text.removeprefix(nodeid + " ")
    if type(exc) is not AssertionError or not text:  # ScheduleError: ..., ValueError: ...
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return title + text


# the lines pytest's assertion rewriting adds under the failing expression
EXPLANATION = re.compile(r"^\s*(\+ |At index|Use -v|Full diff|Left contains|Right contains|Differing |Omitting |"
                         r"Common items|Extra items)")


def _without_explanation(text: str) -> str:
    r"""A rewritten ``assert``'s message without pytest's explanation: a test's own message
    alone (it says what was expected), a bare ``assert`` as the expression that failed.

    >>> _without_explanation("first_token_s: expected 1.0, got 2.0\nassert False")
    'first_token_s: expected 1.0, got 2.0'
    >>> _without_explanation("assert [3, 2] == [0, 1]\n  At index 0 diff: 3 != 0\n  Use -v to get more diff")
    'assert [3, 2] == [0, 1]'
    """
    lines = text.splitlines()
    if lines and not lines[0].startswith("assert "):
        lines = lines[:next((i for i, line in enumerate(lines) if i and line.startswith("assert ")), len(lines))]
    return "\n".join(lines[:next((i for i, line in enumerate(lines) if i and EXPLANATION.match(line)), len(lines))])


def one_line(report: pytest.TestReport) -> str:
    """A failed report's message in one line: a not-started test's own line, a refused import's
    in the grader's words, else the summary of the exception pytest caught."""
    if isinstance(report.longrepr, str):
        text = report.longrepr
    else:
        crash = getattr(report.longrepr, "reprcrash", None)
        text = getattr(report, "servelab_summary", None) or (crash.message if crash is not None else str(report.longrepr))
    first = next((line.strip() for line in text.splitlines() if line.strip()), "failed")
    first = first.removeprefix("AssertionError: ")  # the tests' messages say what was expected
    refused = getattr(report, "servelab_refused", None)
    if refused:  # the grader's words ("importing ledger raised ImportError: ..."), not our class's name
        first = refused if refused.startswith("importing ") else f"ImportError: {refused}"
    where = "" if report.when == "call" else f"(in {report.when}) "
    return where + first


def shorten(line: str, width: int) -> str:
    """``line`` cut to ``width`` characters in its middle, an ellipsis marking the cut: the
    start says which test and which input, the end what was expected and what came out.

    >>> shorten("param_count of ModelSpec(d_model=1, n_layers=2): expected 12, got 11", 40)
    'param_count of Model…expected 12, got 11'
    """
    if len(line) <= width:
        return line
    tail = (width - 1) // 2
    return line[: width - 1 - tail] + "…" + line[len(line) - tail:]
