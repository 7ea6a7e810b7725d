"""Tests of assignment 5 (batching on an event queue) against servelab's Rust simulator on
random workloads, and hand-checked cases."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import batching as mine
from assignment_strategies import answer_array, answer_float, assert_close
from assignment_strategies import workloads as requests
from servelab import hw_model as hw
from servelab import metrics
from servelab.hw_model import H100, LLAMA3_8B
from servelab.serving_core import run_batch1, run_static_batching


PRICE = hw.price_constants(LLAMA3_8B, H100)


def step_time(batch):
    return hw.step_cost(LLAMA3_8B, H100, batch).time_s


def workloads():
    return requests(min_n=1, max_n=30, max_prompt=1024, max_output=80)


def same(what, r, expected, actual):
    # one finite time per request: an empty or extra axis would broadcast through allclose
    assert_close(f"{what} for arrivals {r.arrival_s.tolist()}, prompts {r.prompt_len.tolist()}, outputs "
                 f"{r.output_len.tolist()}", expected, actual, rtol=1e-9, atol=1e-12, kinds="f")


@given(workloads())
def test_batch1_matches_core(r):
    want = run_batch1(r, LLAMA3_8B, H100)
    first, finish = mine.simulate_batch1(r.arrival_s, r.prompt_len, r.output_len, PRICE)
    same("first_token_s", r, want.first_token_s, first)
    same("finish_s", r, want.finish_s, finish)


@given(workloads(), st.integers(1, 8), st.sampled_from([0.0, 0.1, 0.2, 1.0]))
def test_static_batching_matches_core(r, b, wait):
    want = run_static_batching(r, LLAMA3_8B, H100, batch_size=b, max_wait_s=wait)
    first, finish = mine.simulate_static(r.arrival_s, r.prompt_len, r.output_len, PRICE, b, wait)
    same(f"static B={b} wait={wait}: first_token_s", r, want.first_token_s, first)
    same(f"static B={b} wait={wait}: finish_s", r, want.finish_s, finish)


@given(workloads(), st.integers(2, 8))
def test_no_ride_along_matches_core(r, b):
    # exercise 5: finished requests stop computing, their seats stay empty
    want = run_static_batching(r, LLAMA3_8B, H100, batch_size=b, ride_along=False)
    first, finish = mine.simulate_static(r.arrival_s, r.prompt_len, r.output_len, PRICE, b, 0.2, False)
    same(f"no ride-along B={b}: finish_s", r, want.finish_s, finish)
    same(f"no ride-along B={b}: first_token_s", r, want.first_token_s, first)


@given(workloads(), st.integers(1, 8))
def test_seat_waste_matches_metrics(r, b):
    res = run_static_batching(r, LLAMA3_8B, H100, batch_size=b)
    batches = [np.flatnonzero(res.batch_id == k).tolist() for k in np.unique(res.batch_id)]
    got = answer_float(f"seat_waste of batches {batches}", mine.seat_waste(r.output_len, batches))
    assert np.isclose(got, metrics.seat_waste(res), rtol=1e-12), f"seat waste of batches {batches}"


def test_hand_checked():
    # four requests, static B=2, max_wait 0.2 s: the first two start at once; the third waits
    # alone until its 0.2 s are up; the fourth arrives at 0.3 s, after the third started, and
    # waits its own 0.2 s
    pre2, pre1 = step_time([(10, 0), (10, 0)]), step_time([(10, 0)])
    a, p, o = np.array([0.0, 0.0, 0.0, 0.3]), np.array([10, 10, 10, 10]), np.array([1, 3, 2, 2])
    first, finish = mine.simulate_static(a, p, o, PRICE, 2, 0.2, True)
    first = answer_array("first_token_s", first, (4,), kinds="f")
    finish = answer_array("finish_s", finish, (4,), kinds="f")
    assert first[0] == first[1] == pre2, "the first batch prefills together"
    assert finish[0] == pre2, "a one-token answer ends with the prefill"
    d2a, d2b = step_time([(1, 10), (1, 10)]), step_time([(1, 11), (1, 11)])
    assert np.isclose(finish[1], pre2 + d2a + d2b), "the batch decodes until its longest member ends"
    assert finish[1] < 0.2, "sanity: the first batch is over before the third request's wait"
    assert np.isclose(first[2], 0.2 + pre1), f"the third starts alone at 0.2 s, got first token {first[2]}"
    assert np.isclose(finish[2], 0.2 + pre1 + step_time([(1, 10)]))
    assert np.isclose(first[3], 0.5 + pre1), f"the fourth starts at 0.3 + 0.2 s, got first token {first[3]}"
