"""Looking at a submitted notebook before it is graded: whether it can be (missing, too
large, not a notebook), and the names its own cells use that a human should look at."""

from __future__ import annotations

import json
from pathlib import Path

from autograder.notebooks import instructors_log, safe_files
from autograder.notebooks.cells import MAX_NOTEBOOK, notebooks_of
from autograder.notebooks.recheck import cell_kind

NOT_READABLE = "the file is not a readable notebook (JSON, UTF-8)"


def why_unreadable(path: Path) -> str | None:
    """Why a submitted notebook cannot be graded, or None when it can."""
    try:
        if path.stat().st_size > MAX_NOTEBOOK:
            return f"the notebook is larger than {MAX_NOTEBOOK} bytes"
        nb = json.loads(safe_files.read_file(path, limit=MAX_NOTEBOOK).decode("utf-8"))
    except (OSError, ValueError) as exc:
        # never the parser's text: it may quote the file, which need not be the student's own
        instructors_log.note(f"notebook {path.name}", "not readable as JSON", f"{type(exc).__name__}: {exc}")
        return NOT_READABLE
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list) or nb.get("nbformat") != 4:
        return "the file is not a notebook in nbformat 4"
    return None


# Names a notebook's own cells have no honest use for in these exercises, but that could subvert
# the test cells sharing its kernel (README: threat model). Not a defence: a flag for the human
# who grades the written answers anyway.
SUSPICIOUS = ("builtins", "sys.modules", "set_custom_exc", "showtraceback", "settrace", "setprofile",
              "get_ipython", "__import__", "importlib", "AssertionError", "isclose =", "hw_model.", "gc.",
              "__class__", "inspect")


def suspicious(path: Path) -> list[str]:
    """The :data:`SUSPICIOUS` names in a submitted notebook's code cells other than its test
    cells (which nbgrader replaces anyway).

    >>> import tempfile
    >>> nb = {"cells": [{"cell_type": "code", "metadata": {}, "source": "import builtins; builtins.abs = len"}]}
    >>> p = Path(tempfile.mkdtemp()) / "n.ipynb"; _ = p.write_text(json.dumps(nb))
    >>> suspicious(p)
    ['builtins']
    """
    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
        code = "\n".join("".join(c.get("source", "")) for c in nb.get("cells", [])
                         if c.get("cell_type") == "code"
                         and cell_kind(c.get("metadata", {}).get("nbgrader", {}), "code") != "auto")
    except (OSError, ValueError, AttributeError, TypeError):
        return []
    return [name for name in SUSPICIOUS if name in code]


def problems_of(root: Path, files: dict[str, Path | None]) -> dict[str, str]:
    """notebook id -> why it cannot be graded (missing, too large, not a notebook)."""
    problems = {}
    for nb in notebooks_of(root):
        path = files.get(nb.file)
        why = f"missing file: the submission has no {nb.file}" if path is None else why_unreadable(path)
        if why:
            problems[nb.id] = why
    return problems
