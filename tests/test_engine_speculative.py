"""Speculative decoding in the engine: greedy tokens equal the
target's alone whatever the draft and the schedule (§6.5), rejection sampling keeps the
target's distribution (a chi-square bound), and a step is priced as the verify forward plus
the draft's steps."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab import hw_model
from servelab.engine import Engine, Request, SpeculativeScheduler, serve
from servelab.engine.speculative import LLAMA32_1B
from servelab.tiny_llm import GREEDY, TINY, Temperature, TinyLLM, TopP
from servelab.tiny_llm.sampling import softmax
from servelab.tiny_llm.speculative import perturbed_draft, speculative_step_cost
from engine_strategies import MODEL, alone, blocks_needed, need, request_mixes
from test_speculative import SMALL_VOCAB, _chi_square_critical

DRAFTS = {
    "perfect": MODEL,
    "close": perturbed_draft(MODEL, 0.05, seed=1),
    "useless": TinyLLM(dataclasses.replace(TINY, seed=7)),  # unrelated weights: another seed
    "smaller": TinyLLM(dataclasses.replace(TINY, name="draft", n_layers=1, d_model=32,
                                           n_heads=2, n_kv_heads=1, d_ff=64)),
}


@settings(max_examples=30)
@given(requests=request_mixes(max_requests=4), k=st.integers(0, 5),
       draft=st.sampled_from(sorted(DRAFTS)), data=st.data())
def test_greedy_tokens_equal_the_target_alone_whatever_the_draft(requests, k, draft, data):
    """Greedy (and top-p, which gets no guesses) requests get exactly ``generate``'s tokens,
    under any pool, budget, chunking and prefix caching; the engine's books add up."""
    bs = data.draw(st.sampled_from([1, 2, 4, 8]), label="block_size")
    chunked = data.draw(st.booleans(), label="chunked")
    extra = data.draw(st.integers(0, 16), label="extra blocks")
    longest = max(need(r) for r in requests)
    eng = dict(num_blocks=max(blocks_needed(r, bs) for r in requests) + extra, block_size=bs,
               chunked_prefill=chunked, prefix_caching=data.draw(st.booleans(), label="caching"),
               max_num_seqs=data.draw(st.integers(1, 4), label="seqs"),
               max_num_batched_tokens=(data.draw(st.integers(1, 32), label="budget") if chunked
                                       else longest + data.draw(st.integers(0, 16), label="budget")),
               model=MODEL)
    res = serve(requests, scheduler=SpeculativeScheduler(DRAFTS[draft], k), **eng)
    for r, req in zip(res.requests, requests):
        assert r.status == "finished"
        if not isinstance(req.sampler, Temperature):
            assert r.tokens == alone(req), (r.request_id, req)
        assert len(r.tokens) == req.max_new_tokens
    computed = {r.request_id: 0 for r in res.requests}
    for step in res.steps:
        assert step.num_tokens <= eng["max_num_batched_tokens"]
        assert len(step.proposed) == len(step.accepted) == (len(step.batch) if step.proposed else 0)
        for i, (rid, n, ctx) in enumerate(step.batch):
            g, kept = (step.proposed[i], step.accepted[i]) if step.proposed else (0, 0)
            assert 0 <= kept <= g <= k and g < n
            assert ctx == computed[rid] or step.preempted or rid in step.admitted
            computed[rid] = ctx + n - g + kept  # rejected guesses leave no KV behind
    if k == 0:
        assert all(not s.proposed for s in res.steps)


def test_a_perfect_draft_keeps_every_guess_a_useless_one_almost_none():
    prompt = list(b"speculative decoding")
    for name, lo, hi in (("perfect", 1.0, 1.0), ("useless", 0.0, 0.15)):
        res = serve([Request(prompt, 30)], num_blocks=32, block_size=4, model=MODEL,
                    scheduler=SpeculativeScheduler(DRAFTS[name], 4))
        kept = sum(sum(s.accepted) for s in res.steps)
        proposed = sum(sum(s.proposed) for s in res.steps)
        assert lo <= kept / proposed <= hi, name
        assert res.requests[0].tokens == alone(Request(prompt, 30))


def test_speculation_takes_only_the_budget_and_blocks_left():
    """Two decoders and 6 tokens of budget left: the first takes 1 + 5 guesses, the second 1 +
    1. A pool with no free block left: guesses only up to the end of the current block."""
    reqs = [Request(list(b"abcd"), 12), Request(list(b"efgh"), 12)]
    res = serve(reqs, num_blocks=64, block_size=4, max_num_batched_tokens=8, chunked_prefill=True,
                model=MODEL, scheduler=SpeculativeScheduler(MODEL, 5))
    assert res.batch_log()[:2] == [[(0, 4, 0), (1, 4, 0)], [(0, 6, 4), (1, 2, 4)]]
    reqs = [Request(list(b"abcd"), 6), Request(list(b"efgh"), 6)]
    tight = serve(reqs, num_blocks=4, block_size=4, model=MODEL,
                  scheduler=SpeculativeScheduler(MODEL, 5))
    # each prompt fills a block; the slots of token 4 take the last two: 3 guesses fit each
    assert tight.batch_log()[1] == [(0, 4, 4), (1, 4, 4)]
    assert tight.tokens() == [alone(r) for r in reqs]


def test_a_step_is_priced_as_verify_plus_draft_steps():
    res = serve([Request(list(b"hello world"), 8)], num_blocks=32, block_size=4, model=MODEL,
                scheduler=SpeculativeScheduler(MODEL, 3, draft_spec=LLAMA32_1B))
    step = res.steps[1]
    (rid, n, ctx), = step.batch
    assert (n, ctx) == (4, 11)
    want = speculative_step_cost(hw_model.LLAMA3_8B, LLAMA32_1B, hw_model.H100, 3, 11)
    assert step.cost_s == pytest.approx(want, rel=1e-12)
    # and a plain step is the plain price
    assert res.steps[0].cost_s == hw_model.step_cost(hw_model.LLAMA3_8B, hw_model.H100,
                                                     [(11, 0)]).time_s


def test_k_zero_and_top_p_are_the_plain_engine():
    reqs = [Request(list(b"one"), 6, Temperature(0.9, 3)), Request(list(b"two!"), 5, TopP(0.9, 1.0, 2)),
            Request(list(b"three"), 7, GREEDY, 1)]
    plain = serve(reqs, num_blocks=32, block_size=4, model=MODEL)
    spec0 = serve(reqs, num_blocks=32, block_size=4, model=MODEL,
                  scheduler=SpeculativeScheduler(DRAFTS["close"], 0))
    assert spec0.batch_log() == plain.batch_log() and spec0.tokens() == plain.tokens()
    assert [s.cost_s for s in spec0.steps] == [s.cost_s for s in plain.steps]
    spec = serve(reqs, num_blocks=32, block_size=4, model=MODEL,
                 scheduler=SpeculativeScheduler(DRAFTS["close"], 3))
    assert spec.requests[1].tokens == plain.requests[1].tokens  # top-p: never guessed for
    assert all(n == 1 for s in spec.steps for rid, n, c in s.batch if rid == 1 and c)


def test_sampling_is_reproducible_and_depends_on_the_seed():
    def run(seed):
        return serve([Request(list(b"hello"), 20, Temperature(1.0, seed))], num_blocks=32,
                     block_size=4, model=MODEL,
                     scheduler=SpeculativeScheduler(DRAFTS["close"], 3)).requests[0].tokens
    assert run(4) == run(4) and run(4) != run(5)


def test_rejection_sampling_in_the_engine_keeps_the_target_distribution():
    """2,000 requests in one engine, the same prompt, samplers seeded 0..1999, k = 2 with a
    draft of other weights (guesses often rejected: the residual draw matters). The 2nd and 3rd
    output tokens, jointly, against the exact target distribution: the chi-square statistic
    stays below its 0.999 quantile (fixed seeds, so the statistic itself is fixed)."""
    target = TinyLLM(SMALL_VOCAB)
    draft = TinyLLM(dataclasses.replace(SMALL_VOCAB, seed=11))
    prompt, temperature, V, n = [1, 2], 1.0, SMALL_VOCAB.vocab_size, 2000
    exact = np.zeros((V, V))
    p1 = softmax(target.forward(prompt), temperature)
    for t1 in range(V):
        p2 = softmax(target.forward(prompt + [t1]), temperature)
        for t2 in range(V):
            exact[t2] += p1[t1] * p2[t2] * softmax(target.forward(prompt + [t1, t2]), temperature)
    engine = Engine(SMALL_VOCAB, model=target, num_blocks=2 * n, block_size=4, max_num_seqs=n,
                    max_num_batched_tokens=4 * n, scheduler=SpeculativeScheduler(draft, 2))
    for seed in range(n):
        engine.add_request(prompt, 4, Temperature(temperature, seed))
    res = engine.run()
    counts = np.zeros((V, V))
    for r in res.requests:
        counts[r.tokens[1], r.tokens[2]] += 1
    decode = res.steps[1]
    assert all(n == 3 for _, n, _ in decode.batch)  # every request guessed twice
    assert decode.proposed == (2,) * n
    assert sum(a < 2 for a in decode.accepted) > n // 4, "the test must exercise the residual draw"
    expected = exact.ravel() * n
    assert expected.min() >= 5
    stat = float(((counts.ravel() - expected) ** 2 / expected).sum())
    assert stat < _chi_square_critical(V * V - 1), f"chi-square {stat:.1f}"


@pytest.mark.parametrize("kwargs,error,message", [
    (dict(draft="model"), TypeError, "draft must be a TinyLLM"),
    (dict(k=-1), ValueError, "k .draft tokens per step. must be a non-negative integer"),
    (dict(k=1.5), TypeError, "k .draft tokens per step. must be an integer"),
    (dict(draft_spec=TINY), TypeError, "draft_spec must be a hw_model.ModelSpec"),
    (dict(inner=object()), TypeError, "inner must have a schedule.state. method"),
])
def test_bad_arguments_are_named(kwargs, error, message):
    with pytest.raises(error, match=message):
        SpeculativeScheduler(**(dict(draft=MODEL, k=2) | kwargs))
