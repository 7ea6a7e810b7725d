"""The notebooks' lines in results.json: one test per graded cell, merged after the tasks'.

An autograded test cell scores its points when nbgrader gave them (the cell ran without an
error after nbgrader restored it from the source) and the grader's own check passed; a manually
graded cell is listed with score 0 and the message that it awaits the instructor's grade.
"""

from __future__ import annotations

from pathlib import Path

from autograder.grading import results
from autograder.notebooks.cells import cell_points, notebooks_of

PENDING = "manually graded: {points} point(s) pending, the instructor grades this cell by hand"


def not_graded(root: Path, why: str) -> dict[str, dict[str, tuple[float, str]]]:
    """Every notebook cell at 0 with the message ``why`` (a run that grades only some tasks)."""
    return {nb.id: {c.grade_id: (0, why) for c in cell_points(Path(root) / "assignments" / nb.file)}
            for nb in notebooks_of(root)}


def merge(data: dict, root: Path, scores: dict[str, dict[str, tuple[float, str]]]) -> dict:
    """Adds the notebooks' cells to results.json ``data`` (built for the manifest's tasks): one
    test per graded cell, named ``<notebook id>: <grade_id>``, its points from the source
    notebook; score, max_score and the summary output grow accordingly. A test cell holding
    hidden tests is shown ``after_due_date`` (its error message may quote them)."""
    lines = []
    base = len({t["extra_data"]["task"] for t in data["tests"]})
    for n_index, nb in enumerate(notebooks_of(root), base + 1):
        got: float = 0
        total = pending = 0
        for c_index, cell in enumerate(cell_points(Path(root) / "assignments" / nb.file), 1):
            score, message = scores[nb.id][cell.grade_id]
            score = int(score) if float(score).is_integer() else float(score)
            passed = cell.kind == "auto" and score >= cell.points
            waiting = cell.kind == "manual" and message == PENDING.format(points=cell.points)  # not failed
            data["tests"].append({
                "name": f"{nb.id}: {cell.grade_id}" + (" (manually graded)" if cell.kind == "manual" else ""),
                "number": f"{n_index}.{c_index}", "score": score, "max_score": cell.points,
                **results.status_fields(passed, pending=waiting), "output": message,
                # as for Python tests in hidden regions: a cell with hidden tests is shown after the due date
                "visibility": "after_due_date" if cell.hidden and nb.visibility == "visible" else nb.visibility,
                "extra_data": {"task": nb.id, "notebook": nb.file, "cell": cell.grade_id, "kind": cell.kind}})
            got += score
            total += cell.points
            pending += cell.points if cell.kind == "manual" else 0
        data["score"] += got
        data["max_score"] += total
        note = f"  [{pending} point(s) manually graded, pending]" if pending else ""
        lines.append(results.summary_line(f"{nb.id} ({nb.title}, {nb.lecture})",
                                          [t for t in data["tests"] if t["extra_data"]["task"] == nb.id], note))
    if lines:
        data["output"] = "\n".join([data["output"], *lines])
    return data
