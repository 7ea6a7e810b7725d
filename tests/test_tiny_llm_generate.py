"""tiny_llm.generate: the KV cache changes nothing but the work (§2.2, §6.5); samplers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab import tiny_llm
from servelab.tiny_llm import GREEDY, TINY, ContiguousKVCache, KVCache, Temperature, TinyLLM, TopP
from assignment_strategies import prompts

RTOL, ATOL = 1e-4, 1e-5
MODEL = TinyLLM(TINY)

samplers = st.one_of(
    st.just(GREEDY),
    st.builds(Temperature, st.floats(0.2, 2.0), st.integers(0, 2**32)),
    st.builds(TopP, st.floats(0.05, 1.0), st.floats(0.2, 2.0), st.integers(0, 2**32)),
)


@given(prompts(1, 64), st.integers(1, 24), samplers)
def test_cache_and_no_cache_give_identical_tokens_and_close_logits(prompt, n_new, sampler):
    with_cache = tiny_llm.generate(prompt, n_new, sampler, model=MODEL)
    without = tiny_llm.generate(prompt, n_new, sampler, use_cache=False, model=MODEL)
    assert with_cache.tokens == without.tokens
    assert with_cache.logits.shape == without.logits.shape == (n_new, 256)
    np.testing.assert_allclose(with_cache.logits, without.logits, rtol=RTOL, atol=ATOL)
    # and the work: 1 prefill + (n - 1) decodes vs n full forwards
    assert [s.kind for s in with_cache.steps] == ["prefill"] + ["decode"] * (n_new - 1)
    assert [s.n_tokens for s in with_cache.steps] == [len(prompt)] + [1] * (n_new - 1)
    assert [s.n_tokens for s in without.steps] == [len(prompt) + k for k in range(n_new)]
    assert with_cache.tokens_processed == len(prompt) + n_new - 1
    assert len(with_cache.cache) == len(prompt) + n_new - 1 and without.cache is None


@given(prompts(1, 32), st.integers(1, 12), samplers)
def test_generation_is_deterministic(prompt, n_new, sampler):
    a = tiny_llm.generate(prompt, n_new, sampler, model=MODEL)
    b = tiny_llm.generate(prompt, n_new, sampler, model=TinyLLM(TINY))
    assert a.tokens == b.tokens and np.array_equal(a.logits, b.logits)


@given(prompts(1, 32), st.integers(1, 12))
def test_contiguous_and_growing_caches_generate_the_same(prompt, n_new):
    a = tiny_llm.generate(prompt, n_new, model=MODEL)
    b = tiny_llm.generate(prompt, n_new, model=MODEL, cache=ContiguousKVCache(TINY))
    assert a.tokens == b.tokens and np.array_equal(a.logits, b.logits)


def test_hello_world_eight_tokens_is_one_prefill_and_seven_decodes():
    g = tiny_llm.generate(tiny_llm.encode("hello world"), 8)
    assert len(g.prompt) == 11 and len(g.tokens) == 8
    assert [s.kind for s in g.steps].count("prefill") == 1
    assert [s.kind for s in g.steps].count("decode") == 7
    assert [s.context_len for s in g.steps] == [0] + list(range(11, 18))
    assert g.text.startswith("hello world")


def test_greedy_picks_the_argmax_of_each_steps_logits():
    g = tiny_llm.generate([1, 2, 3], 10)
    assert g.tokens == [int(row.argmax()) for row in g.logits]


def test_stop_token_ends_generation_after_it():
    g = tiny_llm.generate([1, 2, 3], 10)
    stop = g.tokens[3]
    first = g.tokens.index(stop)
    short = tiny_llm.generate([1, 2, 3], 10, stop_token=stop)
    assert short.tokens == g.tokens[:first + 1]


# ---- samplers -----------------------------------------------------------------------------

@given(st.lists(st.floats(-20, 20), min_size=1, max_size=300), st.integers(0, 2**32),
       st.integers(0, 10_000))
def test_samplers_return_a_valid_token_deterministically(logits, seed, step):
    x = np.array(logits, dtype=np.float32)
    for s in (GREEDY, Temperature(0.7, seed), TopP(0.9, 1.0, seed)):
        t = s(x, step)
        assert isinstance(t, int) and 0 <= t < len(x)
        assert s(x, step) == t


@given(st.lists(st.floats(-20, 20), min_size=1, max_size=50), st.floats(0.01, 1.0),
       st.floats(0.2, 2.0), st.integers(0, 2**32))
def test_top_p_nucleus_is_the_smallest_most_likely_set_reaching_p(logits, p, temperature, seed):
    x = np.array(logits, dtype=np.float64)
    sampler = TopP(p, temperature, seed)
    probs = tiny_llm.softmax(x, temperature)
    # by hand: the tokens from most to least likely (ties: lower id first), cut where the mass
    # first reaches p (up to float rounding at the cut)
    ranked = sorted(range(len(x)), key=lambda i: (-probs[i], i))
    kept = sampler.nucleus(x).tolist()
    assert kept == ranked[:len(kept)]
    mass = float(np.sum(probs[kept]))
    assert mass >= p * (1 - 1e-9)
    assert mass - probs[kept[-1]] < p * (1 + 1e-9)  # one fewer would not reach p
    expected = kept
    draws = {sampler(x, step) for step in range(30)}
    assert draws <= set(expected)


def test_temperature_sampling_follows_the_distribution():
    logits = np.log(np.array([0.1, 0.2, 0.7]))
    s = Temperature(1.0, seed=1)
    counts = np.bincount([s(logits, k) for k in range(4000)], minlength=3) / 4000
    np.testing.assert_allclose(counts, [0.1, 0.2, 0.7], atol=0.03)
    assert TopP(0.65, seed=1)(logits, 0) == 2  # 0.7 alone covers 65%


def test_seeded_samplers_differ_by_seed_and_step():
    logits = np.zeros(256)
    draws = {Temperature(1.0, seed)(logits, 0) for seed in range(20)}
    assert len(draws) > 5
    assert len({Temperature(1.0, 3)(logits, step) for step in range(20)}) > 5


# ---- bad input ----------------------------------------------------------------------------

def test_bad_generate_arguments():
    with pytest.raises(ValueError, match=r"prompt must hold at least one token, got \[\]"):
        tiny_llm.generate([], 4)
    with pytest.raises(ValueError, match=r"token id 256 at prompt\[1\] is outside the vocabulary \[0, 256\)"):
        tiny_llm.generate([1, 256], 4)
    with pytest.raises(ValueError, match="max_new_tokens must be a positive integer, got 0"):
        tiny_llm.generate([1], 0)
    with pytest.raises(ValueError, match=r"250 tokens and 10 new tokens need 259 positions, more than max_len 256"):
        tiny_llm.generate([1] * 250, 10)
    with pytest.raises(ValueError, match="more than max_len 16"):
        tiny_llm.generate([1] * 10, 8, cache=ContiguousKVCache(TINY, max_len=16))
    with pytest.raises(ValueError, match="a cache was given but use_cache is False"):
        tiny_llm.generate([1], 2, use_cache=False, cache=KVCache(TINY))
    used = KVCache(TINY)
    MODEL.forward([1, 2], used)
    with pytest.raises(ValueError, match="cache must be empty, got one holding 2 tokens"):
        tiny_llm.generate([1], 2, model=MODEL, cache=used)
    with pytest.raises(ValueError, match="stop_token 300 is outside the vocabulary"):
        tiny_llm.generate([1], 2, stop_token=300)
    with pytest.raises(ValueError, match=r"p must be in \(0, 1\], got 0"):
        TopP(0)
    with pytest.raises(ValueError, match="temperature must be a positive finite number, got -1"):
        Temperature(-1)
    with pytest.raises(ValueError, match="seed must be a non-negative integer, got -3"):
        TopP(0.5, 1.0, -3)
    with pytest.raises(ValueError, match="logits must be finite"):
        GREEDY(np.array([0.0, np.nan]), 0)
