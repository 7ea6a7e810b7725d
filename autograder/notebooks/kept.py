"""The notebooks kept for manual grading: the student's own, with nothing private of the course.

nbgrader's autograded notebook is the student's notebook with its locked cells restored from
the source, hidden tests included, and every cell's output. The copy kept for the TAs drops
what is not the student's: hidden-test regions leave the test cells (as nbgrader's own feedback
does), and an output line that holds a line of a private region of the source notebooks (a
solution, a hidden test, a model answer) is replaced by :data:`REDACTED`: the kernel ran the
hidden tests and could print them (IPython's input history holds every cell it ran).

>>> private = private_lines([{"cell_type": "code", "metadata": {}, "source":
...     "### BEGIN HIDDEN TESTS\\nassert secret_answer == 42\\n### END HIDDEN TESTS\\n"}])
>>> sorted(private)
['assert secret_answer == 42']
>>> cell = {"cell_type": "code", "metadata": {"nbgrader": {"grade": True, "grade_id": "t"}},
...         "source": "assert x\\n### BEGIN HIDDEN TESTS\\nassert secret_answer == 42\\n### END HIDDEN TESTS\\n",
...         "outputs": [{"output_type": "stream", "name": "stdout", "text": "x\\nassert secret_answer == 42\\n"}]}
>>> out = student_view({"cells": [cell]}, private)["cells"][0]
>>> out["source"], out["outputs"][0]["text"]
('assert x\\n', "x\\n[removed by the grader: a line of the course's private cells]\\n")
"""

from __future__ import annotations

import json

from autograder import markers
from autograder.notebooks.recheck import cell_kind

REDACTED = "[removed by the grader: a line of the course's private cells]"
MIN_PRIVATE = 16  # characters: shorter lines ("return n", "x = 1") say nothing about the course
# What of a notebook's outputs is kept, whatever their MIME type: a kernel may print millions of
# lines (nbgrader's own trimming covers streams only), and the grader reads and redacts what it
# keeps, in its own process. Each output's text is cut to MAX_OUTPUT_CHARS, and the outputs
# together stop at MAX_KEPT_CHARS; the rest is replaced by a note. The work is then bounded.
MAX_OUTPUT_CHARS = 20_000
MAX_READ_BYTES = 16 << 20  # an autograded notebook larger than this is not kept (the log says so)
MAX_PICTURE_CHARS = 400_000  # a PNG or JPEG's base64 (a plot is tens of kB); a larger one goes
MAX_KEPT_CHARS = 1_000_000
CUT = "\n[cut by the grader: this output was longer than it keeps]\n"
DROPPED = "[dropped by the grader: the notebook's outputs were longer than it keeps]"
# the MIME types kept for the TAs' browsers: text, and pictures as data. HTML, SVG, JavaScript,
# Markdown and widgets can run scripts or load remote resources: they go, with a note.
KEPT_MIME = ("text/plain", "image/png", "image/jpeg")
NOT_KEPT = "[removed by the grader: a {mime} output (only text and PNG or JPEG pictures of a few hundred kB are kept)]"


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def private_lines(source_cells: list[dict]) -> set[str]:
    """Every line (stripped, at least :data:`MIN_PRIVATE` characters) of the source cells'
    solution and hidden-test regions, and of their markdown answers (model answers)."""
    out: set[str] = set()
    for cell in source_cells:
        src = _text(cell.get("source", ""))
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.get("cell_type") == "markdown" and meta.get("solution"):
            rows = src.splitlines()  # the whole model answer
        else:
            rows = [line for m in (markers.SOLUTION, markers.HIDDEN)
                    for line, where in markers.lines(src, "<source notebook>", m) if where == "inside"]
        out.update(r.strip() for r in rows if len(r.strip()) >= MIN_PRIVATE
                   # "import numpy as np" and the markers are no secret
                   and not r.strip().startswith(("import ", "from ", "### BEGIN ", "### END ")))
    return out


def strings_in(value) -> list[str]:
    """Every string inside a JSON value (keys and values)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*strings_in(k), *strings_in(v))]
    if isinstance(value, list):
        return [s for v in value for s in strings_in(v)]
    return []


def leaked(value, private: set[str]) -> list[str]:
    """The private lines found in any string of ``value`` (results.json, a kept notebook).

    >>> leaked({"tests": [{"output": "got assert secret_answer == 42 here"}]}, {"assert secret_answer == 42"})
    ['assert secret_answer == 42']
    """
    texts = strings_in(value)
    return sorted(p for p in private if any(p in t for t in texts))


def _redact(text: str, private: set[str]) -> str:
    found = [p for p in private if p in text]  # one search of the whole text a line (C speed)
    if not found:
        return text
    rows = text.splitlines(keepends=True)
    return "".join(REDACTED + ("\n" if row.endswith("\n") else "") if any(p in row for p in found) else row
                   for row in rows)


class _Allowance:
    """The characters of output a kept notebook has left (:data:`MAX_KEPT_CHARS`)."""

    def __init__(self, chars: int) -> None:
        self.left = chars

    def take(self, text: str, cut: bool = True) -> str | None:
        """``text``, cut to :data:`MAX_OUTPUT_CHARS` (a picture's data is never cut: it is
        dropped before when too long), or None when the notebook's allowance is spent."""
        if self.left <= 0:
            return None
        kept = text if len(text) <= MAX_OUTPUT_CHARS or not cut else text[:MAX_OUTPUT_CHARS] + CUT
        self.left -= len(kept)
        return kept


def _clean_output(output: dict, private: set[str], allowance: _Allowance) -> dict:
    out = dict(output)
    for key in ("text", "evalue", "traceback", "data"):
        if key not in out:
            continue
        value = out[key]
        if key == "data":
            data = {mime: _text(v) if isinstance(v, (str, list)) else "" for mime, v in value.items()} \
                if isinstance(value, dict) else {}
            value = {mime: v for mime, v in data.items()
                     if mime == "text/plain" or (mime in KEPT_MIME and len(v) <= MAX_PICTURE_CHARS)}
            dropped = [mime for mime in data if mime not in value]
            if dropped and "text/plain" not in value:  # what the TA sees instead
                value["text/plain"] = "\n".join(NOT_KEPT.format(mime=mime[:100]) for mime in dropped[:10])
            texts = {mime: allowance.take(v, cut=mime == "text/plain") for mime, v in value.items()}
            if any(t is None for t in texts.values()):
                return {"output_type": "stream", "name": "stdout", "text": DROPPED}
            out[key] = {mime: _redact(t, private) if mime == "text/plain" else t for mime, t in texts.items() if t is not None}
        elif key == "traceback":
            rows = [allowance.take(str(t)) for t in value] if isinstance(value, list) else []
            if any(r is None for r in rows):
                return {"output_type": "stream", "name": "stdout", "text": DROPPED}
            out[key] = [_redact(r, private) for r in rows if r is not None]
        else:
            text = allowance.take(_text(value))
            if text is None:
                return {"output_type": "stream", "name": "stdout", "text": DROPPED}
            out[key] = _redact(text, private)
    return out


def _plain_markdown(source: str) -> str:
    """A Markdown cell's source with its raw HTML shown as text (no script, no tag that loads
    anything) and no image syntax (a remote picture would load when a TA opens the notebook)."""
    return source.replace("<", "&lt;").replace("![", "!\\[")


def student_view(nb: dict, private: set[str]) -> dict:
    """``nb`` (an autograded notebook) with hidden-test regions out of its test cells and every
    private line out of its outputs."""
    cells = []
    allowance = _Allowance(MAX_KEPT_CHARS)
    for cell in nb.get("cells", []):
        cell = dict(cell)
        meta = cell.get("metadata", {}).get("nbgrader", {}) if isinstance(cell.get("metadata"), dict) else {}
        if cell_kind(meta, cell.get("cell_type", "")) == "auto":
            try:
                cell["source"] = markers.strip_hidden(_text(cell.get("source", "")), "<test cell>")
            except ValueError:  # unbalanced markers: the source notebooks' tests forbid it; keep nothing
                cell["source"] = ""
        if cell.get("cell_type") == "markdown":
            cell["source"] = _plain_markdown(_text(cell.get("source", "")))
            cell.pop("attachments", None)
        if isinstance(cell.get("outputs"), list):
            cell["outputs"] = [_clean_output(o, private, allowance) if isinstance(o, dict) else o
                               for o in cell["outputs"]]
        cells.append(cell)
    return {**nb, "cells": cells}


def kept_copy(autograded: bytes, private: set[str]) -> bytes:
    """The bytes kept for the instructors, from nbgrader's autograded notebook."""
    return (json.dumps(student_view(json.loads(autograded.decode("utf-8")), private), indent=1,
                       ensure_ascii=False) + "\n").encode("utf-8")
