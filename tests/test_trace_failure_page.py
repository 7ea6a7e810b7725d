"""The a8/a10 failure message names a page of both runs up to the step that differs, written only
where ``SERVELAB_TRACE_DIR`` names a folder (assignments/conftest.py sets it for a local run;
the grader never reads that conftest, so it writes nothing). The submission is a8's reference
solution with one rule broken: admission skips a request that does not fit and admits the one
behind it (rule 4 is strict first come, first served). About 2 s."""

from __future__ import annotations

import json
import re
import sys
import types
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

import scheduler_harness
from scheduler_harness import ScheduleError, assert_same_steps, run_driven
from servelab.engine import Request, serve
from servelab.tiny_llm import TINY, TinyLLM

ASSIGNMENTS = Path(__file__).resolve().parents[1] / "assignments"
MODEL = TinyLLM(TINY)
# a long prompt that must wait for blocks, and a short one behind it that would fit
REQUESTS = [Request([7] * 4, 8), Request([9] * 9, 4, arrival_step=1), Request([3] * 2, 3, arrival_step=1)]
ENG = dict(num_blocks=8, block_size=2, max_num_seqs=3, max_num_batched_tokens=32, model=MODEL)


def _one_rule_wrong() -> types.ModuleType:
    source = (ASSIGNMENTS / "a8_continuous_batching" / "scheduler.py").read_text()
    wrong = ("            if need > free:\n                break",
             "            if need > free:\n                continue")
    assert source.count(wrong[0]) == 1
    mutant = types.ModuleType("a8_mutant")
    sys.path.insert(0, str(ASSIGNMENTS / "given"))
    try:
        exec(compile(source.replace(*wrong),
                     "a8_mutant", "exec"), mutant.__dict__)
    finally:
        sys.path.remove(str(ASSIGNMENTS / "given"))
    return mutant


def _failure() -> str:
    want = serve(REQUESTS, **ENG)
    assert any(s.preempted for s in want.steps)
    got, calls = run_driven(_one_rule_wrong().schedule, REQUESTS, **ENG)
    with pytest.raises(ScheduleError) as caught:
        assert_same_steps(want, got, calls, "three requests")
    return str(caught.value)


def test_the_message_names_a_page_of_the_differing_step(tmp_path, monkeypatch):
    monkeypatch.setenv(scheduler_harness.TRACE_DIR_VARIABLE, str(tmp_path))
    message = _failure()
    step = int(re.search(r"three requests: step (\d+):", message).group(1))
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
