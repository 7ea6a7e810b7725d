"""The continuous-batching assignment's harness (assignments/a8_continuous_batching/harness.py)
refuses every decision the engine cannot carry out, with a message naming the step and the
state, and stops a schedule that never ends. (That a scheduler following the engine's rules
reproduces the engine exactly is the assignment's own test, on the reference solution.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from servelab.engine import Request
from servelab.tiny_llm import TINY, TinyLLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "assignments" / "a8_continuous_batching"))
from harness import DrivenEngine, ScheduleError, run_driven, step_limit  # noqa: E402

MODEL = TinyLLM(TINY)
REQS = [Request(list(b"hello"), 3), Request(list(b"hi there"), 2, arrival_step=1)]
ENG = dict(num_blocks=4, block_size=4, max_num_seqs=2, max_num_batched_tokens=16, model=MODEL)


def admit_all(waiting, running, free, bs, seqs, budget):
    return [r for r, _ in running], [], [w for w, _ in waiting]


@pytest.mark.parametrize("scheduler, message", [
    (lambda *a: None, "expected a tuple (decode, preempted, admitted)"),
    (lambda *a: ([], [], ["0"]), "admitted must be a list of request ids"),
    (lambda *a: ([], [], [5]), "admitted holds [5], which are not waiting"),
    (lambda *a: ([], [], [0, 0]), "admitted lists a request twice"),
    (lambda *a: ([], [], []), "nothing runs although requests wait or run"),
    (lambda w, r, *a: ([x for x, _ in r], [x for x, _ in r], [] if r else [x for x, _ in w]),
     "decode holds [0], which are not running and not preempted"),
])
def test_bad_decisions_fail_with_the_step_and_the_state(scheduler, message):
    with pytest.raises(ScheduleError, match=r"^step \d+: schedule_step\(waiting=") as err:
        run_driven(scheduler, REQS, **ENG)
    assert message in str(err.value)


def test_limits_are_enforced():
    with pytest.raises(ScheduleError, match="more than max_num_batched_tokens 6"):
        run_driven(admit_all, [Request(list(b"hello"), 2), Request(list(b"hi"), 2)],
                   **{**ENG, "max_num_batched_tokens": 6})
    with pytest.raises(ScheduleError, match="more than max_num_seqs 1"):
        run_driven(admit_all, REQS[:1] * 2, **{**ENG, "max_num_seqs": 1})
    with pytest.raises(ScheduleError, match="needs 2 blocks, 1 are free"):
        run_driven(admit_all, [Request(list(b"abc"), 2), Request(list(b"hello"), 2)],
                   **{**ENG, "num_blocks": 2})


def test_a_schedule_that_never_ends_is_stopped():
    # every step that runs something yields a token, so a schedule always ends; the step bound
    # is the net for a harness change that breaks this (shown here with a bound of 2)
    engine = DrivenEngine(admit_all, **ENG)
    engine.add_request(list(b"hello"), 5)
    with pytest.raises(ScheduleError, match=r"not finished after 2 steps: requests \[0\] never"):
        engine.run_within(2)
    assert step_limit(REQS) > sum(r.max_new_tokens for r in REQS) + 1
