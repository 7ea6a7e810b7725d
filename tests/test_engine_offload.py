"""A tiered KV cache in the engine (§8 milestone 4b): blocks evicted from a small GPU pool are
kept host-side and copied back on a hit; the tokens are those of a run without the tier."""

from __future__ import annotations

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from servelab import hw_model
from servelab.engine import Request, serve
from servelab.tiny_llm import GREEDY, Temperature
from engine_strategies import MODEL, alone

tokens = st.integers(0, 255)


@st.composite
def evicting_workloads(draw):
    """A few shared prefixes, each request one of them plus its own tail, arriving over time in
    a pool too small to keep every prefix on the GPU."""
    bs = draw(st.sampled_from([2, 4]))
    prefixes = [draw(st.lists(tokens, min_size=bs, max_size=3 * bs)) for _ in range(draw(st.integers(1, 3)))]
    reqs = []
    for i in range(draw(st.integers(3, 8))):
        p = draw(st.sampled_from(prefixes))
        tail = draw(st.lists(tokens, min_size=1, max_size=2 * bs))
        sampler = GREEDY if draw(st.booleans()) else Temperature(1.0, i)
        reqs.append(Request(p + tail, draw(st.integers(1, 4)), sampler, arrival_step=3 * i))
    # 7 blocks hold the longest request (5 * bs prompt tokens + 3 more): one, not every prefix
    num_blocks = draw(st.integers(7, 9))
    return reqs, bs, num_blocks, draw(st.sampled_from(["lru", "hits"])), draw(st.booleans())


@given(evicting_workloads())
def test_the_host_tier_changes_no_token(case):
    reqs, bs, num_blocks, policy, chunked = case
    common = dict(num_blocks=num_blocks, block_size=bs, prefix_caching=True, chunked_prefill=chunked,
                  max_num_batched_tokens=8 if chunked else 64, max_num_seqs=1, model=MODEL)
    plain = serve(reqs, **common)
    tiered = serve(reqs, host_blocks=16, host_policy=policy, **common)
    assert [r.tokens for r in tiered.requests] == [r.tokens for r in plain.requests] \
        == [alone(r) for r in reqs]
    hits = tiered.stats["num_host_hits"]
    event(f"host hits: {'some' if hits else 'none'}")
    assert plain.stats["num_host_hits"] == 0
    # every cached token is a GPU or a host hit
    assert sum(r.num_cached_tokens for r in tiered.requests) == bs * (hits + tiered.stats["num_hits"])


def test_a_recalled_prefix_is_copied_back_and_priced():
    # A's 8-token prefix is evicted by B (B takes all 4 blocks), then C hits it on the host.
    prefix = list(range(10, 18))
    a, b = Request(prefix + [1], 1), Request(list(range(40, 56)), 1, arrival_step=2)
    c = Request(prefix + [2], 1, Temperature(0.7, 5), arrival_step=4)
    common = dict(num_blocks=4, block_size=4, prefix_caching=True, model=MODEL)
    plain, tiered = serve([a, b, c], **common), serve([a, b, c], host_blocks=4, **common)
    assert [r.tokens for r in tiered.requests] == [r.tokens for r in plain.requests] == [alone(a), alone(b), alone(c)]
    assert plain.requests[2].num_cached_tokens == 0
    assert tiered.requests[2].num_cached_tokens == 8 and tiered.stats["num_host_hits"] == 2
    assert tiered.requests[2].num_computed_tokens == 1  # only the tail
    step_c = next(s for s in tiered.steps if 2 in s.admitted)
    forward = hw_model.step_cost(hw_model.LLAMA3_8B, hw_model.H100, list((n, c) for _, n, c in step_c.batch)).time_s
    copy = hw_model.kv_host_transfer_s(hw_model.LLAMA3_8B, hw_model.H100, 8)
    assert step_c.cost_s == pytest.approx(forward + copy, rel=1e-12) and copy > 0
