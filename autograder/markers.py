"""nbgrader's marker regions, parsed in one place for the release, the grader and the notebooks.

* ``### BEGIN SOLUTION`` .. ``### END SOLUTION`` in the files students edit: a release replaces
  each region by a ``raise NotImplementedError`` at the same indentation, so that a stub imports
  cleanly and each test of it fails saying what to do. Regions therefore belong inside function
  bodies (one at module or class level would raise at import).
* ``### BEGIN HIDDEN TESTS`` .. ``### END HIDDEN TESTS`` in visible test files: a release
  removes the region; the grader runs its tests and shows their results only after the due date.

A region opens and closes on a line holding only its marker; an unbalanced marker is a
ValueError naming the file and the line.

>>> print(strip_solutions('''def f():
...     ### BEGIN SOLUTION
...     return 1
...     ### END SOLUTION
... ''', "f.py"), end="")
def f():
    raise NotImplementedError("f.py: fill in the solution here")
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
>>> count_regions(text, HIDDEN), count_regions(text, SOLUTION)
(1, 0)
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import NamedTuple


class Markers(NamedTuple):
    begin: str
    end: str


SOLUTION = Markers("### BEGIN SOLUTION", "### END SOLUTION")
HIDDEN = Markers("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")
_TEST_DEF = re.compile(r"^(?:(?:async\s+)?def\s+(test\w*)\s*\(|class\s+(Test\w*)\b)")


def lines(text: str, filename: str, markers: Markers) -> Iterator[tuple[str, str]]:
    """Each line of ``text`` with where it stands: ``"begin"`` or ``"end"`` (a marker line),
    ``"inside"`` or ``"outside"`` a region. ValueError on unbalanced markers."""
    inside_since: int | None = None
    for lineno, line in enumerate(text.splitlines(keepends=True), 1):
        marker = line.strip()
        if marker == markers.begin:
            if inside_since is not None:
                raise ValueError(f"{filename}:{lineno}: {markers.begin} inside the region opened at line {inside_since}")
            inside_since = lineno
            yield line, "begin"
        elif marker == markers.end:
            if inside_since is None:
                raise ValueError(f"{filename}:{lineno}: {markers.end} without a {markers.begin}")
            inside_since = None
            yield line, "end"
        else:
            yield line, "inside" if inside_since is not None else "outside"
    if inside_since is not None:
        raise ValueError(f"{filename}:{inside_since}: {markers.begin} is never closed")


def count_regions(text: str, markers: Markers = SOLUTION) -> int:
    """How many regions ``text`` opens (markers not checked for balance)."""
    return sum(1 for line in text.splitlines() if line.strip() == markers.begin)


def strip_solutions(text: str, filename: str) -> str:
    """``text`` with every solution region replaced by a stub that raises."""
    out = []
    for line, where in lines(text, filename, SOLUTION):
        if where == "begin":
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f'{indent}raise NotImplementedError("{filename}: fill in the solution here")\n')
        elif where == "outside":
            out.append(line)
    return "".join(out)


def strip_hidden(text: str, filename: str) -> str:
    """``text`` without its hidden regions (markers included)."""
    return "".join(line for line, where in lines(text, filename, HIDDEN) if where == "outside")


def hidden_test_names(text: str, filename: str = "<test file>") -> list[str]:
    """Names of the top-level test functions and test classes defined inside hidden regions."""
    return [m.group(1) or m.group(2) for line, where in lines(text, filename, HIDDEN)
            if where == "inside" and (m := _TEST_DEF.match(line))]
