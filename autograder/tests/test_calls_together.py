"""Several calls into the student's code in one message (``servelab.harness.calls.call_each``,
sent by ``Child.many``): the same values and exceptions, in the same order, as the calls one at
a time, an exception stopping none of those after it; calls that are not all the child's go one
at a time."""

from __future__ import annotations

import time

import numpy as np
import pytest

from autograder.sandbox.remote import Child, Limits, RemoteModule, StudentError, SubmissionFailed
from servelab.harness.calls import Earlier, call_each, value

LIMITS = Limits(wall_s=20, cpu_s=20)

COUNTER = '''
class Oops(Exception):
    pass


class Counter:
    def __init__(self):
        self.items = []

    def add(self, x):
        if x < 0:
            raise ValueError(f"x must be >= 0, got {x}")
        if x == 13:
            raise Oops("unlucky")
        self.items.append(x)
        return len(self.items)

    @property
    def total(self):
        return sum(self.items)


def twice(x):
    return [x, x]
'''


@pytest.fixture
def counter_child(tmp_path, monkeypatch):
    path = tmp_path / "code" / "counter.py"
    path.parent.mkdir()
    path.write_text(COUNTER)
    child = Child([("counter", path)], tmp_path / "scratch", [], [], LIMITS, time.monotonic() + LIMITS.wall_s)
    sent: list[str] = []  # the requests' ops, as they go
    exchange = child._exchange

    def counted(req: dict, what: str) -> dict:
        sent.append(req["op"])
        return exchange(req, what)

    monkeypatch.setattr(child, "_exchange", counted)
    yield child, sent
    child.close()


def test_calls_travel_together_and_each_gets_its_own_outcome(counter_child):
    child, sent = counter_child
    module = RemoteModule("counter")
    module.bind(child)
    c = child.call("counter", "Counter", (), {})
    add = c.add  # the child says once that add is a method (one getattr)
    del sent[:]
    got = call_each([(add, (3,)), (add, (-1,)), (add, (13,)), (add, (4,)), (getattr, (c, "total")),
                     (module.twice, ((1, 2),)), (getattr, (c, "missing"))])
    assert sent == ["many"]  # one message for seven calls
    assert [ok for ok, _ in got] == [True, False, False, True, True, True, False]
    assert value(got[0]) == 1 and value(got[3]) == 2 and value(got[4]) == 7 and value(got[5]) == [(1, 2), (1, 2)]
    assert isinstance(got[1][1], ValueError) and "x must be >= 0, got -1" in str(got[1][1])
    assert isinstance(got[2][1], StudentError) and str(got[2][1]).startswith("Oops: unlucky")
    assert isinstance(got[6][1], AttributeError)
    # the calls after the exceptions ran: the counter holds 3 and 4, as one call at a time leaves it
    assert c.total == 7 and sent == ["many", "getattr"]


def test_an_attribute_of_an_earlier_calls_value_travels_with_it(counter_child):
    """A counter made, its method called and its total read, in one message; a read of what a
    failed call returned fails as that call did."""
    child, sent = counter_child
    module = RemoteModule("counter")
    module.bind(child)
    got = call_each([(module.Counter, ()), (getattr, (Earlier(0), "total")), (module.twice, ()),
                     (getattr, (Earlier(2), "total"))])
    assert sent == ["many"] and got[1] == (True, 0) and got[0][0] and not got[2][0]
    assert not got[3][0] and isinstance(got[3][1], TypeError) and "twice()" in str(got[3][1])


def test_calls_not_all_the_childs_go_one_at_a_time(counter_child):
    child, sent = counter_child
    c = child.call("counter", "Counter", (), {})
    add = c.add
    del sent[:]
    got = call_each([(add, (3,)), (len, ([1, 2],)), (add, (-1,))])
    assert sent == ["call", "call"] and got[0] == (True, 1) and got[1] == (True, 2)
    assert not got[2][0] and isinstance(got[2][1], ValueError)


def test_without_the_autograder_each_call_runs_here():
    items: list[int] = []
    got = call_each([(items.append, (1,)), (int, ("x",)), (items.append, (2,)), (getattr, (items, "nope"))])
    assert items == [1, 2] and [ok for ok, _ in got] == [True, False, True, False]
    with pytest.raises(AttributeError):
        value(got[3])


def test_a_reply_of_another_length_is_a_broken_protocol(counter_child, monkeypatch):
    child, _ = counter_child
    c = child.call("counter", "Counter", (), {})
    add = c.add
    monkeypatch.setattr(child, "request", lambda req, what: [(True, 1)])
    with pytest.raises(SubmissionFailed, match="unexpected"):
        call_each([(add, (1,)), (add, (2,))])



def test_control_code_in_a_batch_reads_the_arguments_of_the_calls_after_it(tmp_path):
    """Why a test never sends a reference value in the same batch as the call it answers (a3's
    tests send it in a second batch): the child holds the whole message while the first call
    runs, and the hostile ``peeks_at_the_batch`` answers with it (before, 12 points for 6)."""
    from autograder.selfcheck import HOSTILE

    fixture = HOSTILE / "peeks_at_the_batch" / "a3_metrics" / "metrics_hw.py"
    child = Child([("metrics_hw", fixture)], tmp_path / "scratch", [], [], LIMITS, time.monotonic() + LIMITS.wall_s)
    try:
        proxy = RemoteModule("metrics_hw")
        proxy.bind(child)
        a = np.array([0.0, 1.0, 2.0])
        answer = np.array([True, False, True])  # what the test would hand to attainment
        together = call_each([(proxy.meets_slo, (a, a, a, a, a, 1.0, 1.0)), (proxy.attainment, (answer,))])
        assert value(together[0]).tolist() == answer.tolist()  # read off the later call
        alone = call_each([(proxy.meets_slo, (a, a, a, a, a, 1.0, 1.0))])
        assert value(alone[0]).tolist() == [False, False, False]  # nothing to read: its own (wrong) answer
    finally:
        child.close()


def test_the_self_checks_tripwire_fails_a_batch_that_sends_an_answer_on(tmp_path, monkeypatch):
    """The reference's grading in the self-check (``batch_leaks.VARIABLE`` set) fails a test whose
    batch hands a later call the answer of an earlier one; a student's grading never checks."""
    from autograder.sandbox import batch_leaks

    path = tmp_path / "code" / "halves.py"
    path.parent.mkdir()
    path.write_text("def half(x):\n    return x / 2\n")
    child = Child([("halves", path)], tmp_path / "scratch", [], [], LIMITS, time.monotonic() + LIMITS.wall_s)
    try:
        proxy = RemoteModule("halves")
        proxy.bind(child)
        monkeypatch.delenv(batch_leaks.VARIABLE, raising=False)
        assert [value(o) for o in call_each([(proxy.half, (3.0,)), (proxy.half, (1.5,))])] == [1.5, 0.75]
        monkeypatch.setenv(batch_leaks.VARIABLE, "1")
        assert [value(o) for o in call_each([(proxy.half, (3.0,)), (proxy.half, (5.0,))])] == [1.5, 2.5]
        with pytest.raises(SubmissionFailed, match="the answer of call 1 is an argument of call 2"):
            call_each([(proxy.half, (3.0,)), (proxy.half, (1.5,))])
    finally:
        child.close()
