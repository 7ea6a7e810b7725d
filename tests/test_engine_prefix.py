"""Prefix caching (§3.5): a request sharing k full blocks of prompt with an earlier one computes
k blocks fewer, and still gets the tokens it gets alone."""

from __future__ import annotations

from hypothesis import event, given
from hypothesis import strategies as st

from servelab.engine import Request, serve
from servelab.tiny_llm import GREEDY, Temperature
from engine_strategies import MODEL, alone

tokens = st.integers(0, 255)


@st.composite
def shared_pairs(draw):
    bs = draw(st.sampled_from([1, 2, 4, 8]))
    k = draw(st.integers(1, 4))
    shared = draw(st.lists(tokens, min_size=k * bs, max_size=k * bs))
    tail_a = draw(st.lists(tokens, min_size=1, max_size=10))
    # B's block k must differ from A's, or it would be a hit too
    first_b = draw(tokens.filter(lambda t: t != tail_a[0]))
    tail_b = [first_b] + draw(st.lists(tokens, min_size=0, max_size=10))
    chunked = draw(st.booleans())
    a = Request(shared + tail_a, draw(st.integers(1, 6)), GREEDY, 0)
    # B arrives once A's prompt is computed (chunks of at most 16 tokens with chunked prefill)
    b = Request(shared + tail_b, draw(st.integers(1, 6)), Temperature(1.0, draw(st.integers(0, 99))),
                draw(st.integers(len(a.prompt) // 16 + 1, 8)))
    return a, b, bs, k, chunked


@given(shared_pairs())
def test_sharing_k_full_blocks_computes_k_blocks_fewer(pair):
    a, b, bs, k, chunked = pair
    runs = {}
    for caching in (False, True):
        res = serve([a, b], num_blocks=64, block_size=bs, prefix_caching=caching,
                    chunked_prefill=chunked, max_num_batched_tokens=16 if chunked else 64,
                    model=MODEL)
        assert [r.tokens for r in res.requests] == [alone(a), alone(b)]
        b_entries = [(n, ctx) for step in res.steps for rid, n, ctx in step.batch if rid == 1]
        prefill_b = sum(n for n, ctx in b_entries if ctx < len(b.prompt))
        runs[caching] = (prefill_b, b_entries[0][1], res.requests[1].num_cached_tokens, res.stats)
    assert runs[False][0] == len(b.prompt)
    assert runs[True][0] == len(b.prompt) - k * bs  # k blocks fewer
    assert runs[True][1] == k * bs  # the first chunk starts after the cached blocks
    assert runs[True][2] == k * bs and runs[False][2] == 0
    assert runs[True][3]["num_hits"] == k


def test_blocks_a_preempted_prefill_never_computed_are_no_hits():
    # R1's 24-token prompt is prefilled in chunks; R0 needs a block while R1 has computed only
    # its first chunk, so R1 (the newest) is preempted. Only R1's first block was registered
    # (keys are registered when computed, rule 4), so when R1 comes back (after R0 ends) it
    # hits that one block and recomputes the other five.
    r0 = Request([7, 8, 9], 8)
    r1 = Request(list(range(60, 84)), 1, Temperature(1.0, 3), arrival_step=1)
    res = serve([r0, r1], num_blocks=7, block_size=4, prefix_caching=True, chunked_prefill=True,
                max_num_batched_tokens=5, max_num_seqs=2, model=MODEL)
    log = res.batch_log()
    assert log[1] == [(0, 1, 3), (1, 4, 0)] and res.steps[2].preempted == (1,)
    assert res.stats["num_hits"] == 1
    assert res.requests[1].num_cached_tokens == 4
    assert res.requests[1].num_computed_tokens == 4 + 20  # first chunk, then all but block 0
    assert [r.tokens for r in res.requests] == [alone(r0), alone(r1)]


def test_a_system_prompt_shared_by_many_requests_is_computed_once():
    system = list(range(100, 164))  # 64 tokens = 4 blocks of 16
    requests = [Request(system + [i, i + 1, i + 2], 5, Temperature(0.8, i), arrival_step=i)
                for i in range(6)]
    res = serve(requests, num_blocks=64, block_size=16, prefix_caching=True, model=MODEL)
    assert [r.num_cached_tokens for r in res.requests] == [0] + [64] * 5
    assert [r.tokens for r in res.requests] == [alone(r) for r in requests]


def test_requests_arriving_together_share_the_prefix_computed_in_the_same_step():
    # rule 4: A's blocks are registered as soon as A's prompt is scheduled; B, admitted after A
    # in the same step, reads them in the same forward (A writes each layer before B reads it)
    shared = list(range(30, 42))  # 3 blocks of 4
    a, b = Request(shared + [1], 3), Request(shared + [2, 3], 3, Temperature(1.0, 1))
    res = serve([a, b], num_blocks=32, block_size=4, prefix_caching=True, model=MODEL)
    assert res.batch_log()[0] == [(0, 13, 0), (1, 2, 12)]
    assert [r.tokens for r in res.requests] == [alone(a), alone(b)]


@st.composite
def crowded_shared_setups(draw):
    """Early requests that decode for long, then later ones with long shared prompts prefilled
    in small chunks, in a pool barely big enough: the decoders' new blocks preempt the newest
    request in the middle of its chunked prefill (rule 3), whose computed blocks stay cached."""
    bs = draw(st.sampled_from([2, 4]))
    base = draw(st.lists(tokens, min_size=3 * bs, max_size=6 * bs))
    requests = []
    for i in range(draw(st.integers(1, 2))):  # decoders
        requests.append(Request(draw(st.lists(tokens, min_size=1, max_size=bs)),
                                draw(st.integers(bs + 1, 4 * bs)),
                                Temperature(1.0, draw(st.integers(0, 999))), 0))
    for i in range(draw(st.integers(1, 4))):  # prefillers sharing a prefix
        share = draw(st.integers(bs, len(base)))
        own = draw(st.lists(tokens, min_size=1, max_size=4))
        requests.append(Request(base[:share] + own, draw(st.integers(1, 6)),
                                Temperature(1.0, draw(st.integers(0, 999))),
                                draw(st.integers(1, 4))))
    most = max(-(-(len(r.prompt) + r.max_new_tokens - 1) // bs) for r in requests)
    eng = dict(num_blocks=most + draw(st.integers(0, 2)), block_size=bs, prefix_caching=True,
               chunked_prefill=True, max_num_batched_tokens=draw(st.integers(2, 6)),
               max_num_seqs=draw(st.integers(2, 5)), model=MODEL)
    return requests, eng


@given(crowded_shared_setups())
def test_crowded_shared_prefixes_with_chunks_and_preemption_keep_the_tokens(setup):
    requests, eng = setup
    res = serve(requests, **eng)
    assert [r.tokens for r in res.requests] == [alone(r) for r in requests]
    event(f"preempted: {any(s.preempted for s in res.steps)}")
    # every hit is skipped: a block is registered only once computed
    skipped = sum(r.num_cached_tokens for r in res.requests)
    assert skipped == res.stats["num_hits"] * eng["block_size"]
    event(f"hits: {res.stats['num_hits'] > 0}")
