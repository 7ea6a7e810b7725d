"""The whole grading's worst case fits under Gradescope's default timeout, whatever the
calibration factor: the budget ``grade`` prints, and the budgets the tasks are given."""

from __future__ import annotations

import re
import time
from types import SimpleNamespace

import pytest

from autograder.grading import calibrate
from autograder.grading.grade import GRADESCOPE_TIMEOUT_S, ROOT, _grade_tasks, grade, manifest_of, submission_budget
from autograder.grading.judge import Outcome
from autograder.notebooks import nbgrader
from autograder.sandbox.remote import Limits

UNDER = GRADESCOPE_TIMEOUT_S - 60  # a minute for the container's start and the upload


@pytest.mark.parametrize("factor", [1.0, 3.18, calibrate.MAX_FACTOR])
def test_the_printed_worst_case_fits_gradescopes_timeout_at_any_factor(factor, tmp_path):
    """3.18: the factor of a busy machine that printed 5848 s before the caps."""
    lines: list[str] = []
    (tmp_path / "empty").mkdir()
    grade(tmp_path / "empty", time_factor=factor, report=lines.append, only_tasks=frozenset())
    printed = next(float(m.group(1)) for line in lines if (m := re.search(r"time budget: at most (\d+) s", line)))
    assert printed <= UNDER, lines
    count = len(nbgrader.notebooks_of(ROOT))
    assert submission_budget(manifest_of(ROOT), calibrate.scaled(Limits(), factor), factor, count) == printed


class Stalls:
    """A task's grading that spends every second of the budget it is given (a submission that
    sleeps under each test's limit), recording each budget."""

    def __init__(self) -> None:
        self.limits = Limits(wall_s=0.1)  # the reserve: one such limit
        self.budgets: list[float] = []

    def __call__(self, task, budget: float) -> dict[str, Outcome]:
        self.budgets.append(budget)
        time.sleep(budget)
        return {test: Outcome(False, "stalled") for test in task.tests}


def stalling_tasks(count: int) -> SimpleNamespace:
    return SimpleNamespace(tasks=[SimpleNamespace(id=f"t{i}", tests={"a": 1, "b": 1}) for i in range(count)])


def test_one_after_the_other_the_tasks_budgets_add_up_to_at_most_the_cap():
    """Each task may take its share and the reserve, but never past the cap from the start:
    the budgets handed out add up to at most the cap, however slowly each task ran."""
    stalls = Stalls()
    _grade_tasks(stalling_tasks(6), None, stalls, factor=0.05, jobs=1, cap_s=0.5)  # type: ignore[arg-type]
    assert len(stalls.budgets) == 6 and sum(stalls.budgets) <= 0.5


def test_control_without_the_cap_the_same_tasks_are_given_more():
    stalls = Stalls()
    _grade_tasks(stalling_tasks(6), None, stalls, factor=0.05, jobs=1, cap_s=float("inf"))  # type: ignore[arg-type]
    assert sum(stalls.budgets) > 0.5
