"""Solution regions (nbgrader's markers) in the files students edit.

A region runs from a line ``### BEGIN SOLUTION`` to a line ``### END SOLUTION``; a release
replaces it with a ``raise NotImplementedError`` at the same indentation, so that a stub
imports cleanly and every test of it fails with a message that says what to do. Regions
therefore belong inside function bodies: one at module or class level would raise at import.

>>> print(strip_solutions('''def f():
...     ### BEGIN SOLUTION
...     return 1
...     ### END SOLUTION
... ''', "f.py"), end="")
def f():
    raise NotImplementedError("f.py: fill in the solution here")
"""

from __future__ import annotations

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"


def strip_solutions(text: str, filename: str) -> str:
    """``text`` with every solution region replaced by a stub; ValueError on unbalanced markers."""
    out: list[str] = []
    inside_since: int | None = None
    for lineno, line in enumerate(text.splitlines(keepends=True), 1):
        marker = line.strip()
        if marker == BEGIN:
            if inside_since is not None:
                raise ValueError(f"{filename}:{lineno}: {BEGIN} inside the region opened at line {inside_since}")
            inside_since = lineno
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f'{indent}raise NotImplementedError("{filename}: fill in the solution here")\n')
        elif marker == END:
            if inside_since is None:
                raise ValueError(f"{filename}:{lineno}: {END} without a {BEGIN}")
            inside_since = None
        elif inside_since is None:
            out.append(line)
    if inside_since is not None:
        raise ValueError(f"{filename}:{inside_since}: {BEGIN} is never closed")
    return "".join(out)


def count_regions(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.strip() == BEGIN)
