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
