"""The engine refuses bad input with a ValueError naming the value, and reports requests that can
never run as unservable instead of looping."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab.engine import Engine, Request, serve
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


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_blocks=0), "num_blocks must be a positive integer, got 0"),
    (dict(block_size=-3), "block_size must be a positive integer, got -3"),
    (dict(max_num_seqs=1.5), "max_num_seqs must be a positive integer, got 1.5"),
    (dict(max_num_batched_tokens=0), "max_num_batched_tokens must be a positive integer, got 0"),
    (dict(chunked_prefill="yes"), "chunked_prefill must be a bool, got 'yes'"),
    (dict(prefix_caching=1), "prefix_caching must be a bool, got 1"),
    (dict(cost_model="llama"), "cost_model must be a hw_model.ModelSpec, got 'llama'"),
    (dict(gpu=None), "gpu must be a hw_model.GpuSpec, got None"),
    (dict(config="tiny"), "config must be a ModelConfig, got 'tiny'"),
])
def test_bad_engine_arguments_raise_value_error_naming_them(kwargs, match):
    with pytest.raises(ValueError, match=match.replace("(", r"\(").replace(".", r"\.")):
        Engine(**kwargs)


@pytest.mark.parametrize("args, match", [
    (([], 3), "prompt must hold at least one token, got []"),
    (([1, 256], 3), "token id 256 at prompt[1] is outside the vocabulary [0, 256)"),
    (("hello", 3), "prompt must be a sequence of integer token ids, got 'hello' "
                   "(encode text first, e.g. list(text.encode()))"),
    (([1, 2], 0), "max_new_tokens must be a positive integer, got 0"),
    (([1, 2], True), "max_new_tokens must be a positive integer, got True"),
    (([1, 2], 3, None), "sampler must be callable as sampler(logits, step), got None"),
    (([1, 2], 3, GREEDY, -1), "arrival_step must be an integer in [0, 1000000], got -1"),
    (([1] * 250, 10), "a prompt of 250 tokens and max_new_tokens 10 need 259 positions, "
                      "more than max_len 256"),
])
def test_bad_requests_raise_value_error_naming_the_value(args, match):
    eng = Engine(model=MODEL)
    with pytest.raises(ValueError) as info:
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
