"""The nbgrader notebooks (``assignments/notebooks/``): student versions, autograding, and their
lines in results.json.

Where points live: in the source notebooks' nbgrader cell metadata, nowhere else. The
manifest's ``[[notebook]]`` entries say which notebooks are graded (id, title, lecture, file,
visibility) but hold no points; :func:`~autograder.notebooks.cells.cell_points` reads them from the notebook, so the points
nbgrader awards and the points the grader reports cannot drift apart.

Every nbgrader run happens in its own process (:mod:`autograder.notebooks.runner`) on a temporary
course folder (``source/notebooks/`` from the pristine copy, ``submitted/student/notebooks/``
from the grader's copy of the submission), with a HOME of its own, a wall-clock timeout on the
whole run and a per-cell timeout; the notebook's code runs in a sandboxed kernel
(:mod:`autograder.sandbox.kernel`: the child's resource limits and audit hook) started as the
sandbox's uid, in fresh folders of its own outside that course folder (:func:`autograder.notebooks.kernel_spec.kernel_folders`):
nbgrader and the grader, as root, never read or write where a kernel can (README: threat
model). Nothing is written into the course copy, and results.json holds only the grader's own
messages (:data:`~autograder.notebooks.launch.FAILED`; nbgrader's log goes to :mod:`autograder.notebooks.instructors_log`).

A cell's lines in results.json: an autograded test cell scores its points when nbgrader gave
them (the cell ran without an error after nbgrader restored it from the source); a manually
graded cell is listed with score 0 and the message that it awaits the instructor's grade.

This module is the notebooks' one door for the rest of the grader; each job is a module of its
own: :mod:`~autograder.notebooks.cells` (which notebooks, their cells and points),
:mod:`~autograder.notebooks.launch` (one nbgrader run), :mod:`~autograder.notebooks.generation`
(the student versions), :mod:`~autograder.notebooks.submitted` (a submitted notebook before it
is graded), :mod:`~autograder.notebooks.autograding` (autograde) and
:mod:`~autograder.notebooks.scores` (the lines in results.json).
"""

from __future__ import annotations

from autograder.notebooks.autograding import KERNEL_FAILED, KERNEL_NAME, autograde, not_answered, notebooks_budget_s
from autograder.notebooks.cells import ASSIGNMENT, MAX_NOTEBOOK, STUDENT, Cell, Notebook, cell_points, notebooks_of
from autograder.notebooks.generation import adopt, generate, generated, private_lines_of, student_versions
from autograder.notebooks.kernel_spec import KERNEL_CPU_FACTOR, kernel_forbidden
from autograder.notebooks.launch import FAILED, NOT_GRADED, RUNNER, TIMED_OUT, failure_message, run_nbgrader
from autograder.notebooks.recheck import cell_kind
from autograder.notebooks.scores import PENDING, merge, not_graded
from autograder.notebooks.submitted import NOT_READABLE, SUSPICIOUS, problems_of, suspicious, why_unreadable

__all__ = ["ASSIGNMENT", "FAILED", "KERNEL_CPU_FACTOR", "KERNEL_FAILED", "KERNEL_NAME", "MAX_NOTEBOOK",
           "NOT_GRADED", "NOT_READABLE", "PENDING", "RUNNER", "STUDENT", "SUSPICIOUS", "TIMED_OUT", "Cell",
           "Notebook", "adopt", "autograde", "cell_kind", "cell_points", "failure_message", "generate",
           "generated", "kernel_forbidden", "merge", "not_answered", "not_graded", "notebooks_of",
           "private_lines_of", "problems_of", "run_nbgrader", "student_versions", "suspicious", "why_unreadable"]
