"""The GitHub Classroom workflow of a release, generated from the released manifest.

GitHub Classroom counts points through its autograding actions: each
``classroom-resources/autograding-command-grader`` step passes or fails on its command's exit code
and is worth its ``max-score``; ``classroom-resources/autograding-grading-reporter`` then sends
the steps named in ``runners`` (each step's ``result`` output in ``<ID>_RESULTS``). Here the
grader runs once, and one such step per task reads that task's verdict from ``results.json``
(``task_passed.py``), worth the task's points: the manifest's, after the release dropped hidden
tests; for a notebook, the points of its autograded cells (manually graded ones are not
Classroom's). So the points live in the manifest and the notebooks only, as everywhere else.

>>> from servelab.harness.manifest import Manifest
>>> task = '[[task]]\\nid = "{0}"\\ntitle = "{0}"\\nlecture = "§3"\\nedit = ["{0}/x.py"]\\ntests = {{ "{0}/test_x.py::t" = {1} }}\\n'
>>> m = Manifest.from_toml(task.format("a1_ledger", 5) + task.format("a2_roofline", 3))
>>> [(s.id, s.points) for s in grading_steps(m, {})]
[('a1_ledger', 5), ('a2_roofline', 3)]
>>> text = classroom_workflow(m, {})
>>> text.count("autograding-command-grader@v1"), "max-score: 5" in text, "runners: a1_ledger,a2_roofline" in text
(2, True, True)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from servelab.harness.manifest import Manifest

TEMPLATE = Path(__file__).with_name("classroom.yml")
MARKER = "      # @GRADING_STEPS@\n"
COMMAND_GRADER = "classroom-resources/autograding-command-grader@v1"
REPORTER = "classroom-resources/autograding-grading-reporter@v1"
TIMEOUT_MINUTES = 1  # a step only reads results.json; the grading itself is the step before
STEP_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # a step id that is also an environment variable name


@dataclass(frozen=True)
class Step:
    id: str  # the task's id: a step id and, upper-cased, the reporter's <ID>_RESULTS variable
    title: str
    points: int


def grading_steps(manifest: Manifest, notebook_points: dict[str, tuple[str, int]]) -> list[Step]:
    """One step per task with points, in the manifest's order, then one per notebook with
    autograded points (``notebook_points``: id -> (title, autograded points))."""
    steps = [Step(t.id, t.title, t.points) for t in manifest.tasks if t.points > 0]
    steps += [Step(nb_id, title, points) for nb_id, (title, points) in notebook_points.items() if points > 0]
    for step in steps:
        if not STEP_ID.fullmatch(step.id):
            raise ValueError(f"task id {step.id!r} cannot name a workflow step (letters, digits, _ only)")
    return steps


def _q(text: str) -> str:
    """A YAML double-quoted scalar (JSON's string syntax is a subset of it)."""
    return json.dumps(text, ensure_ascii=False)


def _step_yaml(step: Step) -> str:
    return (f"      - name: {_q(f'{step.id}: {step.title} ({step.points} points)')}\n"
            f"        id: {step.id}\n"
            "        if: ${{ !cancelled() }}\n"
            f"        uses: {COMMAND_GRADER}\n"
            "        with:\n"
            f"          test-name: {_q(step.id)}\n"
            f"          command: python3 course/autograder/ci/task_passed.py results.json {step.id}\n"
            f"          timeout: {TIMEOUT_MINUTES}\n"
            f"          max-score: {step.points}\n")


def _reporter_yaml(steps: list[Step]) -> str:
    env = "".join(f"          {s.id.upper()}_RESULTS: \"${{{{ steps.{s.id}.outputs.result }}}}\"\n" for s in steps)
    return ("      - name: report the points to GitHub Classroom\n"
            "        if: ${{ !cancelled() }}\n"
            f"        uses: {REPORTER}\n"
            "        env:\n" + env +
            "        with:\n"
            f"          runners: {','.join(s.id for s in steps)}\n")


def classroom_workflow(manifest: Manifest, notebook_points: dict[str, tuple[str, int]]) -> str:
    """The workflow text: the template with the grading steps and the reporter in place."""
    template = TEMPLATE.read_text(encoding="utf-8")
    if template.count(MARKER) != 1:
        raise ValueError(f"{TEMPLATE} must hold the line {MARKER.strip()!r} exactly once")
    steps = grading_steps(manifest, notebook_points)
    if not steps:
        raise ValueError("the released manifest has no task with points: Classroom would have nothing to grade")
    return template.replace(MARKER, "".join(map(_step_yaml, steps)) + _reporter_yaml(steps))
