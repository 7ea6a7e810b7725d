"""The a8/a10 failure message names a page of both runs up to the step that differs, written only
where ``SERVELAB_TRACE_DIR`` names a folder (assignments/conftest.py sets it for a local run;
the grader never reads that conftest, so it writes nothing). The submission follows the rules
but one: it admits one request a step (rule 4 admits while the budget, the seats and the blocks
last). It is no a8 solution (no block arithmetic, no preemption: the pool is large), so this
file ships in the student release. About 2 s."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace as NS
from urllib.parse import unquote, urlparse

import pytest

import scheduler_harness
from scheduler_harness import ScheduleError, assert_same_steps, run_driven
from servelab.engine import Request, serve
from servelab.tiny_llm import TINY, TinyLLM

ASSIGNMENTS = Path(__file__).resolve().parents[1] / "assignments"
MODEL = TinyLLM(TINY)
# one request alone for two steps, then two at once: step 2 admits both, or (wrongly) one
REQUESTS = [Request([7] * 4, 6), Request([9] * 5, 3, arrival_step=2),
            Request([3] * 2, 3, arrival_step=2)]
ENG = dict(num_blocks=32, block_size=4, max_num_seqs=4, max_num_batched_tokens=64, model=MODEL)


def one_admission_a_step(state):
    batch = [(s.request_id, 1, s.num_computed) for s in state.running]
    admitted = []
    if state.waiting:
        s = state.waiting[0]
        batch.append((s.request_id, len(s.tokens), 0))
        admitted.append(s.request_id)
    return NS(batch=batch, preempted=[], admitted=admitted)


def _failure() -> str:
    want = serve(REQUESTS, **ENG)
    got, calls = run_driven(one_admission_a_step, REQUESTS, **ENG)
    with pytest.raises(ScheduleError) as caught:
        assert_same_steps(want, got, calls, "three requests")
    return str(caught.value)


def test_the_message_names_a_page_of_the_differing_step(tmp_path, monkeypatch):
    monkeypatch.setenv(scheduler_harness.TRACE_DIR_VARIABLE, str(tmp_path))
    message = _failure()
    step = int(re.search(r"three requests: step (\d+):", message).group(1))
    assert step == 2  # the two arrivals at step 2
    url = re.search(r"both runs up to step (\d+), side by side: (file://\S+)", message)
    assert url and int(url.group(1)) == step
    page = Path(unquote(urlparse(url.group(2)).path))
    assert page.name == "trace.html" and tmp_path in page.parents
    text = page.read_text()
    data = json.loads(re.search(r'id="trace-data">(.*?)</script>', text, re.S).group(1)
                      .replace("<\\/", "</"))
    assert data["diff"]["step"] == step and f"step {step}" in data["diff"]["message"]
    want_run, got_run = data["runs"]
    assert len(want_run["steps"]) == len(got_run["steps"]) == step + 1  # cut after the step
    rows = data["diff"]["rows"]
    assert [r[1] == r[2] for r in rows] == [True] * step + [False]  # only the last one differs
    marked = [[text for text, bad in parts if bad] for parts in rows[step][1:]]
    assert marked == [["[2, 2, 0]"], []]  # the engine's admission of request 2, which yours lacks
    assert want_run["steps"][step][3] != got_run["steps"][step][3]  # the batches differ


def test_no_page_and_no_word_of_one_without_the_folder(tmp_path, monkeypatch):
    monkeypatch.delenv(scheduler_harness.TRACE_DIR_VARIABLE, raising=False)
    monkeypatch.chdir(tmp_path)
    message = _failure()
    assert "file://" not in message and "side by side" not in message
    assert list(tmp_path.iterdir()) == []


def test_local_runs_set_the_folder_and_the_grader_reads_no_conftest():
    conftest = (ASSIGNMENTS / "conftest.py").read_text()
    assert scheduler_harness.TRACE_DIR_VARIABLE in conftest
    assert "(The autograder does not use this file.)" in conftest
