"""The instructors' log: what nbgrader and the kernel said, kept out of results.json.

Students read results.json; everything in it is the grader's own words (a fixed message per
kind of failure). The details (nbgrader's log lines, a kernel's error, file names a submission
chose) are written here instead, on the logger ``autograder.instructors``. With no logging set
up, Python prints warnings on stderr: ``python -m autograder grade`` then shows them in the
terminal, and on Gradescope in the autograder output that only instructors see
(``autograder/gradescope/run_autograder``). Tests read them with pytest's ``caplog``.

The text is a submission's, so it is made harmless first: no control characters (a terminal
escape sequence, a carriage return that hides a line), at most :data:`MAX_DETAIL` characters.

>>> printable("ok\\x1b[2Jthen\\r\\n" + "x" * 3, limit=40)
'ok\\\\x1b[2Jthen\\\\r\\nxxx'
"""

from __future__ import annotations

import logging

LOGGER = logging.getLogger("autograder.instructors")
MAX_DETAIL = 4000  # characters of a tool's text kept per entry (its tail: where errors are)


def printable(text: str, limit: int = MAX_DETAIL) -> str:
    """``text``'s last ``limit`` characters with every control character but newline escaped."""
    text = str(text)[-limit:]
    return "".join(ch if ch == "\n" or (ch.isprintable() and ch != "\x7f") else ascii(ch)[1:-1] for ch in text)


def note(subject: str, what: str, detail: str = "") -> None:
    """One entry: ``subject`` (e.g. ``notebook ex06_tail_fanout``), the grader's summary
    ``what``, and the tool's own ``detail`` (escaped, tail only)."""
    body = printable(detail)
    LOGGER.warning("%s: %s%s", subject, what, f"\n{body}" if body else "")
