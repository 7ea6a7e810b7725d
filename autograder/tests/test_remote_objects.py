"""A task whose students write a class: instances stay in the child, the grader holds handles
(attribute reads, method calls, len, in, [], iteration, truth; handles passed back as arguments),
exceptions cross as their builtin type, and an always-equal object still equals nothing. A
method is looked up in the child at each call, though the grader asks only once per class
whether a name is one."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from autograder.grading.grade import grade
from autograder.sandbox.remote import Child, Limits

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
"c1/test_c1.py::test_methods_are_looked_up_at_each_call" = 16
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

    def double_instead(self):
        self.add = self.double  # the instance's own attribute now hides the class's method

    def double(self, x):
        return 2 * x

    def mark(self, value):
        self.add = value  # and now plain data


def merge(a, b):
    c = Counter(a.start + b.start)
    c.items = a.items + b.items
    return c


def apply(f, x):
    return f(x)
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


def test_methods_are_looked_up_at_each_call():
    a, b = counter.Counter(), counter.Counter()
    assert a.add(1) == 1 and b.add(1) == 1
    b.double_instead()
    assert b.add(5) == 10 and a.add(5) == 2
    assert counter.apply(b.add, 4) == 8 and counter.apply(a.add, 4) == 3
    b.mark(7)
    assert b.add == 7 and b.add != 8 and b.add and a.add(6) == 4
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
    assert data["score"] == 31, [t["output"] for t in data["tests"] if not t["score"]]


def test_a_wrong_property_loses_the_tests_that_read_it(course, tmp_path):
    write(tmp_path / "sub" / "c1" / "counter.py", REFERENCE.replace("return self.start + sum(self.items)",
                                                                    "return sum(self.items)"))
    got = scores(grade(tmp_path / "sub", root=course, limits=LIMITS))
    assert got == {"test_protocols": 0, "test_errors_cross_as_builtin_types": 2,
                   "test_handles_go_back_as_arguments": 0, "test_total_is_the_sum": 8,
                   "test_methods_are_looked_up_at_each_call": 16}


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


def test_a_method_read_again_costs_no_round_trip(course, tmp_path, monkeypatch):
    """The child says once that ``add`` is a function of ``Counter``; from then on reading
    ``c.add`` of any counter asks nothing, and each call is one request."""
    child = Child([("counter", course / "assignments" / "c1" / "counter.py")], tmp_path / "scratch", [], [],
                  LIMITS, time.monotonic() + LIMITS.wall_s)
    sent: list[str] = []
    exchange = child._exchange

    def counted(req: dict, what: str) -> dict:
        sent.append(req["op"])
        return exchange(req, what)

    monkeypatch.setattr(child, "_exchange", counted)
    try:
        first, second = child.call("counter", "Counter", (), {}), child.call("counter", "Counter", (5,), {})
        assert [first.add(x) for x in range(10)] == list(range(1, 11))
        assert [second.add(x) for x in range(3)] == [1, 2, 3] and second.total == 8
        assert sent == ["call", "call", "getattr"] + ["call"] * 13 + ["getattr"]
    finally:
        child.close()
