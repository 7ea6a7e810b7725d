"""Gradescope's ``results.json``, built from the manifest alone (names, points, visibility) and
the judge's outcomes; written atomically so that a reader never sees half a file.

Visibility: a test takes its task's visibility, except that a test inside a ``### BEGIN HIDDEN
TESTS`` region of a visible task is shown ``after_due_date``.

Every message is made safe before it is written (:func:`safe_text`): no lone surrogates (they
cannot be encoded), no absolute paths or memory addresses (they name this machine's temporary
folders and change from one grading to the next), and a bounded length.

>>> safe_text("bad " + chr(0xD800) + " at /tmp/servelab-grade-x1/run/a1/ledger.py, <f at 0x7f3a2b1c9d40>")
'bad ? at <path>/ledger.py, <f at 0x...>'
>>> safe_text("<course>/assignments/x.py and 3 tok/s, 1/2")
'<course>/assignments/x.py and 3 tok/s, 1/2'
>>> len(safe_text("x" * 10_000))
4018
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import unicodedata
from pathlib import Path

from autograder.files import normal_mode
from servelab.harness.manifest import Manifest

PENDING = "pending"  # a test whose points wait for the instructor (status_of; never a "status" value)


def build(manifest: Manifest, outcomes: dict[str, dict], hidden: set[str],
          execution_time: float | None = None, notes: dict[str, str] | None = None) -> dict:
    """``outcomes[task][test] = Outcome``; ``hidden``: test ids in hidden regions.
    ``execution_time`` is left out unless given (Gradescope's format makes it optional): the
    grader leaves it out, so that a regrade writes the very same bytes."""
    tests: list[dict] = []
    lines: list[str] = []
    score = 0
    for t_index, task in enumerate(manifest.tasks, 1):
        got, first = 0, len(tests)
        for n_index, (test, points) in enumerate(task.tests.items(), 1):
            outcome = outcomes[task.id][test]
            earned = points if outcome.passed else 0
            got += earned
            visibility = "after_due_date" if (test in hidden and task.visibility == "visible") else task.visibility
            tests.append({"name": f"{task.id}: {test.split('::', 1)[-1]}", "number": f"{t_index}.{n_index}",
                          "score": earned, "max_score": points, "status": "passed" if outcome.passed else "failed",
                          "output": outcome.message, "visibility": visibility,
                          "extra_data": {"task": task.id, "test": test}})
        score += got
        note = (notes or {}).get(task.id)
        lines.append(summary_line(f"{task.id} ({task.title}, {task.lecture})", tests[first:], f"  [{note}]" if note else ""))
    data = {"score": score, "max_score": manifest.total_points,
            "output": "\n".join(lines), "visibility": "visible", "stdout_visibility": "hidden", "tests": tests}
    if execution_time is not None:
        data["execution_time"] = round(execution_time, 3)
    return data


def count_visible(data: dict, past_due: bool) -> dict:
    """Sets results.json's ``score`` and ``max_score`` to what a student may see now: before
    the due date only the ``visible`` tests (a total holding the others would say whether the
    hidden tests pass), after it every test. Gradescope takes the top-level ``score`` as the
    submission's points, so a grading before the due date leaves the hidden points out until the
    instructors regrade after it (autograder/README.md, *Points and visibility*).
    ``extra_data.hidden_points_counted`` says which it was.

    >>> d = {"tests": [{"score": 2, "max_score": 2, "visibility": "visible"},
    ...                {"score": 3, "max_score": 3, "visibility": "after_due_date"}]}
    >>> [count_visible(d, past)["score"] for past in (False, True)]
    [2, 5]
    """
    counted = [t for t in data.get("tests", []) if past_due or t.get("visibility", "visible") == "visible"]
    data["score"] = plain_points(sum(t["score"] for t in counted))
    data["max_score"] = plain_points(sum(t["max_score"] for t in counted))
    data.setdefault("extra_data", {})["hidden_points_counted"] = bool(past_due)
    return data


def total_points(data: dict) -> int | float:
    """Every test's points, hidden ones included: the instructors' total (the gradebook and the
    self-check), whatever results.json's ``score`` shows the student.

    >>> total_points({"score": 2, "tests": [{"score": 2}, {"score": 3}]})
    5
    """
    return plain_points(sum(t["score"] for t in data.get("tests", [])))


def summary_line(label: str, tests: list[dict], note: str = "") -> str:
    """One line of results.json's top-level ``output`` (which students always see) for the
    ``tests`` of one task or notebook: the points of its visible tests only. A line counting
    tests shown after the due date would say, before it, whether the hidden tests pass (a
    pass/fail oracle for them); their points are only named.

    >>> summary_line("a1", [{"score": 2, "max_score": 2, "visibility": "visible"},
    ...                     {"score": 3, "max_score": 3, "visibility": "after_due_date"}])
    'a1: 2 / 2  [+3 point(s) in tests shown after the due date]'
    """
    shown = [t for t in tests if t["visibility"] == "visible"]
    later = sum(t["max_score"] for t in tests if t["visibility"] != "visible")
    got, out_of = (plain_points(sum(t[k] for t in shown)) for k in ("score", "max_score"))
    line = f"{label}: {got} / {out_of}"
    return line + (f"  [+{plain_points(later)} point(s) in tests shown after the due date]" if later else "") + note


def plain_points(x) -> int | float:
    """Points as a student reads them: ``3`` for 3.0, ``1.5`` stays.

    >>> plain_points(3.0), plain_points(1.5)
    (3, 1.5)
    """
    return int(x) if float(x).is_integer() else x


def status_fields(passed: bool, pending: bool = False) -> dict:
    """A test's ``status`` in results.json: "passed" or "failed"; none at all for a test whose
    points wait for the instructor (a manually graded notebook cell), which has not failed:
    Gradescope's schema makes ``status`` optional, and its output says it is pending.

    >>> status_fields(True), status_fields(False), status_fields(False, pending=True)
    ({'status': 'passed'}, {'status': 'failed'}, {})
    """
    return {} if pending else {"status": "passed" if passed else "failed"}


def status_of(test: dict) -> str:
    """"passed", "failed" or "pending" (no status: see :func:`status_fields`).

    >>> status_of({"status": "failed"}), status_of({"score": 0, "max_score": 2})
    ('failed', 'pending')
    """
    return test.get("status", PENDING)


MAX_TEXT = 4000  # characters of one message
# an absolute path: "/" not after a word, a dot, "<" or ">" (so "tok/s" and "<course>/x" stay),
# then at least two segments; it becomes "<path>/" and its last segment
_ABSOLUTE_PATH = re.compile(r"(?<![\w.<>~/-])/(?:[^\s/'\"():,;\[\]{}<>|]+/)+([^\s/'\"():,;\[\]{}<>|]*)")
_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{6,}\b")


def plain_text(text: str) -> str:
    r"""``text`` with every character that is not plain text written as its escape: control
    characters but newline and tab (a terminal's ESC and OSC sequences, a carriage return that
    hides a line), and the invisible ones (bidi overrides such as U+202E, zero-width spaces,
    every Unicode format, private-use and separator character). A student's message then shows
    what it holds, and cannot reorder, hide or recolour the text around it.

    >>> plain_text("ok\x1b]8;;http://x\x07 \u202egnp.exe \u200bzero\tend\n")
    'ok\\x1b]8;;http://x\\x07 \\u202egnp.exe \\u200bzero\tend\n'
    """
    return "".join(ch if ch in "\n\t" or unicodedata.category(ch) not in HIDDEN_CATEGORIES else ascii(ch)[1:-1]
                   for ch in text)


# control, format (bidi, zero-width), surrogate, private-use, line and paragraph separators
HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def safe_text(text, paths: dict | None = None, limit: int = MAX_TEXT) -> str:
    """``text`` as a message results.json can carry and a regrade repeats: each of ``paths``
    (path -> placeholder) replaced, other absolute paths cut to ``<path>/<last part>``, memory
    addresses blanked, lone surrogates replaced, every character that is not plain text
    escaped (:func:`plain_text`), at most ``limit`` characters (then a note)."""
    if not isinstance(text, str):
        text = describe(text)
    text = text.encode("utf-8", "replace").decode("utf-8")  # lone surrogates -> "?"
    text = plain_text(text)
    for path, placeholder in sorted((paths or {}).items(), key=lambda kv: -len(str(kv[0]))):
        text = text.replace(str(path), placeholder)
    text = _ABSOLUTE_PATH.sub(lambda m: f"<path>/{m.group(1)}", text)
    text = _ADDRESS.sub("0x...", text)
    return text if len(text) <= limit else text[:limit] + "\n... (message cut)"


def describe(exc) -> str:
    """``str(exc)``, or a placeholder when even that fails (an ``__str__`` that raises)."""
    try:
        return str(exc)
    except BaseException:  # noqa: BLE001
        return f"<{type(exc).__name__} that cannot be printed>"


def make_safe(data: dict, paths: dict | None = None) -> dict:
    """results.json ``data`` with every message and name passed through :func:`safe_text`."""
    data["output"] = safe_text(data.get("output", ""), paths, limit=20 * MAX_TEXT)
    for test in data.get("tests", []):
        test["output"] = safe_text(test.get("output", ""), paths)
        test["name"] = safe_text(test.get("name", ""), paths, limit=500)
    return data


def write_json_atomic(data: dict, path: Path) -> None:
    """Writes ``data`` to ``path`` through a temporary file in the same folder and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, normal_mode(file=True))  # 0644, not mkstemp's 0600: it holds no secret
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, sort_keys=True, ensure_ascii=False)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
