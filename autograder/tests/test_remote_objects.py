"""A task whose students write a class: instances stay in the child, the grader holds handles
(attribute reads, method calls, len, in, [], iteration, truth; handles passed back as arguments),
exceptions cross as their builtin type, and an always-equal object still equals nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from autograder.grading.grade import grade
from autograder.sandbox.remote import Limits

MANIFEST = '''
[[task]]
id = "c1"
title = "Counter"
lecture = "§0"
edit = ["c1/counter.py"]
[task.tests]
"c1/test_c1.py::test_protocols" = 1
"c1/test_c1.py::test_errors_cross_as_builtin_types" = 2
"c1/test_c1.py::test_handles_go_back_as_arguments" = 4
"c1/test_c1.py::test_total_is_the_sum" = 8
'''

REFERENCE = '''
class Counter:
    def __init__(self, start=0):
        self.start, self.items = start, []

    def add(self, x):
        if x < 0:
            raise ValueError(f"x must be >= 0, got {x}")
        self.items.append(x)
        return len(self.items)

    @property
    def total(self):
        return self.start + sum(self.items)

    def __len__(self):
        return len(self.items)

    def __contains__(self, x):
        return x in self.items

    def __getitem__(self, i):
        return self.items[i]

    def __iter__(self):
        return iter(self.items)


def merge(a, b):
    c = Counter(a.start + b.start)
    c.items = a.items + b.items
    return c
'''

TESTS = '''import pytest
from hypothesis import given, strategies as st

import counter


def test_protocols():
    c = counter.Counter(10)
    assert c.add(3) == 1 and c.add(4) == 2
    assert c.total == 17 and len(c) == 2 and 4 in c and 5 not in c and c[0] == 3 and list(c) == [3, 4]
    assert c


def test_errors_cross_as_builtin_types():
    with pytest.raises(ValueError, match="x must be >= 0"):
        counter.Counter().add(-1)


def test_handles_go_back_as_arguments():
    a, b = counter.Counter(1), counter.Counter(2)
    a.add(5)
    b.add(6)
    assert counter.merge(a, b).total == 14


@given(st.lists(st.integers(0, 100), max_size=20))
def test_total_is_the_sum(xs):
    c = counter.Counter()
    for x in xs:
        c.add(x)
    assert c.total == sum(xs)
'''

LIMITS = Limits(wall_s=20, cpu_s=20)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def course(tmp_path) -> Path:
    root = tmp_path / "course"
    write(root / "assignments" / "manifest.toml", MANIFEST)
    write(root / "assignments" / "c1" / "counter.py", REFERENCE)
    write(root / "assignments" / "c1" / "test_c1.py", TESTS)
    return root


def scores(data: dict) -> dict[str, int]:
    return {t["extra_data"]["test"].split("::")[1]: t["score"] for t in data["tests"]}


def test_the_reference_class_scores_full_marks(course):
    data = grade(course / "assignments", root=course, limits=LIMITS)
    assert data["score"] == 15, [t["output"] for t in data["tests"] if not t["score"]]


def test_a_wrong_property_loses_the_tests_that_read_it(course, tmp_path):
    write(tmp_path / "sub" / "c1" / "counter.py", REFERENCE.replace("return self.start + sum(self.items)",
                                                                    "return sum(self.items)"))
    got = scores(grade(tmp_path / "sub", root=course, limits=LIMITS))
    assert got == {"test_protocols": 0, "test_errors_cross_as_builtin_types": 2,
                   "test_handles_go_back_as_arguments": 0, "test_total_is_the_sum": 8}


def test_an_always_equal_total_earns_nothing(course, tmp_path):
    cheat = REFERENCE.replace("return self.start + sum(self.items)", "return Anything()") + '''

class Anything:
    def __eq__(self, other):
        return True

    def __bool__(self):
        return True
'''
    write(tmp_path / "sub" / "c1" / "counter.py", cheat)
    got = scores(grade(tmp_path / "sub", root=course, limits=LIMITS))
    assert got["test_total_is_the_sum"] == 0 and got["test_protocols"] == 0 and got["test_handles_go_back_as_arguments"] == 0
