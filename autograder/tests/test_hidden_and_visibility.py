"""Hidden tests on a small made-up course: the release drops hidden regions, hidden tasks' test
files and their manifest entries; the grader runs them and shows them after the due date."""

from __future__ import annotations

from pathlib import Path

import pytest

from autograder.grading.grade import grade
from autograder.release.repository import plan
from autograder.sandbox.remote import Limits

MANIFEST = '''
[[task]]
id = "t1"
title = "Double"
lecture = "§0"
edit = ["t1/double.py"]
visibility = "visible"
[task.tests]
"t1/test_t1.py::test_visible" = 1
"t1/test_t1.py::test_hidden" = 2
"t1/test_t1.py::TestMore::test_in_a_class" = 3

[[task]]
id = "t2"
title = "Triple"
lecture = "§0"
edit = ["t2/triple.py"]
visibility = "after_due_date"
[task.tests]
"t2/test_t2.py::test_triple" = 4
'''

T1_TESTS = '''import pytest
import double


@pytest.mark.parametrize("x", [0, 1, 5])
def test_visible(x):
    assert double.double(x) == 2 * x


class TestMore:
    def test_in_a_class(self, tmp_path):
        (tmp_path / "x").write_text("4")
        assert double.double(int((tmp_path / "x").read_text())) == 8


### BEGIN HIDDEN TESTS
def test_hidden():
    assert double.double(-3) == -6
### END HIDDEN TESTS
'''


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def course(tmp_path) -> Path:
    root = tmp_path / "course"
    write(root / "assignments" / "manifest.toml", MANIFEST)
    write(root / "assignments" / "t1" / "double.py",
          "def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION\n")
    write(root / "assignments" / "t1" / "test_t1.py", T1_TESTS)
    write(root / "assignments" / "t2" / "triple.py",
          "def triple(x):\n    ### BEGIN SOLUTION\n    return 3 * x\n    ### END SOLUTION\n")
    write(root / "assignments" / "t2" / "test_t2.py", "import triple\n\n\ndef test_triple():\n    assert triple.triple(2) == 6\n")
    write(root / "Makefile", "ASSIGNMENTS_MAY_FAIL ?=\n")
    return root


def test_release_drops_hidden_tests_everywhere(course):
    files = plan(course)
    assert "test_hidden" not in files["assignments/t1/test_t1.py"] and "HIDDEN" not in files["assignments/t1/test_t1.py"]
    assert "test_visible" in files["assignments/t1/test_t1.py"]
    assert "assignments/t2/test_t2.py" not in files
    manifest = files["assignments/manifest.toml"]
    assert "test_hidden" not in manifest and "test_triple" not in manifest and "test_visible" in manifest
    assert "raise NotImplementedError" in files["assignments/t2/triple.py"]


def test_grader_runs_hidden_tests_and_shows_them_after_the_due_date(course):
    data = grade(course / "assignments", root=course, limits=Limits(wall_s=20, cpu_s=20))
    got = {t["extra_data"]["test"]: (t["score"], t["visibility"]) for t in data["tests"]}
    assert got == {"t1/test_t1.py::test_visible": (1, "visible"),
                   "t1/test_t1.py::test_hidden": (2, "after_due_date"),
                   "t1/test_t1.py::TestMore::test_in_a_class": (3, "visible"),
                   "t2/test_t2.py::test_triple": (4, "after_due_date")}


def test_a_wrong_case_of_a_parametrised_test_loses_its_points(course, tmp_path):
    write(tmp_path / "sub" / "t1" / "double.py", "def double(x):\n    return 2 * x if x else 1\n")
    data = grade(tmp_path / "sub", root=course, limits=Limits(wall_s=20, cpu_s=20))
    got = {t["extra_data"]["test"]: t["score"] for t in data["tests"]}
    assert got == {"t1/test_t1.py::test_visible": 0, "t1/test_t1.py::test_hidden": 2,
                   "t1/test_t1.py::TestMore::test_in_a_class": 3, "t2/test_t2.py::test_triple": 0}


def test_a_bare_assert_explains_itself(course, tmp_path):
    write(tmp_path / "sub" / "t1" / "double.py", "def double(x):\n    return x + 1\n")
    data = grade(tmp_path / "sub", root=course, limits=Limits(wall_s=20, cpu_s=20))
    hidden = next(t for t in data["tests"] if t["extra_data"]["test"].endswith("test_hidden"))
    assert "-2 == -6" in hidden["output"], hidden["output"]


def test_before_the_due_date_the_score_counts_only_the_visible_tests(course, tmp_path):
    """The top-level score is the points Gradescope shows: before the due date only the visible
    tests' (4 of 10 here), so that the total says nothing of the hidden ones; graded after the
    due date (Gradescope's metadata says it passed), every test's."""
    from datetime import datetime, timezone

    from autograder.grading import submission_metadata

    before = grade(course / "assignments", root=course, limits=Limits(wall_s=20, cpu_s=20))
    assert (before["score"], before["max_score"]) == (4, 4)
    assert before["extra_data"]["hidden_points_counted"] is False
    past = submission_metadata.Metadata(due=datetime(2000, 1, 1, tzinfo=timezone.utc))
    after = grade(course / "assignments", root=course, limits=Limits(wall_s=20, cpu_s=20), metadata=past)
    assert (after["score"], after["max_score"]) == (10, 10) and after["extra_data"]["hidden_points_counted"] is True
    assert [t["score"] for t in after["tests"]] == [t["score"] for t in before["tests"]]


def test_gradescope_metadata_gives_the_identity_and_the_due_date(tmp_path):
    from autograder.grading import submission_metadata

    path = tmp_path / "submission_metadata.json"
    path.write_text('{"users": [{"email": "b@x", "id": 22, "name": "B"}, {"id": 4}],'
                    ' "assignment": {"due_date": "2030-05-01T12:00:00.000000-07:00", "late_due_date": null}}')
    meta = submission_metadata.read(path)
    assert meta.identity == "gradescope-users:22,4" and not meta.past_due()
    path.write_text("not json")
    assert submission_metadata.read(path) == submission_metadata.Metadata()
    assert submission_metadata.folder_identity(tmp_path / "alice.zip") == submission_metadata.folder_identity(tmp_path / "alice")
