"""The engine's tokens equal one-request-at-a-time generation (§6.5), whatever the schedule:
continuous batching, chunked prefill, prefix caching, preemption by recompute."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from hypothesis import event, given
from hypothesis import strategies as st

from servelab.engine import Engine, EngineResult, Request, serve
from servelab.tiny_llm import GREEDY, TINY, Temperature
from engine_strategies import MODEL, alone, blocks_needed, need, request_mixes


def check_log(res: EngineResult, requests: list[Request], eng: dict) -> None:
    """What every schedule must satisfy, read from the step log."""
    per_req: dict[int, int] = defaultdict(int)
    for step in res.steps:
        ids = [rid for rid, _, _ in step.batch]
        assert len(ids) == len(set(ids)) <= eng["max_num_seqs"]
        assert step.num_tokens <= eng["max_num_batched_tokens"]
        assert (step.cost_s > 0) == bool(step.batch)
        for rid, n, ctx in step.batch:
            assert n >= 1 and ctx >= 0
            assert step.index >= requests[rid].arrival_step
            per_req[rid] += n
    for r in res.requests:
        assert per_req[r.request_id] == r.num_computed_tokens
        if r.status == "finished" and r.num_preemptions == 0:
            # every token stored exactly once, minus the prefix-cache hits (§3.5)
            assert r.num_computed_tokens == need(requests[r.request_id]) - r.num_cached_tokens
        if r.status == "finished":
            # the simulated clock: arrival at the start of the arrival step, first token and
            # finish at the end of the steps that produced them, every step priced by step_cost
            clock = [s.clock_s for s in res.steps]
            assert r.arrival_s == (clock[r.arrival_step - 1] if r.arrival_step else 0.0)
            assert r.first_token_s == clock[r.first_token_step]
            assert r.finish_s == clock[r.finish_step]
            assert r.request_id in res.steps[r.finish_step].finished
            assert r.arrival_s < r.first_token_s <= r.finish_s
    assert [s.index for s in res.steps] == list(range(len(res.steps)))
    assert np.allclose(np.cumsum([s.cost_s for s in res.steps]), [s.clock_s for s in res.steps])


@st.composite
def engine_setups(draw, greedy_only: bool = False):
    requests = draw(request_mixes(greedy_only=greedy_only))
    bs = draw(st.sampled_from([1, 2, 4, 8]))
    chunked = draw(st.booleans())
    # from barely enough blocks for the largest request (forced preemption) to plenty
    extra = draw(st.one_of(st.integers(0, 2), st.integers(0, 24)))
    num_blocks = max(blocks_needed(r, bs) for r in requests) + extra
    longest = max(need(r) for r in requests)
    budget = draw(st.integers(1, 48)) if chunked else longest + draw(st.integers(0, 32))
    eng = dict(num_blocks=num_blocks, block_size=bs, chunked_prefill=chunked,
               prefix_caching=draw(st.booleans()), max_num_seqs=draw(st.integers(1, 5)),
               max_num_batched_tokens=budget, model=MODEL)
    return requests, eng


@given(engine_setups())
def test_engine_tokens_equal_generate_alone(setup):
    requests, eng = setup
    res = serve(requests, **eng)
    assert [r.status for r in res.requests] == ["finished"] * len(requests)
    for req, got in zip(requests, res.requests):
        assert got.tokens == alone(req), f"request {got.request_id}"
    check_log(res, requests, eng)
    event(f"preempted: {any(s.preempted for s in res.steps)}")
    event(f"prefix hits: {sum(r.num_cached_tokens for r in res.requests) > 0}")
    event(f"chunked: {eng['chunked_prefill']}")


@given(engine_setups(greedy_only=True))
def test_engine_greedy_tokens_equal_generate_alone(setup):
    requests, eng = setup
    res = serve(requests, **eng)
    assert [r.tokens for r in res.requests] == [alone(r) for r in requests]


def test_a_tight_pool_preempts_and_still_gives_the_same_tokens():
    prompts = [list(range(10 + i, 30 + i)) for i in range(4)]
    requests = [Request(p, 12, Temperature(1.0, seed=i)) for i, p in enumerate(prompts)]
    # 31 tokens per request = 8 blocks of 4; 12 blocks cannot hold two grown requests
    for chunked in (False, True):
        res = serve(requests, num_blocks=12, block_size=4, max_num_seqs=4,
                    max_num_batched_tokens=40, chunked_prefill=chunked, model=MODEL)
        assert sum(r.num_preemptions for r in res.requests) > 0
        assert any(s.preempted for s in res.steps)
        assert [r.tokens for r in res.requests] == [alone(r) for r in requests]


def test_preemption_takes_the_newest_and_puts_it_at_the_front():
    requests = [Request(list(range(1, 8)), 10, GREEDY) for _ in range(3)]
    eng = Engine(num_blocks=6, block_size=4, max_num_seqs=3, model=MODEL)
    for r in requests:
        eng.add_request(r.prompt, r.max_new_tokens, r.sampler, r.arrival_step)
    first_preemption = None
    while (step := eng.step()) is not None:
        if step.preempted and first_preemption is None:
            first_preemption = step
            running = [e[0] for e in step.batch]
            assert step.preempted == (2,)  # the newest of the three
            assert running == [0, 1] and eng.waiting[0].request_id == 2
            assert step.admitted == ()  # nobody joins in a step that preempted
    assert first_preemption is not None
    assert [r.tokens for r in eng.result().requests] == [alone(r) for r in requests]


def test_finished_requests_leave_at_once_and_waiting_ones_join():
    requests = [Request([1, 2, 3], 2), Request([4, 5, 6], 6), Request([7, 8], 3)]
    res = serve(requests, num_blocks=32, block_size=4, max_num_seqs=2, model=MODEL)
    log = res.batch_log()
    # request 0 finishes at step 1; request 2 joins at step 2 (seq cap 2)
    assert log[0] == [(0, 3, 0), (1, 3, 0)]
    assert log[1] == [(0, 1, 3), (1, 1, 3)]
    assert log[2] == [(1, 1, 4), (2, 2, 0)]
    assert res.requests[0].finish_step == 1 and res.requests[2].first_token_step == 2


def test_chunked_prefill_spreads_a_long_prompt_within_the_budget():
    requests = [Request(list(range(40)), 3), Request([9, 9], 4, arrival_step=1)]
    res = serve(requests, num_blocks=32, block_size=4, chunked_prefill=True,
                max_num_batched_tokens=16, model=MODEL)
    log = res.batch_log()
    assert log[0] == [(0, 16, 0)]
    assert log[1] == [(0, 16, 16)]  # the running prefill takes the whole budget first
    assert log[2] == [(0, 8, 32), (1, 2, 0)]
    assert [r.tokens for r in res.requests] == [alone(r) for r in requests]


@given(engine_setups())
def test_the_same_requests_give_the_same_schedule_bit_for_bit(setup):
    requests, eng = setup
    a, b = serve(requests, **eng), serve(requests, **eng)
    assert a.batch_log() == b.batch_log() and a.steps == b.steps
    assert [(r.tokens, r.ttft_s) for r in a.requests] == [(r.tokens, r.ttft_s) for r in b.requests]


def test_idle_steps_before_an_arrival_are_logged_empty_and_cost_nothing():
    req = Request([5, 6, 7], 2, arrival_step=3)
    res = serve([req], num_blocks=8, block_size=4, model=MODEL)
    assert res.batch_log() == [[], [], [], [(0, 3, 0)], [(0, 1, 3)]]
    r = res.requests[0]
    assert r.arrival_s == 0.0 and r.ttft_s == res.steps[3].cost_s > 0
    assert r.tpot_s == res.steps[4].cost_s and r.tokens == alone(req)
