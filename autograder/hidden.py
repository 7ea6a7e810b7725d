"""Hidden tests inside visible test files: ``### BEGIN HIDDEN TESTS`` .. ``### END HIDDEN TESTS``
(nbgrader's markers). A release removes the region; the grader runs it and shows its tests'
results only after the due date.

>>> text = '''def test_a(): pass
... ### BEGIN HIDDEN TESTS
... def test_b(): pass
... class TestC:
...     def test_d(self): pass
... ### END HIDDEN TESTS
... '''
>>> print(strip_hidden(text, "t.py"), end="")
def test_a(): pass
>>> hidden_test_names(text)
['test_b', 'TestC']
"""

from __future__ import annotations

import re

BEGIN, END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
_DEF = re.compile(r"^(?:(?:async\s+)?def\s+(test\w*)\s*\(|class\s+(Test\w*)\b)")


def _regions(text: str, filename: str):
    """(line, inside) pairs; ValueError on unbalanced markers."""
    inside_since: int | None = None
    for lineno, line in enumerate(text.splitlines(keepends=True), 1):
        marker = line.strip()
        if marker == BEGIN:
            if inside_since is not None:
                raise ValueError(f"{filename}:{lineno}: {BEGIN} inside the region opened at line {inside_since}")
            inside_since = lineno
            continue
        if marker == END:
            if inside_since is None:
                raise ValueError(f"{filename}:{lineno}: {END} without a {BEGIN}")
            inside_since = None
            continue
        yield line, inside_since is not None
    if inside_since is not None:
        raise ValueError(f"{filename}:{inside_since}: {BEGIN} is never closed")


def strip_hidden(text: str, filename: str) -> str:
    """``text`` without its hidden regions (markers included)."""
    return "".join(line for line, inside in _regions(text, filename) if not inside)


def hidden_test_names(text: str, filename: str = "<test file>") -> list[str]:
    """Names of the top-level test functions and test classes defined inside hidden regions."""
    return [m.group(1) or m.group(2) for line, inside in _regions(text, filename) if inside and (m := _DEF.match(line))]
