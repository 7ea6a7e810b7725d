"""Notebooks test the student, not the oracle: ex01's answers are numbers of one model, which
the shipped library prints. The grader's check runs the student's cells again on two
neighbouring models (autograder/notebooks/neighbours.py), so typed-in numbers fail, whatever the
seed; honest formulas pass (the reference's full marks: test_notebooks.py). The hostile
submission ``notebook_answers_read_off_the_library`` is graded by the self-check in every mode
(0 points); here is its control."""

from __future__ import annotations

import json

import pytest

from autograder.grading.grade import ROOT, grade
from autograder.notebooks import nbgrader, neighbours, recheck
from autograder.sandbox.remote import Limits
from autograder.selfcheck import HOSTILE

EX01 = ROOT / "assignments" / "notebooks" / "ex01_ledger_70b.ipynb"
LITERALS = HOSTILE / "notebook_answers_read_off_the_library"


def answers(cells: list[dict]) -> dict:
    """Every name ex01's solution cells bind, run here on ``cells``' constants."""
    namespace: dict = {"print": lambda *args, **kwargs: None}
    for cell in cells:
        meta = cell["metadata"].get("nbgrader", {})
        if cell["cell_type"] == "code" and not meta.get("grade"):
            exec(compile("".join(cell["source"]), "<cell>", "exec"), namespace)
    return {k: v for k, v in namespace.items() if not k.startswith("_") and isinstance(v, (bool, int, float))}


def test_every_typed_in_answer_is_wrong_on_one_of_the_neighbours_whatever_the_seed():
    cells = json.loads(EX01.read_text())["cells"]
    grade_id, constants = neighbours.constants_cell(cells)
    lecture = answers(cells)
    graded = {n for n in lecture if n not in constants and n != "budget"}
    assert {"param_count", "fits_on_one_h100", "kv_tokens_on_one_h100", "min_gpus_bf16"} <= graded
    for seed in range(500):
        runs = [answers(neighbours.with_constants(cells, grade_id, neighbours.varied(constants, seed + i, whole)))
                for i, whole in enumerate(neighbours.NEIGHBOURS)]
        same = [n for n in graded if all(recheck._same_number(run[n], lecture[n]) for run in runs)]
        assert same == [], (seed, same)


@pytest.fixture(scope="module")
def ex01_id() -> str:
    return next(nb.id for nb in nbgrader.notebooks_of(ROOT) if nb.file.endswith("ex01_ledger_70b.ipynb"))


def auto_points(data: dict, nb_id: str) -> int:
    return sum(t["score"] for t in data["tests"] if t["extra_data"]["task"] == nb_id and t["extra_data"]["kind"] == "auto")


def test_typed_in_answers_earn_nothing(ex01_id):
    assert auto_points(grade(LITERALS, limits=Limits(wall_s=30, cpu_s=30), only_tasks=frozenset({ex01_id})), ex01_id) == 0


def test_control_without_the_neighbours_typed_in_answers_earn_every_point(ex01_id, monkeypatch):
    monkeypatch.setattr(recheck, "check_neighbour", lambda *args, **kwargs: None)
    data = grade(LITERALS, limits=Limits(wall_s=30, cpu_s=30), only_tasks=frozenset({ex01_id}))
    full = sum(c.points for c in nbgrader.cell_points(EX01) if c.kind == "auto")
    assert auto_points(data, ex01_id) == full
