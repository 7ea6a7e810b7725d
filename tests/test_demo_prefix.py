"""Demo prefix's claims: with a shared system prompt or multi-turn chat, prefix
caching lowers TTFT and the tokens computed; without anything shared it changes nothing."""

from __future__ import annotations

import pytest

from servelab.demos import demo_prefix as demo


@pytest.fixture(scope="module")
def system_rows():
    return {(r.rate, r.label): r for r in demo.compute_system_prompt(rates=(4.0, 24.0), n=200)}


def test_nothing_shared_changes_nothing(system_rows):
    for rate in (4.0, 24.0):
        own, off = system_rows[rate, "own system prompts, cache"], system_rows[rate, "4 shared, no cache"]
        assert own.cached_tokens == 0
        # the same lengths: sharing nothing with the cache on is the run without the cache
        assert (own.ttft_p50_s, own.computed_tokens) == (off.ttft_p50_s, off.computed_tokens)


def test_a_shared_system_prompt_is_served_from_the_cache(system_rows):
    for rate in (4.0, 24.0):
        off, on = system_rows[rate, "4 shared, no cache"], system_rows[rate, "4 shared, cache"]
        # every token is computed once or served from the cache (no preemption here)
        assert on.computed_tokens + on.cached_tokens == off.computed_tokens
        assert on.cached_tokens > 0.6 * off.computed_tokens  # ~1024 of ~1536 tokens a request
        assert on.ttft_p50_s < 0.5 * off.ttft_p50_s
    # in overload the saved prefill work turns into throughput
    assert system_rows[24.0, "4 shared, cache"].throughput_tok_s > 1.1 * system_rows[24.0, "4 shared, no cache"].throughput_tok_s


def test_multi_turn_reuses_the_conversation():
    off, on = demo.compute_multi_turn(n=100)
    assert off.cached_tokens == 0 and on.cached_tokens > 0.7 * off.computed_tokens
    assert on.ttft_p99_s < off.ttft_p99_s


def test_a_host_tier_serves_more_from_cache_as_it_grows():
    rows = demo.compute_host_tier(n=100, tiers=((0, "lru"), (2000, "lru"), (8000, "lru"), (2000, "hits")))
    (none, h0, _), (small, h1, _), (big, h2, c2), (hits, _, _) = rows
    assert h0 == 0 < h1 < h2 and c2 > 0
    assert none.cached_tokens < small.cached_tokens < big.cached_tokens
    assert big.ttft_p99_s < none.ttft_p99_s
    assert hits.cached_tokens < small.cached_tokens  # the printed claim: LRU wins on conversations
