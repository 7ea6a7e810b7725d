"""Prefix caching in the simulator: the same batches, hits and clock as the engine
on random workloads with shared prefixes, and what a shared system prompt buys.

The engine gets real token lists built the way the simulator reads ``SharedPrefixes``: request
``i`` starts with the first ``length[i]`` tokens of its parent (prompt, then the output that
``tiny_llm.generate`` gives the parent alone: §6.5 makes it the engine's output too), followed
by its own tokens. Its first own token is ``128 + i`` and the others are below 128, so two
requests the simulator calls different really differ where they part: system-prompt children
attach to a root below its prompt's end, turns extend a whole earlier turn, so a generated token
never sits where two requests part.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from engine_strategies import MODEL, alone
from servelab import serving_core as sc
from servelab.engine import Request, serve
from servelab.hw_model import H100, LLAMA3_8B
from servelab.workload import Requests, SharedPrefixes, chat_sessions


@st.composite
def shared_cases(draw):
    """Up to 7 requests: roots, system-prompt children of a root, next turns of any request."""
    n = draw(st.integers(1, 7))
    steps = sorted(draw(st.lists(st.integers(0, 5), min_size=n, max_size=n)))
    prompts: list[list[int]] = []
    full: list[list[int]] = []  # prompt + the output generate gives it alone
    parent, length, reqs = [], [], []
    for i in range(n):
        kind = draw(st.sampled_from(["root", "system", "turn"])) if i else "root"
        roots = [j for j in range(i) if parent[j] < 0 and len(prompts[j]) > 1]
        if kind == "system" and roots:
            j = draw(st.sampled_from(roots))
            k = draw(st.integers(0, len(prompts[j]) - 1))  # below the root's prompt end
        elif kind == "turn":
            j = draw(st.integers(0, i - 1))
            k = len(full[j])
        else:
            j, k = -1, 0
        own = [128 + i] + draw(st.lists(st.integers(0, 127), min_size=0, max_size=8))
        prompt = (full[j][:k] if j >= 0 else []) + own
        m = draw(st.integers(1, 5 if i % 2 else 12))  # some decode long: they need blocks
        if len(prompt) + m - 1 > MODEL.config.max_len:  # pragma: no cover - lengths stay small
            prompt, j, k = own, -1, 0
        r = Request(prompt, m, arrival_step=steps[i])
        prompts.append(prompt)
        full.append(prompt + alone(r))
        parent.append(j)
        length.append(k if j >= 0 else 0)
        reqs.append(r)
    bs = draw(st.sampled_from([1, 2, 4]))
    blocks = [-(-(len(r.prompt) + r.max_new_tokens - 1) // bs) for r in reqs]
    tight = st.integers(max(blocks), max(blocks) + 2)  # decoders preempt the newest
    eng = dict(num_blocks=draw(st.one_of(tight, st.integers(max(blocks), sum(blocks) + 4))),
               block_size=bs, max_num_seqs=draw(st.integers(1, 5)),
               max_num_batched_tokens=draw(st.one_of(st.integers(2, 24), st.just(256))),
               chunked_prefill=draw(st.booleans()))
    return reqs, SharedPrefixes(parent, length), eng


def assert_engine_parity(reqs: list[Request], sp: SharedPrefixes, eng: dict) -> sc.SimResult:
    """``eng`` may give a host tier (``host_blocks``, ``host_policy``; §8 milestone 4b) too."""
    res = serve(reqs, prefix_caching=True, model=MODEL, **eng)
    workload = Requests([r.arrival_s for r in res.requests], [len(r.prompt) for r in reqs],
                        [r.max_new_tokens for r in reqs])
    sim = sc.run_continuous_batching(workload, LLAMA3_8B, H100, trace=True, batch_log=True,
                                     prefix_caching=True, shared_prefixes=sp, **eng)
    busy = [s for s in res.steps if s.batch]  # idle engine steps cost 0 and log []
    assert sim.batch_log.to_list() == [list(s.batch) for s in busy]
    assert sim.trace.step_s.tolist() == [s.cost_s for s in busy]
    assert sim.trace.kv_blocks.tolist() == [s.blocks_used for s in busy]
    assert sim.cached_tokens.tolist() == [r.num_cached_tokens for r in res.requests]
    assert sim.computed_tokens.tolist() == [r.num_computed_tokens for r in res.requests]
    assert (sim.prefix_hits, sim.prefix_lookups) == (res.stats["num_hits"], res.stats["num_lookups"])
    assert sim.host_hits == res.stats["num_host_hits"]
    assert np.array_equal(sim.finish_s, [r.finish_s for r in res.requests], equal_nan=True)
    return sim


@settings(max_examples=25)
@given(case=shared_cases(), host_blocks=st.integers(1, 6), policy=st.sampled_from(["lru", "hits"]))
def test_same_batches_and_host_hits_as_the_engine_with_a_host_tier(case, host_blocks, policy):
    reqs, sp, eng = case
    sim = assert_engine_parity(reqs, sp, dict(eng, host_blocks=host_blocks, host_policy=policy))
    event(f"host hits: {sim.host_hits > 0}")


@settings(max_examples=40)
@given(case=shared_cases())
def test_same_batches_and_hits_as_the_engine(case):
    reqs, sp, eng = case
    sim = assert_engine_parity(reqs, sp, eng)
    event(f"hits: {sim.prefix_hits > 0}")
    event(f"preempted: {int(sim.n_preemptions.sum()) > 0}")


def test_a_preempted_chunked_prefill_hits_only_what_it_computed():
    # r1's 24-token prompt is prefilled in chunks of at most 5; r0's next block preempts r1
    # after its first chunk; back after r0 ends, r1 hits its one computed block (the engine's
    # test_engine_prefix has the story): a simulator that registered keys at allocation
    # would skip 16 more tokens here
    r0 = Request([7, 8, 9], 8)
    r1 = Request(list(range(60, 84)), 1, arrival_step=1)
    sim = assert_engine_parity([r0, r1], SharedPrefixes.none(2),
                               dict(num_blocks=7, block_size=4, chunked_prefill=True,
                                    max_num_batched_tokens=5, max_num_seqs=2))
    assert sim.n_preemptions.tolist() == [0, 1] and sim.cached_tokens.tolist() == [0, 4]


def test_a_turn_reuses_the_whole_previous_turn_by_hand():
    # turn 1 (8 + 3 tokens) then turn 2 extending it: blocks of 4 hold turn 1's prompt and the
    # first generated tokens it computed (10 of its 11 tokens: the last is never fed back)
    t1 = Request([128] + list(range(7)), 3)
    full = list(t1.prompt) + alone(t1)
    t2 = Request(full + [129, 5], 2, arrival_step=4)
    sim = assert_engine_parity([t1, t2], SharedPrefixes([-1, 0], [0, len(full)]),
                               dict(num_blocks=16, block_size=4))
    assert sim.cached_tokens.tolist() == [0, 8]  # blocks [0, 4) and [4, 8); [8, 12) never filled


def test_a_shared_system_prompt_buys_ttft_and_compute():
    reqs, sp = chat_sessions(n=60, rate=2.0, seed=3, system_len=1024, n_system_prompts=2)
    off = sc.run_continuous_batching(reqs, LLAMA3_8B, H100, shared_prefixes=sp)
    on = sc.run_continuous_batching(reqs, LLAMA3_8B, H100, prefix_caching=True, shared_prefixes=sp)
    assert off.cached_tokens is None and on.label == "continuous prefix"
    # two system prompts: all but their first users hit every full block of it
    hit_blocks = on.cached_tokens // 16
    assert int((hit_blocks >= 1024 // 16).sum()) >= len(reqs) - 2
    assert int(on.computed_tokens.sum()) + int(on.cached_tokens.sum()) == \
        int(reqs.prompt_len.sum() + reqs.output_len.sum() - len(reqs))
    ttft = lambda r: np.median(r.first_token_s - reqs.arrival_s)  # noqa: E731
    assert ttft(on) < ttft(off)


def test_chat_sessions_shape():
    reqs, sp = chat_sessions(n=50, rate=1.0, seed=0, system_len=256, turns_mean=3.0,
                             shared_fraction=0.5)
    i = np.arange(len(sp))
    assert ((sp.parent >= -1) & (sp.parent < i)).all()
    turn = sp.length > 256  # next turns share the whole previous turn
    p = sp.parent[turn]
    assert (sp.length[turn] == reqs.prompt_len[p] + reqs.output_len[p]).all()
    assert (reqs.prompt_len[turn] > sp.length[turn]).all()
    assert ((sp.length == 0) == (sp.parent == -1)).all()
    again = chat_sessions(n=50, rate=1.0, seed=0, system_len=256, turns_mean=3.0, shared_fraction=0.5)
    assert np.array_equal(again[0].prompt_len, reqs.prompt_len) and np.array_equal(again[1].parent, sp.parent)
    _, none = chat_sessions(n=20, rate=1.0, seed=0, shared_fraction=0.0)
    assert none.shared_tokens == 0  # single turns, private system prompts


@pytest.mark.parametrize("kwargs, exc, message", [
    (dict(shared_fraction=1.5), ValueError, "shared_fraction must be a finite number >= 0.0 and <= 1.0"),
    (dict(turns_mean=0.5), ValueError, "turns_mean must be a finite number >= 1.0"),
    (dict(system_len=-1), ValueError, "system_len must be an integer in [0, "),
    (dict(n_system_prompts=0), ValueError, "n_system_prompts must be an integer in [1, 134217728], got 0"),
])
def test_chat_sessions_errors_name_the_argument(kwargs, exc, message):
    with pytest.raises(exc) as info:
        chat_sessions(n=3, **kwargs)
    assert str(info.value).startswith(message)


def test_bad_shared_prefixes_name_the_value():
    reqs = Requests([0.0, 0.0], [4, 4], [2, 2])
    for sp, message in [
        (SharedPrefixes([-1, 1], [0, 2]), "prefix_parent[1] must be -1 or an earlier request's index"),
        (SharedPrefixes([-1, 0], [0, 5]), "prefix_len[1] must be in [0, 4]"),
    ]:
        with pytest.raises(ValueError) as info:
            sc.run_continuous_batching(reqs, LLAMA3_8B, H100, prefix_caching=True, shared_prefixes=sp)
        assert str(info.value).startswith(message)
    for caching in (False, True):  # checked even when unused
        with pytest.raises(ValueError, match=r"shared_prefixes must have one entry per request \(n_requests=2\), got 1"):
            sc.run_continuous_batching(reqs, LLAMA3_8B, H100, prefix_caching=caching,
                                       shared_prefixes=SharedPrefixes([-1], [0]))
    with pytest.raises(TypeError, match="shared_prefixes must be None or"):
        sc.run_continuous_batching(reqs, LLAMA3_8B, H100, prefix_caching=True, shared_prefixes=[0, 1])
