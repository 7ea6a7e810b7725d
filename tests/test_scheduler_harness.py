"""The scheduler tasks' harness (assignments/scheduler_harness.py, a8's and a10's tests' side)
refuses every plan the engine cannot carry out, with a message naming the step and the state,
stops a schedule that never ends, and uses servelab's public names only. (That a scheduler
following the rules reproduces the engine exactly is each assignment's own test, on the
reference solution.)"""

from __future__ import annotations

import ast
import doctest
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

import scheduler_harness  # assignments/ is on sys.path (tests/conftest.py)
from scheduler_harness import ScheduleError, run_driven, run_prefix, step_limit
from servelab.blocks import BlockAllocator
from servelab.engine import Request, schedule, serve
from servelab.tiny_llm import TINY, TinyLLM

ASSIGNMENTS = Path(__file__).resolve().parents[1] / "assignments"

MODEL = TinyLLM(TINY)
REQS = [Request(list(b"hello"), 3), Request(list(b"hi there"), 2, arrival_step=1)]
ENG = dict(num_blocks=4, block_size=4, max_num_seqs=2, max_num_batched_tokens=16, model=MODEL)


def plan(batch=(), preempted=(), admitted=()):
    return NS(batch=list(batch), preempted=list(preempted), admitted=list(admitted))


def admit_all(state):
    """Every running request decodes, every waiting one is admitted, whatever the limits."""
    return plan([(s.request_id, 1, s.num_computed) for s in state.running]
                + [(s.request_id, len(s.tokens), 0) for s in state.waiting],
                admitted=[s.request_id for s in state.waiting])


@pytest.mark.parametrize("scheduler, message", [
    (lambda s: None, "expected a Plan with a list batch, got None"),
    (lambda s: plan([(0, 5, 0)], admitted=["0"]), "admitted must be a list of request ids"),
    (lambda s: plan([(0, 5)], admitted=[0]), "batch must hold (request_id, new_tokens, context_len)"),
    (lambda s: plan([(5, 1, 0)], admitted=[5]), "admitted holds [5], which are not waiting"),
    (lambda s: plan([(0, 5, 0)], admitted=[0, 0]), "admitted lists a request twice"),
    (lambda s: plan(admitted=[0]), "admitted [0] have no batch entry"),
    (lambda s: plan([(0, 3, 0)], admitted=[0]), "admitted request 0 prefills all its tokens"),
    (lambda s: plan(), "nothing runs although requests wait or run"),
    (lambda s: plan([(r.request_id, 1, r.num_computed) for r in s.running],
                    [r.request_id for r in s.running],
                    [] if s.running else [w.request_id for w in s.waiting])
     if s.running else admit_all(s),
     "batch holds [0], which are not running and not preempted, or admitted"),
    (lambda s: plan([(r.request_id, 2, r.num_computed) for r in s.running]) if s.running
     else admit_all(s), "running request 0 decodes one token after its 5 computed ones"),
])
def test_bad_plans_fail_with_the_step_and_the_state(scheduler, message):
    with pytest.raises(ScheduleError, match=r"^step \d+: schedule\(state\) with waiting ") as err:
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
    with pytest.raises(ScheduleError, match="needs a fresh block, but no block is free"):
        run_driven(admit_all, [Request(list(b"abcd"), 2), Request(list(b"wxyz"), 2)],
                   **{**ENG, "num_blocks": 2})


def test_a_schedule_that_never_ends_is_stopped():
    # every step that runs something yields a token, so a schedule always ends; the step bound
    # is the net for a harness change that breaks this (shown here with a bound of 2)
    with pytest.raises(ScheduleError, match=r"not finished after 2 steps: requests \[0\] never"):
        run_driven(admit_all, [Request(list(b"hello"), 5)], max_steps=2, **ENG)
    assert step_limit(REQS) > sum(r.max_new_tokens for r in REQS) + 1


# a10: the student plans on an allocator of their own; servelab's, with servelab's scheduler on
# it, is the control, and each case below spoils one thing of that plan or that allocator
SHARED = [Request(list(b"system: hi"), 2), Request(list(b"system: yo"), 2, arrival_step=2)]
A10 = dict(ENG, num_blocks=8, max_num_batched_tokens=4, chunked_prefill=True)


def servelabs(num_blocks, block_size):
    return BlockAllocator(num_blocks, block_size, prefix_caching=True)


def edited(change):
    """servelab's plan, each batch entry ``(rid, n, ctx)`` passed through ``change(entry, state)``."""
    def scheduler(state):
        got = schedule(state)
        return plan([change(e, state) for e in got.batch], got.preempted, got.admitted)
    return scheduler


def test_a10_servelabs_own_plans_pass():
    res, calls = run_prefix(schedule, servelabs, SHARED, **A10)
    assert res.batch_log() == serve(SHARED, prefix_caching=True, **A10).batch_log()
    assert [r.num_cached_tokens for r in res.requests] == [0, 8] and len(calls) == len(res.steps)


@pytest.mark.parametrize("scheduler, factory, message", [
    (schedule, lambda n, bs: servelabs(n - 1, bs),
     "before the call: your PrefixBlocks has num_free_blocks 7, servelab's allocator 8"),
    (edited(lambda e, s: (e[0], e[1] + e[2], 0) if e[0] in [w.request_id for w in s.waiting] else e),
     servelabs, "admitted request 1 starts at its cached tokens: servelab's allocator reuses 8 of its 10"),
    (edited(lambda e, s: (e[0], 2 * e[1], e[2]) if e[0] in [r.request_id for r in s.running] else e),
     servelabs,
     "request 0 has 6 prompt tokens left to prefill after its 4 computed ones"),
])
def test_a10_bad_plans_and_allocators_fail(scheduler, factory, message):
    with pytest.raises(ScheduleError, match=r"^step \d+: schedule\(state\) with waiting ") as err:
        run_prefix(scheduler, factory, SHARED, **A10)
    assert message in str(err.value)


def private_servelab_imports(source: str) -> list[str]:
    """Names starting with ``_`` that ``source`` imports from servelab (modules or members)."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            bad += [a.name for a in node.names if a.name.split(".")[0] == "servelab"
                    and any(p.startswith("_") for p in a.name.split("."))]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "servelab":
            parts = node.module.split(".") + [a.name for a in node.names]  # type: ignore[union-attr]
            bad += [f"{node.module}.{p}" for p in parts if p.startswith("_")]
    return bad


def test_the_harness_imports_only_public_servelab_names():
    assert private_servelab_imports((ASSIGNMENTS / "scheduler_harness.py").read_text()) == []
    for tests in ("a8_continuous_batching/test_a8_continuous_batching.py",
                  "a10_prefix_caching/test_a10_prefix_caching.py"):
        assert private_servelab_imports((ASSIGNMENTS / tests).read_text()) == []
    # the check itself sees a private member, a private module and a private submodule
    assert private_servelab_imports("from servelab.engine.core import _Live\n"
                                    "import servelab._core\nfrom servelab import _checks, blocks") \
        == ["servelab.engine.core._Live", "servelab._core", "servelab._checks"]


def test_the_harness_examples_hold():
    result = doctest.testmod(scheduler_harness)
    assert result.attempted >= 8 and result.failed == 0, result
