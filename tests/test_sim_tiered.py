"""The prefix simulator with a host tier (§8 milestone 4b, `rust/src/sim/continuous/prefix.rs`)."""

from __future__ import annotations

import numpy as np
import pytest

from servelab import serving_core as sc
from servelab import workload
from servelab.hw_model import H100, LLAMA3_8B, kv_host_transfer_s

REQS, SHARED = workload.chat_sessions(n=60, rate=1.0, seed=3, turns_mean=4.0)
POOL = dict(num_blocks=1500, prefix_caching=True, shared_prefixes=SHARED)


def run(**kw):
    return sc.run_continuous_batching(REQS, LLAMA3_8B, H100, **POOL, **kw)


def test_no_tier_is_the_plain_prefix_run_bit_for_bit():
    plain, zero = run(), run(host_blocks=0, host_policy="hits")
    assert plain.finish_s.tobytes() == zero.finish_s.tobytes()
    assert (plain.cached_tokens == zero.cached_tokens).all() and zero.host_hits == 0


def test_a_host_tier_serves_evicted_turns_and_prices_the_copies():
    off, on = run(), run(host_blocks=8000)
    assert off.prefix_evictions > 0  # the pool is small enough to evict
    assert on.host_hits > 0 and on.cached_tokens.sum() > off.cached_tokens.sum()
    assert on.computed_tokens.sum() < off.computed_tokens.sum()
    ttft = lambda r: np.median(r.first_token_s - REQS.arrival_s)  # noqa: E731
    assert ttft(on) < ttft(off)
    # each recalled block's copy, at the host link's bandwidth, added to the clock
    want = kv_host_transfer_s(LLAMA3_8B, H100, on.host_hits * 16)
    assert on.host_transfer_s == pytest.approx(want, rel=1e-9)
    assert on.busy_s > on.host_transfer_s > 0


@pytest.mark.parametrize("kw, match", [
    (dict(host_blocks=-1), "host_blocks"),
    (dict(host_blocks=10, host_policy="lfu"), "host_policy"),
    (dict(host_blocks=1.5), "host_blocks"),
])
def test_bad_tier_arguments_are_named(kw, match):
    with pytest.raises((TypeError, ValueError), match=match):
        run(**kw)


def test_a_tier_needs_prefix_caching():
    with pytest.raises(ValueError, match="host_blocks=4 needs prefix_caching=True"):
        sc.run_continuous_batching(REQS, LLAMA3_8B, H100, num_blocks=1500, host_blocks=4)


def test_the_copies_are_on_the_clock():
    # over a link 10,000 times slower than PCIe, recalling costs more than recomputing
    import dataclasses
    slow = dataclasses.replace(H100, host_link_bandwidth=H100.host_link_bandwidth / 1e4)
    off = sc.run_continuous_batching(REQS, LLAMA3_8B, slow, **POOL)
    on = sc.run_continuous_batching(REQS, LLAMA3_8B, slow, host_blocks=8000, **POOL)
    assert on.busy_s - off.busy_s > 0.5 * on.host_transfer_s > 0
    assert np.median(on.finish_s - REQS.arrival_s) > np.median(off.finish_s - REQS.arrival_s)
