"""The simulator's speculative option: acceptance from a per-request rate by
seeded draws, tokens per target step converging to the closed form, the price of the draft's
steps, and k = 0 being the plain run."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab import hw_model as hw
from servelab.engine.speculative import LLAMA32_1B
from servelab.serving_core import Speculation, run_continuous_batching
from servelab.tiny_llm.speculative import expected_tokens_per_step, speculative_step_cost
from servelab.workload import Requests, SharedPrefixes
from assignment_strategies import workloads

M, G = hw.LLAMA3_8B, hw.H100


def _run(reqs, spec=None, **kw):
    return run_continuous_batching(reqs, M, G, speculative=spec, **kw)


@settings(max_examples=20)
@given(reqs=workloads(min_n=1, max_n=12, max_prompt=300, max_output=60),
       seqs=st.integers(1, 8), budget=st.integers(1, 600), bs=st.sampled_from([1, 4, 16]),
       blocks=st.integers(1, 60), chunked=st.booleans(), a=st.floats(0, 1), seed=st.integers(0, 9))
def test_k_zero_is_the_plain_run_and_the_books_add_up(reqs, seqs, budget, bs, blocks, chunked, a,
                                                      seed):
    kw = dict(max_num_seqs=seqs, max_num_batched_tokens=budget, block_size=bs, num_blocks=blocks,
              chunked_prefill=chunked, batch_log=True, trace=True)
    plain = _run(reqs, **kw)
    zero = _run(reqs, Speculation(0, LLAMA32_1B, a, seed), **kw)
    assert zero.batch_log.to_list() == plain.batch_log.to_list()
    np.testing.assert_array_equal(zero.finish_s, plain.finish_s)
    assert zero.busy_s == plain.busy_s and zero.draft_busy_s == 0.0
    spec = _run(reqs, Speculation(3, LLAMA32_1B, a, seed), **kw)
    served = ~spec.rejected
    np.testing.assert_array_equal(spec.rejected, plain.rejected)
    out = reqs.output_len[served]
    # a decoding step emits 1 + kept tokens, a (re)prefill one: the output is exactly the
    # requests' lengths (a recompute after preemption may or may not emit one)
    decoded = spec.spec_steps[served] + spec.spec_accepted[served]
    pre = spec.n_preemptions[served]
    assert np.all((decoded == out - 1) | (pre > 0))
    assert np.all((decoded <= out - 1) & (out - 1 <= decoded + pre))
    assert np.all(spec.spec_accepted <= spec.spec_proposed)
    assert np.all(spec.spec_proposed <= 3 * spec.spec_steps)
    assert np.all(spec.trace.tokens <= budget)
    if a == 0.0:
        assert spec.spec_accepted.sum() == 0
    assert spec.busy_s >= spec.draft_busy_s >= 0.0


@settings(max_examples=8)
@given(a=st.floats(0.05, 0.95), k=st.integers(1, 8), seed=st.integers(0, 2**32))
def test_tokens_per_target_step_converge_to_the_closed_form(a, k, seed):
    """Long outputs and room for every guess: the measured tokens per decoding step meet
    ``(1 - a^(k+1)) / (1 - a)`` within 3% (about 5,000 steps; the last steps of each request
    guess fewer than k, which costs well under 1%)."""
    n = 16
    reqs = Requests(np.zeros(n), np.full(n, 64), np.full(n, 1500))
    r = _run(reqs, Speculation(k, LLAMA32_1B, a, seed), num_blocks=100_000)
    assert r.tokens_per_target_step == pytest.approx(expected_tokens_per_step(a, k), rel=0.03)
    full = r.spec_proposed.sum() / r.spec_steps.sum()
    assert k - 0.05 < full <= k


def test_per_request_rates_and_seeds():
    n = 6
    reqs = Requests(np.zeros(n), np.full(n, 32), np.full(n, 400))
    rates = [0.0, 0.2, 0.5, 0.8, 0.95, 1.0]
    r = _run(reqs, Speculation(4, LLAMA32_1B, rates, seed=1), num_blocks=10_000)
    per = (r.spec_steps + r.spec_accepted) / r.spec_steps
    assert per[0] == 1.0 and np.all(np.diff(per) > 0)
    assert r.spec_accepted[-1] == r.spec_proposed[-1]  # a = 1 keeps everything
    again = _run(reqs, Speculation(4, LLAMA32_1B, rates, seed=1), num_blocks=10_000)
    other = _run(reqs, Speculation(4, LLAMA32_1B, rates, seed=2), num_blocks=10_000)
    np.testing.assert_array_equal(again.finish_s, r.finish_s)
    assert not np.array_equal(other.spec_accepted, r.spec_accepted)


def test_a_step_is_priced_as_verify_plus_draft_steps():
    reqs = Requests([0.0], [512], [3])
    r = _run(reqs, Speculation(3, LLAMA32_1B, 0.0), trace=True, batch_log=True)
    # the prefill, then 1 + 1 guesses (capped by the end), then the last token
    assert r.batch_log.to_list() == [[(0, 512, 0)], [(0, 2, 512)], [(0, 1, 513)]]
    assert r.trace.step_s[1] == pytest.approx(speculative_step_cost(M, LLAMA32_1B, G, 1, 512),
                                              rel=1e-9)
    assert r.draft_busy_s == pytest.approx(hw.step_cost(LLAMA32_1B, G, [(1, 512)]).time_s, rel=1e-9)
    assert r.busy_s == pytest.approx(float(r.trace.step_s.sum()), rel=1e-12)


def test_speculation_never_preempts_or_delays_anyone():
    """A pool just large enough for two requests: guesses take only spare blocks, so the
    preemptions are the plain run's (none) whatever k."""
    reqs = Requests([0.0, 0.0], [16, 16], [40, 40])
    kw = dict(block_size=8, num_blocks=14, batch_log=True)
    plain = _run(reqs, **kw)
    assert plain.n_preemptions.sum() == 0
    for k in (1, 4, 8):
        spec = _run(reqs, Speculation(k, LLAMA32_1B, 1.0), **kw)
        assert spec.n_preemptions.sum() == 0 and spec.peak_kv_blocks <= 14
        assert spec.n_steps < plain.n_steps


@pytest.mark.parametrize("kwargs,error,message", [
    (dict(k=-1), ValueError, "k must be an integer in .0, 65536., got -1"),
    (dict(k=1.5), TypeError, "k must be an integer"),
    (dict(draft="LLAMA"), TypeError, "draft must be a servelab.hw_model.ModelSpec"),
    (dict(acceptance=math.nan), ValueError, "acceptance must be a number in .0, 1."),
    (dict(acceptance=[0.5, 2.0]), ValueError, "acceptance must be a number in .0, 1."),
    (dict(acceptance="0.5"), ValueError, "acceptance must be a number in .0, 1."),
    (dict(seed=-1), ValueError, "seed must be an integer"),
])
def test_bad_configs_are_named(kwargs, error, message):
    with pytest.raises(error, match=message):
        Speculation(**(dict(k=2, draft=LLAMA32_1B, acceptance=0.5) | kwargs))


def test_bad_uses_are_named():
    reqs = Requests([0.0, 0.0], [8, 8], [4, 4])
    with pytest.raises(ValueError, match=r"speculative.acceptance must have one rate per request \(2\), got 3"):
        _run(reqs, Speculation(2, LLAMA32_1B, [0.5, 0.5, 0.5]))
    with pytest.raises(TypeError, match="speculative must be None or a servelab.serving_core.Speculation"):
        _run(reqs, 4)
