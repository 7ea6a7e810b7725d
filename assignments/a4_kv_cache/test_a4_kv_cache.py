"""Tests of assignment 4 (the KV cache), against servelab.tiny_llm: your attention against the
model's own on random shapes, your cache plugged into the real model (same tokens, same logits
as without any cache), and the token counts of §2.2."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kv_cache as mine
from assignment_strategies import answer_int, assert_close
from servelab import tiny_llm
from servelab.tiny_llm import TINY
from servelab.tiny_llm.model import causal_attention as model_attention


@st.composite
def attention_inputs(draw):
    n_kv = draw(st.integers(1, 4))
    n_heads = n_kv * draw(st.integers(1, 4))
    d_head = draw(st.integers(1, 16))
    n = draw(st.integers(1, 12))
    ctx = draw(st.integers(0, 20))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    q, k, v = (rng.standard_normal(shape, dtype=np.float32)
               for shape in ((n, n_heads, d_head), (n_kv, ctx + n, d_head), (n_kv, ctx + n, d_head)))
    return q, k, v, ctx


@given(attention_inputs())
def test_causal_attention_matches_model(args):
    q, k, v, ctx = args
    got = mine.causal_attention(q, k, v, ctx)
    want = model_attention(q, k, v, ctx)
    assert_close(f"attention of n={q.shape[0]} new tokens over context {ctx}", want, got, rtol=1e-4, atol=1e-5,
                 kinds="f")


prompts = st.lists(st.integers(0, 255), min_size=1, max_size=24)


class Plugged:
    """Your cache as the model sees it: the model's own config, and every call forwarded to your
    object (under the autograder your object lives in a sandbox and is reached by calls only)."""

    def __init__(self, cache) -> None:
        self.inner = cache
        self.config = TINY
        self.max_len = int(cache.max_len)

    def __len__(self) -> int:
        return len(self.inner)

    def reserve(self, n_new):
        return self.inner.reserve(n_new)

    def update(self, layer, k_new, v_new):
        k, v = self.inner.update(layer, k_new, v_new)
        return np.asarray(k, dtype=np.float32), np.asarray(v, dtype=np.float32)

    def commit(self, n_new):
        return self.inner.commit(n_new)

    def rollback(self):
        return self.inner.rollback()


@settings(max_examples=25)  # each example is a whole generation, twice: keep grading quick
@given(prompts, st.integers(1, 16))
def test_cache_in_the_real_model_gives_the_same_tokens(prompt, n_new):
    with_mine = tiny_llm.generate(prompt, n_new, cache=Plugged(mine.ListKVCache(TINY)))
    without = tiny_llm.generate(prompt, n_new, use_cache=False)
    assert with_mine.tokens == without.tokens, f"prompt {prompt}: tokens differ with your cache"
    for step, (a, b) in enumerate(zip(with_mine.logits, without.logits)):
        assert np.allclose(a, b, rtol=1e-4, atol=1e-5), f"prompt {prompt}: logits differ at step {step}"


def test_cache_refuses_overflow_and_rolls_back():
    cache = Plugged(mine.ListKVCache(TINY, max_len=8))
    model = tiny_llm.model_for(TINY)
    model.forward(list(range(6)), cache)
    assert len(cache) == 6
    with pytest.raises(ValueError):
        model.forward([1, 2, 3], cache)  # 9 > max_len 8
    assert len(cache) == 6, "a refused forward must leave the cache as it was"
    cache.reserve(2)
    k = np.zeros((TINY.n_kv_heads, 2, TINY.d_head), np.float32)
    cache.update(0, k, k)
    cache.rollback()
    logits = model.forward([7], cache)  # must still work on top of the 6 committed tokens
    reference = tiny_llm.KVCache(TINY)
    model.forward(list(range(6)), reference)
    assert np.allclose(logits, model.forward([7], reference), rtol=1e-5, atol=1e-6), \
        "after rollback the cache must hold exactly its committed tokens"


@settings(max_examples=25)
@given(st.integers(1, 40), st.integers(1, 40), st.booleans())
def test_tokens_processed_matches_the_real_model(prompt_len, n_new, use_cache):
    gen = tiny_llm.generate([65] * prompt_len, n_new, use_cache=use_cache)
    counted = sum(step.n_tokens for step in gen.steps)
    got = answer_int("tokens_processed", mine.tokens_processed(prompt_len, n_new, use_cache))
    assert got == counted, f"tokens_processed({prompt_len}, {n_new}, use_cache={use_cache}): " \
                           f"the model processed {counted}, you said {got}"


@given(st.integers(1, 4096), st.integers(1, 4096), st.booleans())
def test_lecture_numbers(prompt_len, n_new, use_cache):
    assert answer_int("tokens_processed", mine.tokens_processed(32, 200, True)) == 231, "with the cache (§2.2)"
    assert answer_int("tokens_processed", mine.tokens_processed(32, 200, False)) == 26_300, "without the cache (§2.2)"
    # and off the lecture's numbers: the closed forms of §2.2 (a table of the two answers fails);
    # without the cache, step i recomputes prompt_len + i tokens, an arithmetic series
    want = prompt_len + n_new - 1 if use_cache else n_new * prompt_len + n_new * (n_new - 1) // 2
    got = answer_int("tokens_processed", mine.tokens_processed(prompt_len, n_new, use_cache))
    assert got == want, f"tokens_processed({prompt_len}, {n_new}, use_cache={use_cache}): expected {want}, got {got}"
