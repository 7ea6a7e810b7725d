"""Which notebooks are graded, and their graded cells.

Where points live: in the source notebooks' nbgrader cell metadata, nowhere else. The
manifest's ``[[notebook]]`` entries say which notebooks are graded (id, title, lecture, file,
visibility) but hold no points; :func:`cell_points` reads them from the notebook, so the points
nbgrader awards and the points the grader reports cannot drift apart.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from servelab.harness.manifest import tomllib  # tomli on Python 3.10

from autograder import markers
from autograder.notebooks.recheck import cell_kind

ASSIGNMENT = "notebooks"  # the nbgrader assignment: the folder assignments/notebooks/
STUDENT = "student"
MAX_NOTEBOOK = 1 << 20  # bytes, as for any submitted file


@dataclass(frozen=True)
class Notebook:
    """One ``[[notebook]]`` entry of the manifest."""

    id: str
    title: str
    lecture: str
    file: str  # relative to assignments/, e.g. "notebooks/ex01_ledger_70b.ipynb"
    visibility: str = "visible"

    @property
    def name(self) -> str:
        """nbgrader's notebook name (the file name without ``.ipynb``)."""
        return Path(self.file).stem


@dataclass(frozen=True)
class Cell:
    grade_id: str
    points: int
    kind: str  # "auto" (a test cell nbgrader scores) or "manual" (graded by hand)
    hidden: bool = False  # holds a ### BEGIN HIDDEN TESTS region (its message may tell of them)


def notebooks_of(root: Path) -> tuple[Notebook, ...]:
    """The manifest's notebooks (none when it lists none)."""
    data = tomllib.loads((Path(root) / "assignments" / "manifest.toml").read_text(encoding="utf-8"))
    out = []
    for i, raw in enumerate(data.get("notebook", [])):
        for key in ("id", "title", "lecture", "file"):
            if key not in raw:
                raise ValueError(f"manifest: notebook[{i}] lacks the key {key!r}")
        nb = Notebook(raw["id"], raw["title"], raw["lecture"], raw["file"], raw.get("visibility", "visible"))
        if not nb.file.startswith(f"{ASSIGNMENT}/") or not nb.file.endswith(".ipynb") or nb.file.count("/") != 1:
            raise ValueError(f"manifest: notebook[{i}] file must be {ASSIGNMENT}/<name>.ipynb, got {nb.file!r}")
        out.append(nb)
    return tuple(out)


def cell_points(path: Path) -> list[Cell]:
    """The graded cells of a source notebook, in order, with their points (nbgrader metadata)."""
    nb = json.loads(Path(path).read_text(encoding="utf-8"))
    cells = []
    for c in nb["cells"]:
        meta = c.get("metadata", {}).get("nbgrader", {})
        kind = cell_kind(meta, c["cell_type"])
        if kind is not None:
            points = meta.get("points")
            if not isinstance(points, (int, float)) or points <= 0 or int(points) != points:
                raise ValueError(f"{path}: cell {meta.get('grade_id')!r} must have positive whole points, got {points!r}")
            hidden = markers.count_regions("".join(c["source"]), markers.HIDDEN) > 0
            cells.append(Cell(meta["grade_id"], int(points), kind, hidden))
    return cells


def runs_code(path: Path) -> bool:
    """Whether a source notebook holds a code cell. One that holds none (the Orca paper card of
    lecture §7: written answers, graded by hand) gives a kernel nothing to run; nbgrader
    autogrades it without one (its locked cells restored, its answers kept for the TAs), and a
    code cell a student added to it runs nowhere.

    >>> import tempfile
    >>> nb = Path(tempfile.mkdtemp()) / "card.ipynb"
    >>> _ = nb.write_text(json.dumps({"cells": [{"cell_type": "markdown", "source": "x", "metadata": {}}]}))
    >>> runs_code(nb)
    False
    """
    nb = json.loads(Path(path).read_text(encoding="utf-8"))
    return any(c.get("cell_type") == "code" for c in nb["cells"])
