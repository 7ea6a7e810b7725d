"""The ``notebook-tampering`` check: released notebooks whose test cells were edited (or
deleted) still score zero, and run the source's test cells (nbgrader restores them)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from autograder.grading.grade import ROOT, grade
from autograder.notebooks import kept as nb_kept
from autograder.notebooks import nbgrader


def tamper(text: str, delete: frozenset[str] = frozenset()) -> str:
    """A notebook whose autograded test cells were edited to pass (``pass``, hidden tests gone)
    and whose cells in ``delete`` were removed: what a student who cannot answer might try."""
    nb = json.loads(text)
    cells = []
    for cell in nb["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade_id") in delete:
            continue
        if nbgrader.cell_kind(meta, cell["cell_type"]) == "auto":
            cell["source"] = "assert True  # edited by the student\n"
        cells.append(cell)
    nb["cells"] = cells
    return json.dumps(nb)


def check_notebook_tampering(release_dir: Path, tmp: Path, report: Callable[[str], None] | None = None) -> list[str]:
    """The released notebooks with every test cell edited to pass (and one deleted) score 0:
    nbgrader restores test cells from the checksummed source before it runs them."""
    problems = []
    sub = tmp / "tampered"
    deleted: set[str] = set()
    for i, nb in enumerate(nbgrader.notebooks_of(ROOT)):
        text = (release_dir / "assignments" / nb.file).read_text(encoding="utf-8")
        auto = [c.grade_id for c in nbgrader.cell_points(ROOT / "assignments" / nb.file) if c.kind == "auto"]
        dst = sub / "assignments" / nb.file
        dst.parent.mkdir(parents=True, exist_ok=True)
        gone = frozenset(auto[:1]) if i == 0 else frozenset()  # a deleted test cell earns nothing either
        deleted |= gone
        dst.write_text(tamper(text, gone), encoding="utf-8")
    data = grade(sub, notebooks_out=tmp / "executed", report=report)
    for t in data["tests"]:
        if "notebook" in t["extra_data"] and t["score"] != 0:
            problems.append(f"tampered notebook earned {t['score']} on {t['name']}: {t['output'][:200]}")
    if not any("notebook" in t["extra_data"] for t in data["tests"]):
        problems.append("no notebook was graded")
    # the executed notebooks hold the source's test cells, not the edits (as kept for the TAs:
    # hidden-test regions out, notebooks/kept.py)
    for nb in nbgrader.notebooks_of(ROOT):
        source_nb = nb_kept.student_view(json.loads((ROOT / "assignments" / nb.file).read_text(encoding="utf-8")), set())
        source = {c["metadata"]["nbgrader"]["grade_id"]: c["source"] for c in source_nb["cells"]
                  if nbgrader.cell_kind(c["metadata"].get("nbgrader", {}), c["cell_type"]) == "auto"}
        executed = tmp / "executed" / Path(nb.file).name
        if not executed.is_file():
            problems.append(f"{nb.id}: nbgrader left no executed notebook")
            continue
        ran = {c["metadata"]["nbgrader"]["grade_id"]: c["source"] for c in
               json.loads(executed.read_text(encoding="utf-8"))["cells"]
               if c["metadata"].get("nbgrader", {}).get("grade_id") in source}
        for grade_id, src in source.items():
            if grade_id not in deleted and "".join(ran.get(grade_id, "")) != "".join(src):
                problems.append(f"{nb.id}: test cell {grade_id} ran as {''.join(ran.get(grade_id, ''))[:80]!r}, "
                                "not as the source")
    return problems
