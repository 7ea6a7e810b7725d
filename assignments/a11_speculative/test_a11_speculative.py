"""Tests of assignment 11 (speculative decoding), against servelab.tiny_llm.speculative: your
verification on random rows against the reference rule, the real model's greedy tokens with
your rule plugged in (§6.5), and the closed form."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import spec_verify as mine
from assignment_strategies import answer_int, assert_close_float, prompts
from servelab.tiny_llm import TINY, TinyLLM, generate, model_for
from servelab.tiny_llm import speculative as ref


@st.composite
def greedy_rows(draw):
    """Rows whose argmaxes the first ``m`` guesses match, then one guess that does not."""
    k = draw(st.integers(0, 6))
    vocab = draw(st.sampled_from([2, 5, 256]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    logits = rng.standard_normal((k + 1, vocab)).astype(np.float32)
    m = draw(st.integers(0, k))
    guesses = [int(np.argmax(logits[i])) for i in range(m)]
    if m < k:
        guesses.append(int((np.argmax(logits[m]) + draw(st.integers(1, vocab - 1))) % vocab))
        guesses += [int(g) for g in rng.integers(0, vocab, k - m - 1)]
    return guesses, logits


def _pair(got, what: str) -> tuple:
    assert isinstance(got, (tuple, list)) and len(got) == 2, f"{what}: return (kept, next_token), got {got!r:.200}"
    return answer_int(f"{what}: kept", got[0]), answer_int(f"{what}: next_token", got[1])


@given(greedy_rows())
def test_verify_greedy_matches_the_rule(case):
    guesses, logits = case
    want = ref.accept_greedy(guesses, logits)
    got = _pair(mine.verify_greedy(guesses, logits), "verify_greedy")
    assert got == want, f"guesses {guesses}: expected (kept, next) = {want}, got {got}"


DRAFTS = [model_for(TINY), ref.perturbed_draft(model_for(TINY), 0.1, seed=3),
          TinyLLM(dataclasses.replace(TINY, seed=9))]


@settings(max_examples=10)  # each example is a whole generation over the pipe
@given(prompts(1, 16), st.integers(1, 16),
       st.integers(1, 5), st.sampled_from([0, 1, 2]))
def test_greedy_speculation_gives_the_target_tokens(prompt, n_new, k, draft):
    def verify(guesses, logits, *_):
        return _pair(mine.verify_greedy(list(guesses), logits), "verify_greedy")
    run = ref.speculate(prompt, n_new, k, draft=DRAFTS[draft], verify=verify)
    want = generate(prompt, n_new).tokens
    assert run.tokens == want, f"prompt {prompt}, k={k}: tokens {run.tokens}, the model alone {want}"


@st.composite
def sampled_rows(draw):
    k = draw(st.integers(0, 5))
    vocab = draw(st.sampled_from([2, 3, 8]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    p = rng.dirichlet(np.ones(vocab), k + 1)
    q = rng.dirichlet(np.ones(vocab), k)
    if k and draw(st.booleans()):
        q[0] = p[0]  # a perfect guess distribution: the residual is all zero
    guesses = [int(ref.draw_token(q[i], rng.random())) for i in range(k)]
    return guesses, p, q, rng.random(k), rng.random(k + 1)


@given(sampled_rows())
def test_verify_sampled_matches_the_rule(case):
    guesses, p, q, u_accept, u_draw = case
    want = ref.accept_sampled(guesses, p, q, u_accept, u_draw)
    got = _pair(mine.verify_sampled(guesses, p, q, u_accept, u_draw), "verify_sampled")
    assert got == want, f"guesses {guesses}, u_accept {u_accept.round(3).tolist()}: " \
                        f"expected (kept, next) = {want}, got {got}"


@given(st.floats(0.0, 1.0), st.integers(0, 16))
def test_expected_tokens_per_step(a, k):
    want = ref.expected_tokens_per_step(a, k)
    assert_close_float(f"expected_tokens_per_step(a={a}, k={k})", want,
                       mine.expected_tokens_per_step(a, k), rel_tol=1e-9, abs_tol=1e-12)
