"""Every exchange with a child has a deadline, and the submission as a whole a budget: a child
that stops reading, floods one byte at a time or sleeps in every test is cut off, and a reply of
too many values is refused before it is parsed, with a message that says so, and ``grade-all``
always writes its gradebook.

Cost: about 40 s on a quiet machine (two short gradings of the sleeper, a few children).
"""

from __future__ import annotations

import csv
import re
import threading
import time
from typing import TYPE_CHECKING

import numpy as np
import pytest

from autograder.grading import grade as grade_module
from autograder.grading.grade import ROOT, grade
from autograder.grading.gradebook import grade_all
from autograder.sandbox import remote
from autograder.sandbox.remote import Child, Limits, SubmissionFailed
from autograder.selfcheck import HOSTILE, points_by_task

if TYPE_CHECKING:  # typeshed's names (Python 3.12's collections.abc.Buffer)
    from typing_extensions import Buffer, Self

STOPS_READING = HOSTILE / "stops_reading" / "a12_tensor_parallel" / "tp_layer.py"
FLOOD = HOSTILE / "one_byte_flood" / "a1_ledger" / "ledger.py"
LARGE = [np.ones((512, 256), np.float32)]  # about 1 MB on the wire, as a12's layer weights


def child_of(module: str, path, tmp_path, wall_s: float = 3.0) -> Child:
    return Child([(module, path)], tmp_path / "scratch", [], [], Limits(wall_s=wall_s, cpu_s=10),
                 time.monotonic() + wall_s)


def test_a_child_that_stops_reading_a_large_request_is_cut_off(tmp_path):
    child = child_of("tp_layer", STOPS_READING, tmp_path)
    assert child.call("tp_layer", "all_reduce", ([1.0],), {}) is None  # a small request is read
    with pytest.raises(SubmissionFailed, match="did not read the request for tp_layer.all_reduce"):
        child.call("tp_layer", "all_reduce", (LARGE,), {})
    assert child.proc.poll() is not None  # killed, not left sleeping


def test_control_a_blocking_write_to_that_child_never_returns(tmp_path):
    """The control: the same child, written to with a plain blocking write (the grader's old
    way), leaves the writer blocked long after the deadline that now cuts it off."""
    child = child_of("tp_layer", STOPS_READING, tmp_path, wall_s=60.0)
    data = (remote.json.dumps({"op": "call", "target": {"module": "tp_layer", "name": "all_reduce"},
                               "args": child._encode([LARGE]), "kwargs": {}}) + "\n").encode()
    os = remote.os
    os.set_blocking(child._request, True)
    writer = threading.Thread(target=lambda: _write_all(os, child._request, data), daemon=True)
    writer.start()
    writer.join(timeout=5.0)  # the new grader gives up after its deadline (3 s above)
    try:
        assert writer.is_alive(), "the write finished: the child read the large request"
    finally:
        child.close()  # the write fails with a broken pipe, and the thread ends
    writer.join(timeout=10)


def _write_all(os, fd: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:
        pass


class CountingBuffer(bytearray):
    """A reply buffer that counts the bytes its newline searches look at."""

    scanned = 0
    received = 0

    def find(self, sub, start=0, *args):
        CountingBuffer.scanned += max(0, len(self) - start)
        return super().find(sub, start, *args)

    # the override is bytearray's own signature: typeshed's bytearray.__iadd__ (a Buffer)
    # already breaks MutableSequence's (an Iterable[int]), ignored in the stub itself
    def __iadd__(self, other: Buffer) -> Self:  # type: ignore[override]
        CountingBuffer.received += len(memoryview(other))
        return super().__iadd__(other)


def test_a_one_byte_flood_is_cut_off_and_each_byte_is_scanned_once(tmp_path):
    child = child_of("ledger", FLOOD, tmp_path, wall_s=2.0)
    child._buffer = CountingBuffer()
    CountingBuffer.scanned = CountingBuffer.received = 0
    with pytest.raises(SubmissionFailed, match=r"time limit: 2 s \(wall clock\) ran out while ledger.weight_bytes"):
        child.call("ledger", "weight_bytes", (1,), {})
    assert CountingBuffer.received > 1000
    # linear: every byte received is looked at once (a rescan on each read would be the sum of
    # the buffer's lengths, about received**2 / 2 at one byte a read)
    assert CountingBuffer.scanned <= CountingBuffer.received


SLEEPY_LEDGER = """import time


def __getattr__(name):  # every function a1's tests call: each of its six tests takes at least 1 s
    def slow(*args, **kwargs):
        time.sleep(1.0)
        return 0
    return slow
"""


def sleeper_grading(tmp_path, monkeypatch, per_test_s: float) -> dict:
    """A submission whose every function sleeps 1 s, graded with a task budget of
    ``per_test_s`` a test (six tests) plus half a 6 s limit."""
    (tmp_path / "sleepy" / "a1_ledger").mkdir(parents=True)
    (tmp_path / "sleepy" / "a1_ledger" / "ledger.py").write_text(SLEEPY_LEDGER)
    monkeypatch.setattr(grade_module, "BUDGET_PER_TEST_S", per_test_s)
    monkeypatch.setattr(grade_module, "RESERVE_LIMITS", 0.5)
    # factor 1: a sleep is as long on a busy machine as on a quiet one, so the budget binds alike
    return grade(tmp_path / "sleepy", limits=Limits(wall_s=6.0, cpu_s=6), time_factor=1.0,
                 only_tasks=frozenset({"a1_ledger"}))


def a1_messages(data: dict) -> list[str]:
    return [t["output"] for t in data["tests"] if t["extra_data"]["task"] == "a1_ledger"]


WIDE = """
def wide(n):
    return [[] for _ in range(n)]  # a reply of n values, 3 bytes each on the wire
"""


def test_a_reply_of_too_many_values_is_refused_before_it_is_parsed(tmp_path):
    """1.2 million empty lists fit the 16 MiB line limit (5.6 million would: 830 MB of the
    grader's memory once parsed and decoded); refused unparsed, with a message that says so."""
    path = tmp_path / "code" / "wide.py"
    path.parent.mkdir()
    path.write_text(WIDE)
    child = child_of("wide", path, tmp_path, wall_s=20.0)
    try:
        assert child.call("wide", "wide", (1000,), {}) == [[]] * 1000  # honest replies hold hundreds
        with pytest.raises(SubmissionFailed, match="held more than 1048576 values"):
            child.call("wide", "wide", (remote.MAX_REPLY_VALUES + 1,), {})
        assert not child.alive()
    finally:
        child.close()


def test_control_without_the_values_bound_the_wide_reply_is_parsed_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(remote, "MAX_REPLY_VALUES", 1 << 30)
    path = tmp_path / "code" / "wide.py"
    path.parent.mkdir()
    path.write_text(WIDE)
    child = child_of("wide", path, tmp_path, wall_s=20.0)
    try:
        assert len(child.call("wide", "wide", ((1 << 20) + 1,), {})) == (1 << 20) + 1
    finally:
        child.close()


def test_the_budget_bounds_a_sleep_in_every_child(tmp_path, monkeypatch):
    """The task's budget (0.3 s a test and half a limit: 4.8 s) is spent before the sixth test
    (five tests take at least 5 s): it does not run, and says so; the test the budget cut off
    says that too."""
    messages = a1_messages(sleeper_grading(tmp_path, monkeypatch, 0.3))
    assert messages[5].startswith("not run: this task's time budget"), messages
    assert any(m.startswith("time budget: the time this task may take in all ran out") for m in messages), messages


def test_control_without_the_budget_every_test_runs_to_its_own_end(tmp_path, monkeypatch):
    messages = a1_messages(sleeper_grading(tmp_path, monkeypatch, 1e9))
    assert len(messages) == 6 and not any("budget" in m for m in messages), messages


def tiny_course(root):
    """A course of one task and no notebooks (grade-all on it needs no nbgrader)."""
    (root / "assignments" / "t1").mkdir(parents=True)
    (root / "assignments" / "manifest.toml").write_text(
        '[[task]]\nid = "t1"\ntitle = "Double"\nlecture = "§0"\nedit = ["t1/double.py"]\n'
        'visibility = "visible"\n[task.tests]\n"t1/test_t1.py::test_double" = 1\n')
    (root / "assignments" / "t1" / "double.py").write_text("def double(x):\n    return 2 * x\n")
    (root / "assignments" / "t1" / "test_t1.py").write_text(
        "import double\n\n\ndef test_double():\n    assert double.double(2) == 4\n")
    return root


def test_grade_all_writes_its_gradebook_when_gradings_outlive_their_budget(tmp_path):
    """Two submissions, and no time to grade them: each gets a row that says so, and the
    gradebook is written (the gradings are stopped, not waited for)."""
    course = tiny_course(tmp_path / "course")
    subs = tmp_path / "subs"
    for name in ("ann", "ben"):
        (subs / name / "t1").mkdir(parents=True)
        (subs / name / "t1" / "double.py").write_text("def double(x):\n    return 2 * x\n")
    path = grade_all(subs, tmp_path / "out", root=course, limits=Limits(wall_s=5, cpu_s=5), jobs=1, wait_s=0.05)
    rows = list(csv.reader(path.open()))
    assert [r[0] for r in rows[1:]] == ["ann", "ben"]
    assert all(r[-2].startswith("grader error: not graded: its grading outlived") for r in rows[1:]), rows
    timing = list(csv.reader((tmp_path / "out" / "timing.csv").open()))
    assert timing[0][-1] == "time_budget_ran_out" and [r[-1] for r in timing[1:]] == ["grading stopped"] * 2


def test_a_limit_fitted_to_the_machine_is_named_as_given(tmp_path):
    """What a cut-off test says does not depend on the calibration: a regrade on a busier machine
    (its limits scaled further) writes the same words, the manifest's numbers."""
    from autograder.grading import calibrate
    from autograder.grading.judge import not_run

    said = []
    for factor in (1.0, 1.6):
        limits = calibrate.scaled(Limits(wall_s=1.0, cpu_s=3), factor, cpu_factor=factor)
        child = Child([("ledger", FLOOD)], tmp_path / f"scratch{factor}", [], [], limits,
                      time.monotonic() + limits.wall_s)
        with pytest.raises(SubmissionFailed) as caught:
            child.call("ledger", "weight_bytes", (1,), {})
        said.append((str(caught.value), remote._describe_exit(-remote.signal.SIGXCPU, limits)))
    assert said[0] == said[1], said
    assert said[0][0].startswith("time limit: 1 s (wall clock, fitted to this machine's speed and load) ran out")
    assert said[0][1] == "was killed by SIGXCPU (CPU time limit of 3 s a test, fitted to this machine's speed)"
    assert re.search(r"[0-9.]+ s\b", not_run()) is None  # no seconds in a budget's message either


def test_a_limit_longer_than_polls_milliseconds_is_waited_for_in_pieces(tmp_path):
    """A wall-clock limit of years (--timeout as large as one likes) is more milliseconds than a
    C int holds: the reply is still waited for (an hour at a time), not an OverflowError."""
    module = tmp_path / "mods" / "slowish.py"
    module.parent.mkdir()
    module.write_text("import time\n\n\ndef answer():\n    time.sleep(0.2)\n    return 42\n")
    child = child_of("slowish", module, tmp_path, wall_s=1e9)
    try:
        assert child.call("slowish", "answer", (), {}) == 42
    finally:
        child.close()
