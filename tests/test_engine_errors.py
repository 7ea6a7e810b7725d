"""The engine refuses bad input with a TypeError or ValueError naming the value, and reports requests that can
never run as unservable instead of looping."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab.engine import Engine, Plan, Request, serve
from servelab.tiny_llm import GREEDY
from engine_strategies import MODEL, alone


@given(st.integers(1, 8), st.integers(1, 40), st.integers(1, 10))
def test_a_request_too_big_for_the_pool_is_unservable_and_the_rest_still_run(bs, p, m):
    p += bs  # at least two blocks, so that a pool of one block fewer exists
    need_blocks = -(-(p + m - 1) // bs)
    big = Request(list(range(p)), m)
    small = Request([1], 1, arrival_step=1)  # one token: fits any pool
    res = serve([big, small], num_blocks=need_blocks - 1, block_size=bs,
                max_num_batched_tokens=64, model=MODEL)
    r = res.requests[0]
    assert r.status == "unservable" and r.tokens == [] and f"needs {need_blocks} blocks" in r.reason
    assert math.isnan(r.ttft_s) and r.first_token_step is None
    assert res.requests[1].status == "finished" and res.requests[1].tokens == alone(small)
    assert len(res.steps) <= 3


def test_a_prompt_over_the_token_budget_needs_chunked_prefill():
    req = Request(list(range(30)), 3)
    res = serve([req], num_blocks=64, block_size=4, max_num_batched_tokens=16, model=MODEL)
    assert res.requests[0].status == "unservable"
    assert "max_num_batched_tokens 16" in res.requests[0].reason
    res = serve([req], num_blocks=64, block_size=4, max_num_batched_tokens=16,
                chunked_prefill=True, model=MODEL)
    assert res.requests[0].status == "finished" and res.requests[0].tokens == alone(req)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(num_blocks=0), ValueError, "num_blocks must be a positive integer, got 0"),
    (dict(block_size=-3), ValueError, "block_size must be a positive integer, got -3"),
    (dict(max_num_seqs=1.5), TypeError, "max_num_seqs must be an integer, got 1.5 (float)"),
    (dict(max_num_batched_tokens=0), ValueError, "max_num_batched_tokens must be a positive integer, got 0"),
    (dict(chunked_prefill="yes"), TypeError, "chunked_prefill must be True or False, got 'yes' (str)"),
    (dict(prefix_caching=1), TypeError, "prefix_caching must be True or False, got 1 (int)"),
    (dict(cost_model="llama"), TypeError, "cost_model must be a hw_model.ModelSpec, got 'llama' (str)"),
    (dict(gpu=None), TypeError, "gpu must be a hw_model.GpuSpec, got None (NoneType)"),
    (dict(config="tiny"), TypeError, "config must be a ModelConfig, got 'tiny' (str)"),
    (dict(scheduler=print), TypeError, "scheduler must have a schedule(state) method"),
])
def test_bad_engine_arguments_raise_an_error_naming_them(kwargs, error, match):
    with pytest.raises(error) as info:
        Engine(**kwargs)
    assert str(info.value).startswith(match)


@pytest.mark.parametrize("args, match", [
    (([], 3), "prompt must hold at least one token, got []"),
    (([1, 256], 3), "token id 256 at prompt[1] is outside the vocabulary [0, 256)"),
    (("hello", 3), "prompt must be a sequence of integer token ids, got 'hello' "
                   "(encode text first, e.g. list(text.encode()))"),
    (([1, 2], 0), "max_new_tokens must be a positive integer, got 0"),
    (([1, 2], True), "max_new_tokens must be an integer, got True (bool)"),
    (([1, 2], 3, None), "sampler must be callable as sampler(logits, step), got None"),
    (([1, 2], 3, GREEDY, -1), "arrival_step must be an integer in [0, 1000000], got -1"),
    (([1] * 250, 10), "a prompt of 250 tokens and max_new_tokens 10 need 259 positions, "
                      "more than max_len 256"),
])
def test_bad_requests_raise_value_error_naming_the_value(args, match):
    eng = Engine(model=MODEL)
    with pytest.raises((TypeError, ValueError)) as info:
        eng.add_request(*args)
    assert str(info.value) == match


def test_serve_refuses_what_is_not_a_request():
    with pytest.raises(ValueError, match=r"requests must hold Request objects, got \(1, 2\)"):
        serve([(1, 2)], model=MODEL)


def test_requests_cannot_be_added_once_running():
    eng = Engine(model=MODEL)
    eng.add_request([1, 2], 2)
    eng.step()
    with pytest.raises(ValueError, match="add_request after run"):
        eng.add_request([3], 1)


def test_arrival_times_are_given_for_every_request_or_none():
    eng = Engine(model=MODEL)
    eng.add_request([1, 2], 2, arrival_s=0.5)
    with pytest.raises(ValueError, match="arrival_s must be given for every request or for none"):
        eng.add_request([3], 1)
    with pytest.raises(ValueError, match="arrival_s replaces arrival_step"):
        eng.add_request([3], 1, arrival_step=2, arrival_s=1.0)


class Planner:
    """A scheduler that returns a fixed plan."""

    def __init__(self, plan):
        self.plan = plan

    def schedule(self, state):
        return self.plan


@pytest.mark.parametrize("plan, match", [
    (Plan(), "step 0: work is left but the scheduler planned nothing"),
    (Plan(batch=((0, 3, 0),)), r"entry \(0, 3, 0\) does not match request 0"),
])
def test_a_plan_the_engine_cannot_carry_out_is_refused(plan, match):
    eng = Engine(model=MODEL, scheduler=Planner(plan))
    eng.add_request([1, 2, 3], 2)
    with pytest.raises(RuntimeError, match=match):
        eng.step()
