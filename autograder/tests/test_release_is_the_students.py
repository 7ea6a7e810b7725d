"""The release speaks to students about what they have: no docstring, README, Makefile
or message in it names what a release leaves out (the mutants, the
answer key, the solution markers, the instructors' make targets), and its README is the
students' own, with every task and its points.

``autograder/`` itself is not searched: the release carries the grader for its classroom
workflow, and the grader's code and guide necessarily name its private parts."""

from __future__ import annotations

import re

import pytest

from autograder.grading.grade import ROOT, hidden_tests, manifest_of
from autograder.release.repository import INSTRUCTOR_TARGETS, plan

# what a release leaves out, as a student would meet it in the text. ("answers" alone is plain
# English, "your answers": the answer key is searched for as its folder, module and name.)
LEFT_OUT = re.compile(r"mutants|answers/|autograder\.answers|answer key|"
                      r"SOLUTION markers|make release|make grade|selfcheck|release-check|test-autograder|"
                      r"tests/hostile", re.I)


@pytest.fixture(scope="module")
def release_texts() -> dict[str, str]:
    texts = {}
    for rel, text in plan(ROOT).items():
        if text is None:
            try:
                text = (ROOT / rel).read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue  # a binary file says nothing
        texts[rel] = text
    return texts


def test_the_release_names_nothing_it_leaves_out(release_texts):
    hits = [f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}"
            for rel, text in release_texts.items() if not rel.startswith("autograder/")
            for m in LEFT_OUT.finditer(text)]
    assert hits == [], "the release names what it does not hold:\n" + "\n".join(hits)


def test_the_release_makefile_has_check_and_no_instructor_target(release_texts):
    makefile = release_texts["Makefile"]
    defined = set(re.findall(r"^([A-Za-z][\w.-]*)\s*:(?!=)", makefile, re.M))
    assert "check" in defined and "test" in defined and "build" in defined
    assert not defined & set(INSTRUCTOR_TARGETS), defined & set(INSTRUCTOR_TARGETS)
    phony = re.search(r"^\.PHONY:(.*)$", makefile, re.M).group(1).split()
    assert "check" in phony and not set(phony) & set(INSTRUCTOR_TARGETS)
    assert "-m task_$(TASK)" in makefile and "HYPOTHESIS_PROFILE=student" in makefile


def test_the_release_readme_is_the_students(release_texts):
    readme = release_texts["README.md"]
    assert readme != (ROOT / "README.md").read_text(encoding="utf-8")
    assert "{{" not in readme, "a placeholder was left unfilled"
    for heading in ("## Set-up", "## Run your tests: `make check`", "## Your tasks", "## Notebooks",
                    "## Submitting", "## What the grader adds"):
        assert heading in readme, heading
    assert "make check TASK=a1_ledger" in readme and ".venv/bin/pytest assignments/" in readme
    manifest = manifest_of(ROOT)
    hidden = hidden_tests(ROOT, manifest)
    visible = {t.id: sum(p for test, p in t.tests.items() if test not in hidden) for t in manifest.tasks
               if t.visibility == "visible"}
    for task_id, points in visible.items():  # every task, with the points of the tests the student has
        row = next(line for line in readme.splitlines() if line.startswith(f"| {task_id}: "))
        assert f"| {points} |" in row, row
    assert f"| total | | | {sum(visible.values())} |" in readme
    assert ("Hidden tests" in readme) == bool(hidden)
    assert "Hidden checks in the notebooks" in readme  # ex01, ex06 and ex10 hold some
    for nb_file in ("ex01_ledger_70b", "ex06_tail_fanout", "ex08_orca_card", "ex10_batch_invariance"):
        assert f"assignments/notebooks/{nb_file}.ipynb" in readme
    assert "autograder/release/README.student.md" not in release_texts


def test_an_untouched_notebook_answer_is_reported_as_not_answered(release_texts, tmp_path):
    # the release's own ex10: its answer cells still raise, so nbgrader's test cells fail with
    # NameError; the message must say which cell was not answered, not just "name 'a' ..."
    from autograder.notebooks.nbgrader import not_answered
    nb = tmp_path / "ex10_batch_invariance.ipynb"
    nb.write_text(release_texts["assignments/notebooks/ex10_batch_invariance.ipynb"], encoding="utf-8")
    got = not_answered(nb, "ex10_a_test", "NameError: name 'a' is not defined")
    assert got.startswith("not answered: cell ex10_a_answer above still raises NotImplementedError"), got
    assert got.endswith("NameError: name 'a' is not defined")
    got = not_answered(nb, "ex10_b_test", "NotImplementedError: ")
    assert got.startswith("not answered: cell ex10_b_answer above"), got  # not a's: b's own answer cell
    assert not_answered(nb, "ex10_a_test", "AssertionError: pick other numbers") == "AssertionError: pick other numbers"
