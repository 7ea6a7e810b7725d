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
    rows = text.splitlines(keepends=True)
    return "".join(REDACTED + ("\n" if row.endswith("\n") else "") if any(p in row for p in private) else row
                   for row in rows)


def _clean_output(output: dict, private: set[str]) -> dict:
    out = dict(output)
    if "text" in out:
        out["text"] = _redact(_text(out["text"]), private)
    if "traceback" in out and isinstance(out["traceback"], list):
        out["traceback"] = [_redact(str(t), private) for t in out["traceback"]]
    if "evalue" in out:
        out["evalue"] = _redact(str(out["evalue"]), private)
    if isinstance(out.get("data"), dict):
        out["data"] = {k: (_redact(_text(v), private) if isinstance(v, (str, list)) else v)
                       for k, v in out["data"].items()}
    return out


def student_view(nb: dict, private: set[str]) -> dict:
    """``nb`` (an autograded notebook) with hidden-test regions out of its test cells and every
    private line out of its outputs."""
    cells = []
    for cell in nb.get("cells", []):
        cell = dict(cell)
        meta = cell.get("metadata", {}).get("nbgrader", {}) if isinstance(cell.get("metadata"), dict) else {}
        if cell_kind(meta, cell.get("cell_type", "")) == "auto":
            try:
                cell["source"] = markers.strip_hidden(_text(cell.get("source", "")), "<test cell>")
            except ValueError:  # unbalanced markers: the source notebooks' tests forbid it; keep nothing
                cell["source"] = ""
        if isinstance(cell.get("outputs"), list):
            cell["outputs"] = [_clean_output(o, private) if isinstance(o, dict) else o for o in cell["outputs"]]
        cells.append(cell)
    return {**nb, "cells": cells}


def kept_copy(autograded: bytes, private: set[str]) -> bytes:
    """The bytes kept for the instructors, from nbgrader's autograded notebook."""
    return (json.dumps(student_view(json.loads(autograded.decode("utf-8")), private), indent=1,
                       ensure_ascii=False) + "\n").encode("utf-8")
