"""Speculative decoding on tiny_llm (§8, milestone 4a): greedy tokens equal the target's alone
whatever the draft (§6.5), sampling keeps the target's distribution (a chi-square bound), the
closed form predicts tokens per step, and the paper GPU prices a step."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab import hw_model
from servelab.tiny_llm import TINY, ModelConfig, TinyLLM, generate
from servelab.tiny_llm.sampling import softmax
from servelab.tiny_llm.speculative import (expected_tokens_per_step, perturbed_draft, speculate,
                                           speculative_step_cost)
from assignment_strategies import prompts

TARGET = TinyLLM(TINY)
DRAFTS = {
    "perfect": TARGET,
    "close": perturbed_draft(TARGET, 0.05, seed=1),
    "far": perturbed_draft(TARGET, 0.3, seed=2),
    "useless": TinyLLM(dataclasses.replace(TINY, seed=7)),  # unrelated weights
    "smaller": TinyLLM(dataclasses.replace(TINY, name="draft", n_layers=1, d_model=32,
                                           n_heads=2, n_kv_heads=1, d_ff=64)),
}


@given(prompt=prompts(1, 32), n_new=st.integers(1, 24), k=st.integers(0, 6),
       draft=st.sampled_from(sorted(DRAFTS)))
def test_greedy_tokens_equal_the_target_alone(prompt, n_new, k, draft):
    run = speculate(prompt, n_new, k, target=TARGET, draft=DRAFTS[draft])
    assert run.tokens == generate(prompt, n_new, model=TARGET).tokens
    # the bookkeeping adds up: the prefill's token, then each step's emitted tokens
    assert 1 + sum(s.emitted for s in run.steps) == len(run.tokens) == n_new
    assert all(s.emitted == s.accepted + 1 and s.accepted <= s.proposed <= k for s in run.steps)
    assert run.draft_forwards == sum(s.proposed for s in run.steps)


def test_a_perfect_draft_keeps_every_guess_and_a_useless_one_none():
    prompt = list(b"speculative decoding")
    perfect = speculate(prompt, 25, 4, target=TARGET, draft=TARGET)
    assert perfect.acceptance_rate == 1.0
    assert [s.emitted for s in perfect.steps] == [5] * 4 + [4]  # the last step stops at 25
    useless = speculate(prompt, 25, 4, target=TARGET, draft=DRAFTS["useless"])
    assert useless.acceptance_rate < 0.1 and len(useless.steps) >= 20


def test_sampling_is_reproducible_from_its_seed():
    prompt = list(b"hello")
    a = speculate(prompt, 30, 3, target=TARGET, draft=DRAFTS["close"], temperature=1.0, seed=4)
    b = speculate(prompt, 30, 3, target=TARGET, draft=DRAFTS["close"], temperature=1.0, seed=4)
    c = speculate(prompt, 30, 3, target=TARGET, draft=DRAFTS["close"], temperature=1.0, seed=5)
    assert a.tokens == b.tokens and a.steps == b.steps
    assert a.tokens != c.tokens


# ---- sampling keeps the target's distribution --------------------------------------------

SMALL_VOCAB = ModelConfig(name="v4", vocab_size=4, d_model=16, n_layers=1, n_heads=2,
                          n_kv_heads=1, d_head=8, d_ff=32, max_len=16, seed=3)


def _chi_square_critical(dof: int, z: float = 3.09) -> float:
    """The 0.999 quantile of chi-square with ``dof`` degrees of freedom (Wilson-Hilferty)."""
    c = 2.0 / (9.0 * dof)
    return dof * (1.0 - c + z * math.sqrt(c)) ** 3


def test_rejection_sampling_keeps_the_target_distribution():
    """The 2nd and 3rd generated tokens, jointly, over 4,000 seeded runs (k = 2, a draft with
    other weights, so guesses are often rejected and the residual draw matters), against the
    exact target distribution enumerated over the first token. Bound: the chi-square statistic
    stays below its 0.999 quantile (fixed seeds, so the statistic itself is fixed)."""
    target = TinyLLM(SMALL_VOCAB)
    draft = TinyLLM(dataclasses.replace(SMALL_VOCAB, seed=11))
    prompt, temperature, V = [1, 2], 1.0, SMALL_VOCAB.vocab_size
    exact = np.zeros((V, V))
    p1 = softmax(target.forward(prompt), temperature)
    for t1 in range(V):
        p2 = softmax(target.forward(prompt + [t1]), temperature)
        for t2 in range(V):
            p3 = softmax(target.forward(prompt + [t1, t2]), temperature)
            exact[t2] += p1[t1] * p2[t2] * p3
    n = 4000
    counts = np.zeros((V, V))
    rejected = 0
    for seed in range(n):
        run = speculate(prompt, 3, 2, target=target, draft=draft, temperature=temperature,
                        seed=seed)
        counts[run.tokens[1], run.tokens[2]] += 1
        rejected += run.steps[0].accepted < run.steps[0].proposed
    assert rejected > n // 4, "the test must exercise the residual draw"
    expected = exact.ravel() * n
    stat = float(((counts.ravel() - expected) ** 2 / expected).sum())
    assert expected.min() >= 5
    assert stat < _chi_square_critical(V * V - 1), f"chi-square {stat:.1f}"


# ---- the closed form and the price ------------------------------------------------------

def test_expected_tokens_per_step_closed_form():
    assert expected_tokens_per_step(0.0, 4) == 1.0
    assert expected_tokens_per_step(1.0, 4) == 5.0
    for a in (0.2, 0.5, 0.9):
        for k in (1, 3, 8):  # the mean of 1 + leading successes, summed term by term
            assert math.isclose(expected_tokens_per_step(a, k), sum(a ** i for i in range(k + 1)))
    with pytest.raises(ValueError, match="a .the acceptance rate. must be a number in"):
        expected_tokens_per_step(1.5, 2)
    with pytest.raises(ValueError, match="k .draft tokens per step. must be"):
        expected_tokens_per_step(0.5, -1)


def test_measured_tokens_per_step_follow_the_closed_form():
    rng = np.random.default_rng(0)
    for k in (2, 5):
        kept = judged = emitted = steps = 0
        for seed in range(12):
            run = speculate(list(rng.integers(0, 256, 6)), 61, k, target=TARGET,
                            draft=DRAFTS["close"], temperature=1.0, seed=seed)
            full = [s for s in run.steps if s.proposed == k]  # the last steps may guess less
            kept += sum(s.accepted for s in full)
            judged += sum(s.accepted + (s.accepted < s.proposed) for s in full)
            emitted += sum(s.emitted for s in full)
            steps += len(full)
        a = kept / judged
        assert 0.5 < a < 1.0
        assert math.isclose(emitted / steps, expected_tokens_per_step(a, k), rel_tol=0.08)


def test_a_speculative_step_on_the_paper_gpu():
    spec, gpu = hw_model.LLAMA3_8B, hw_model.H100
    decode = hw_model.step_cost(spec, gpu, [(1, 1024)]).time_s
    assert speculative_step_cost(spec, spec, gpu, 0, 1024) == decode
    small = dataclasses.replace(spec, name="draft-1B", n_layers=16, d_model=2048, n_heads=32,
                                n_kv_heads=8, d_head=64, d_ff=8192)
    for k in (1, 4, 8):
        cost = speculative_step_cost(spec, small, gpu, k, 1024)
        verify = hw_model.step_cost(spec, gpu, [(k + 1, 1024)]).time_s
        assert verify < 1.1 * decode  # k + 1 tokens still memory-bound: about one step
        assert cost > verify
        # at a = 0.8 the step pays for itself
        assert expected_tokens_per_step(0.8, k) * decode / cost > 1.0


@pytest.mark.parametrize("kwargs,message", [
    (dict(k=-1), "k .draft tokens per step. must be a non-negative integer"),
    (dict(k=2, temperature=0.0), "temperature must be None .greedy. or a positive"),
    (dict(k=2, max_new_tokens=0), "max_new_tokens must be a positive integer"),
    (dict(k=2, max_new_tokens=300), "more than the target's max_len 256"),
    (dict(k=2, draft=TinyLLM(SMALL_VOCAB)), "draft has vocab_size 4, the target 256"),
])
def test_bad_arguments_are_refused(kwargs, message):
    args = dict(prompt=[1, 2, 3], max_new_tokens=5, target=TARGET, draft=TARGET) | kwargs
    with pytest.raises(ValueError, match=message):
        speculate(**args)


@settings(max_examples=5)
@given(st.floats(-1.0, -1e-9) | st.just(float("nan")) | st.just(float("inf")))
def test_perturbed_draft_refuses_bad_noise(noise):
    with pytest.raises(ValueError, match="noise must be a non-negative finite number"):
        perturbed_draft(TARGET, noise)


def test_a_plugged_in_rule_is_used_and_its_junk_refused():
    prompt = list(b"plug in")

    def never_keep(guesses, logits, *_):  # plain decoding: same tokens, nothing kept
        return 0, int(np.argmax(logits[0]))
    run = speculate(prompt, 10, 3, target=TARGET, draft=TARGET, verify=never_keep)
    assert run.tokens == generate(prompt, 10, model=TARGET).tokens
    assert run.acceptance_rate == 0.0
    for junk in ((5, 1), (0, 256), (-1, 0), ("0", 1), (0, 1.5)):
        with pytest.raises(ValueError, match="verify must return .kept in .0, 3., a token id"):
            speculate(prompt, 10, 3, target=TARGET, draft=TARGET, verify=lambda *a, j=junk: j)
