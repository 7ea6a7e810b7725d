"""Tests of assignment 10 (prefix caching and chunked prefill, milestone 3). Your
``PrefixBlocks`` must keep the same blocks as servelab's allocator with prefix caching; your
``schedule`` drives servelab's engine (``assignments/scheduler_harness.py``) on the real tiny
model over it. Its tokens must equal one-at-a-time generation (§6.5), its batches the engine's
own (the oracle), and on a chat load with a shared system prompt it must serve tokens from the
cache and answer sooner on the paper clock (§3.5, §8)."""

from __future__ import annotations

from functools import lru_cache
from types import SimpleNamespace as NS

import numpy as np
import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

import prefix_blocks as blocks_mine
import prefix_scheduler as mine
from scheduler_harness import assert_same_steps, run_prefix
from servelab import tiny_llm
from servelab.blocks import BlockAllocator
from servelab.engine import Request, serve
from servelab.harness.calls import call_each, value
from servelab.tiny_llm import GREEDY, TINY, Temperature, TinyLLM
from servelab.workload import chat_sessions

MODEL = TinyLLM(TINY)  # built once: every engine below shares its weights

# ---- inputs ----------------------------------------------------------------------------------


@lru_cache(maxsize=None)
def _alone(prompt: tuple[int, ...], m: int, sampler) -> list[int]:
    return tiny_llm.generate(list(prompt), m, sampler, model=MODEL).tokens


def alone(r: Request) -> list[int]:
    """The request's tokens from ``tiny_llm.generate`` run by itself."""
    return list(_alone(tuple(r.prompt), r.max_new_tokens, r.sampler))


def need(r: Request) -> int:
    """KV slots a request fills at most: its prompt and every generated token but the last."""
    return len(r.prompt) + r.max_new_tokens - 1


@st.composite
def shared_prompts(draw, bs: int, earlier: list[list[int]]):
    """A prompt made of whole-block parts over a 4-token alphabet (so one block shows up after
    different prefixes, and prompts share heads), an earlier prompt repeated (whole blocks
    included: one token must stay to compute), or an earlier conversation's next turn."""
    kind = draw(st.sampled_from(["parts", "repeat", "turn"] if earlier else ["parts"]))
    if kind == "repeat":
        return list(draw(st.sampled_from(earlier)))
    head = draw(st.sampled_from(earlier)) if kind == "turn" else []
    parts = draw(st.lists(st.lists(st.integers(0, 3), min_size=bs, max_size=2 * bs), max_size=3))
    tail = draw(st.lists(st.integers(0, 255), min_size=0 if head or parts else 1, max_size=3))
    prompt = list(head) + [t for p in parts for t in p] + tail
    return prompt or [0]


samplers = st.one_of(st.just(GREEDY), st.builds(Temperature, st.just(0.8), st.integers(0, 2**31)))


@st.composite
def setups(draw, tight: bool = False):
    """1-6 requests with shared prefixes, arriving at steps 0-6, and engine settings that can
    serve each alone; ``tight``: barely enough blocks, so preemption and eviction are common."""
    bs = draw(st.sampled_from([1, 2, 4]))
    requests: list[Request] = []
    conversations: list[list[int]] = []  # each request's prompt and its answer, for next turns
    for _ in range(draw(st.integers(2 if tight else 1, 6))):
        prompt = draw(shared_prompts(bs, conversations))[:120]
        r = Request(prompt, draw(st.integers(1, 6)), draw(samplers), draw(st.integers(0, 6)))
        requests.append(r)
        conversations.append(list(r.prompt) + alone(r))
    most = max(-(-need(r) // bs) for r in requests)
    total = sum(-(-need(r) // bs) for r in requests)
    blocks = draw(st.integers(most, most + 2) if tight else st.integers(most, total + 4))
    chunked = draw(st.booleans())
    longest = max(need(r) for r in requests)
    budget = draw(st.integers(1, 24) | st.just(256)) if chunked \
        else longest + draw(st.sampled_from([0, 2, 8, 32]))
    eng = dict(num_blocks=blocks, block_size=bs, max_num_seqs=draw(st.integers(1, 5)),
               max_num_batched_tokens=budget, chunked_prefill=chunked, model=MODEL)
    return requests, eng


def describe(requests, eng) -> str:
    reqs = [(list(r.prompt), r.max_new_tokens, r.arrival_step) for r in requests]
    settings_ = {k: v for k, v in eng.items() if k != "model"}
    return f"requests (prompt, max_new_tokens, arrival_step) {reqs}, engine {settings_}"


def run_mine(requests, **eng):
    return run_prefix(mine.schedule, blocks_mine.PrefixBlocks, requests, **eng)


# ---- the allocator: the same blocks as servelab's ----------------------------------------------

SEQ_IDS = st.integers(0, 7)


def kind(exc: Exception) -> str:
    """An exception's class name. Under the autograder a student's own exception class comes
    back as ``StudentError("OutOfBlocks: ...")``; its name is the message's first word."""
    name = type(exc).__name__
    return str(exc).split(":", 1)[0] if name == "StudentError" else name


def outcome(fn, *args):
    """What a call did: ("ok", result) or ("error", exception class name)."""
    try:
        value = fn(*args)
        return ("ok", list(value) if isinstance(value, (list, tuple)) else value)
    except Exception as exc:
        return ("error", kind(exc))


def read(got):
    """One of ``call_each``'s outcomes as :func:`outcome` says it."""
    ok, result = got
    return ("ok", list(result) if isinstance(result, (list, tuple)) else result) if ok else ("error", kind(result))


class SameBlocksAsServelab(RuleBasedStateMachine):
    """After every operation, your allocator's free count, and the block table and cached count
    of every live sequence (and of one absent id), must be servelab's. Under the autograder,
    each operation and the reads of the state after it go to your code's process in one message
    (servelab.harness.calls)."""

    @initialize(num_blocks=st.integers(1, 14), block_size=st.integers(1, 3))
    def start(self, num_blocks, block_size):
        self.mine = blocks_mine.PrefixBlocks(num_blocks, block_size)
        self.ref = BlockAllocator(num_blocks, block_size, prefix_caching=True)
        self.tokens: dict[int, list[int]] = {}  # what each live sequence holds
        self.seen: list[list[int]] = []  # every prompt so far: freed blocks stay cached
        self.log = [f"PrefixBlocks({num_blocks}, {block_size})"]
        self.same_state(call_each(self.state_reads()))

    def state_ids(self):
        return [*self.tokens, next(i for i in range(9) if i not in self.tokens)]  # and one absent id

    def state_reads(self):
        return [(getattr, (self.mine, "num_free_blocks"))] + [
            (f, (s,)) for s in self.state_ids() for f in (self.mine.block_table, self.mine.num_cached_tokens)]

    def same_state(self, reads):
        after = f"after {' ; '.join(self.log)}"
        free, *got = reads
        assert value(free) == self.ref.num_free_blocks, f"num_free_blocks {after}"
        for s, table, cached in zip(self.state_ids(), got[::2], got[1::2]):
            assert read(table) == outcome(self.ref.block_table, s), f"block_table({s}) {after}"
            assert read(cached) == outcome(self.ref.num_cached_tokens, s), f"num_cached_tokens({s}) {after}"

    def both(self, name, mine_call, ref_call, *args, then=None):
        """The operation on both allocators (``then()`` when servelab's succeeds: what the
        sequences hold now), then the state after it; whether it succeeded."""
        self.log.append(f"{name}{args}")
        want = outcome(ref_call, *args)
        if want[0] == "ok" and then is not None:
            then()
        got, *reads = call_each([(mine_call, args)] + self.state_reads())
        assert read(got) == want, f"after {' ; '.join(self.log)}: expected {want}, got {read(got)}"
        self.same_state(reads)
        return want[0] == "ok"

    @rule(seq_id=SEQ_IDS, data=st.data())
    def allocate(self, seq_id, data):
        earlier = self.seen + [list(t) for t in self.tokens.values()]
        prompt = data.draw(shared_prompts(self.ref.block_size, earlier))[:40]

        def holds():
            self.tokens[seq_id] = list(prompt)
            self.seen.append(prompt)
        self.both("allocate", self.mine.allocate, lambda s, t: self.ref.allocate(s, t, num_computed=0), seq_id, prompt,
                  then=holds)

    @rule(seq_id=SEQ_IDS, data=st.data())
    def prefill(self, seq_id, data):
        """A prompt allocated and computed whole, as an engine step does."""
        self.allocate(seq_id, data)
        if seq_id in self.tokens:
            self.mark_computed(seq_id, 1.0)

    @rule(seq_id=SEQ_IDS, share=st.just(1.0) | st.floats(0, 1))
    def mark_computed(self, seq_id, share):
        c = int(share * len(self.tokens.get(seq_id, [])))
        self.both("mark_computed", self.mine.mark_computed, self.ref.mark_computed, seq_id, c)

    @rule(seq_id=SEQ_IDS, token=st.integers(0, 3))
    def append(self, seq_id, token):
        self.both("append", self.mine.append, lambda s, t: self.ref.append(s, t) and None, seq_id, token,
                  then=lambda: self.tokens[seq_id].append(token))

    @rule(seq_id=SEQ_IDS)
    def free(self, seq_id):
        self.both("free", self.mine.free, self.ref.free, seq_id, then=lambda: self.tokens.pop(seq_id))


TestSameBlocksAsServelab = SameBlocksAsServelab.TestCase
# one operation and the reads of the state after it per step (one round trip under the autograder)
TestSameBlocksAsServelab.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


# ---- the rules by hand -------------------------------------------------------------------------

def _computed(bs, nb, *prompts):
    """A PrefixBlocks whose sequences 0, 1, ... hold ``prompts``, all computed."""
    a = blocks_mine.PrefixBlocks(nb, bs)
    for i, p in enumerate(prompts):
        a.allocate(i, p)
        a.mark_computed(i, len(p))
    return a


def one_token_left():
    a = _computed(2, 8, [1, 2, 3, 4])
    a.free(0)
    a.allocate(1, [1, 2, 3, 4])
    return a.num_cached_tokens(1), 2


def key_names_its_parent():
    a = _computed(2, 8, [1, 2, 3, 4, 0], [5, 6, 7, 8, 0])
    a.allocate(2, [1, 2, 7, 8, 0])  # [7, 8] is cached, but after [5, 6]
    return a.num_cached_tokens(2), 2


def registered_only_when_computed():
    a = blocks_mine.PrefixBlocks(8, 2)
    a.allocate(0, [1, 2, 3, 4, 5])
    a.allocate(1, [1, 2, 3, 4, 6])  # nothing of request 0 is computed yet
    a.mark_computed(0, 3)  # [1, 2] computed, [3, 4] only half
    a.allocate(2, [1, 2, 3, 4, 7])
    return [a.num_cached_tokens(1), a.num_cached_tokens(2)], [0, 2]


def appended_tokens_register_a_block():
    a = _computed(2, 8, [1, 2, 3])
    a.append(0, 4)  # fills [3, 4]: the tokens before it are computed
    a.allocate(1, [1, 2, 3, 4, 5])
    return a.num_cached_tokens(1), 4


def shared_block_stays_held():
    a = _computed(2, 4, [1, 2, 3])  # blocks 0, 1
    a.allocate(1, [1, 2, 9])  # reuses block 0, takes block 2
    a.free(0)  # block 0 is still request 1's
    return [a.num_free_blocks, a.allocate(2, [5, 5, 5, 5])], [2, [3, 1]]


def evicts_least_recently_freed():
    a = _computed(2, 6, [1, 2, 3, 4, 5], [7, 8])  # blocks 0, 1, 2 and 3; queue: 4, 5
    a.free(1)  # queue: 4, 5, 3
    a.free(0)  # queue: 4, 5, 3, 2, 1, 0 (tail first)
    a.allocate(2, [9] * 6)  # takes 4, 5, 3: [7, 8] is evicted
    a.allocate(3, [7, 8, 0])  # a miss; takes 2, then 1: [3, 4] is evicted
    missed = a.num_cached_tokens(3)
    a.free(3)
    a.allocate(4, [1, 2, 3, 4, 6])  # only [1, 2] (block 0) is left
    return [missed, a.num_cached_tokens(4)], [0, 2]


def _state(blocks, waiting=(), running=(), budget=64, chunked=True, seats=4, bs=2):
    cfg = NS(block_size=bs, num_blocks=blocks.num_blocks, max_num_seqs=seats,
             max_num_batched_tokens=budget, chunked_prefill=chunked, prefix_caching=True)
    return NS(step=0, waiting=list(waiting), running=list(running),
              free_blocks=blocks.num_free_blocks, config=cfg, blocks=blocks)


def _planned(plan):
    return ([tuple(e) for e in plan.batch], list(plan.preempted), list(plan.admitted))


def admission_chunk_stops_at_the_budget():
    a = blocks_mine.PrefixBlocks(8, 2)
    plan = mine.schedule(_state(a, [NS(request_id=0, tokens=[1] * 7, num_computed=0, num_slots=0)],
                                budget=3))
    return _planned(plan), ([(0, 3, 0)], [], [0])


def running_chunk_stops_at_the_budget():
    a = blocks_mine.PrefixBlocks(8, 2)
    a.allocate(0, [1] * 7)
    a.mark_computed(0, 3)
    running = [NS(request_id=0, tokens=[1] * 7, num_computed=3, num_slots=7)]
    waiting = [NS(request_id=1, tokens=[2] * 3, num_computed=0, num_slots=0)]
    return _planned(mine.schedule(_state(a, waiting, running, budget=2))), ([(0, 2, 3)], [], [])


def admission_starts_after_the_hits():
    a = blocks_mine.PrefixBlocks(8, 2)
    waiting = [NS(request_id=0, tokens=[1, 2, 3, 4, 5], num_computed=0, num_slots=0),
               NS(request_id=1, tokens=[1, 2, 3, 4, 9], num_computed=0, num_slots=0)]
    # request 0's blocks are computed in this very step, before request 1 reads them
    return _planned(mine.schedule(_state(a, waiting, budget=6))), ([(0, 5, 0), (1, 1, 4)], [], [0, 1])


def without_chunking_a_prompt_waits_whole():
    a = blocks_mine.PrefixBlocks(8, 2)
    waiting = [NS(request_id=0, tokens=[1] * 7, num_computed=0, num_slots=0)]
    return _planned(mine.schedule(_state(a, waiting, budget=6, chunked=False))), ([], [], [])


def preempted_chunk_hits_only_what_it_computed():
    # request 1's 24-token prompt goes in chunks of at most 5; request 0's next token needs a
    # block and preempts it after its first chunk; back after request 0 ends, request 1 finds
    # its one computed block in the cache, not the blocks it never computed
    requests = [Request([7, 8, 9], 8), Request(list(range(60, 84)), 1, arrival_step=1)]
    res, _ = run_mine(requests, num_blocks=7, block_size=4, chunked_prefill=True,
                      max_num_batched_tokens=5, max_num_seqs=2, model=MODEL)
    return ([r.num_preemptions for r in res.requests], [r.num_cached_tokens for r in res.requests]), \
        ([0, 1], [0, 4])


BY_HAND = [one_token_left, key_names_its_parent, registered_only_when_computed,
           appended_tokens_register_a_block, shared_block_stays_held, evicts_least_recently_freed,
           admission_chunk_stops_at_the_budget, running_chunk_stops_at_the_budget,
           admission_starts_after_the_hits, without_chunking_a_prompt_waits_whole,
           preempted_chunk_hits_only_what_it_computed]


@pytest.mark.parametrize("case", BY_HAND, ids=[c.__name__ for c in BY_HAND])
def test_rules_by_hand(case):
    got, want = case()
    assert got == want, f"{case.__name__.replace('_', ' ')}: expected {want}, got {got}"


# ---- the engine: tokens, and the very batches of servelab's scheduler --------------------------


@settings(max_examples=30)  # every example runs the tiny model: keep grading quick
@given(setups())
def test_tokens_equal_generate_alone(setup):
    requests, eng = setup
    res, _ = run_mine(requests, **eng)
    for req, got in zip(requests, res.requests):
        want = alone(req)
        assert got.tokens == want, (f"{describe(requests, eng)}: request {got.request_id}: "
                                    f"expected the tokens of generate() alone {want}, got {got.tokens}")


def _case(shapes, **eng):
    return [Request(p, m, GREEDY, a) for p, m, a in shapes], {**eng, "model": MODEL}


@settings(max_examples=60)
@given(setups(), st.booleans())
# two states the random search reaches only now and then: a prompt of whole blocks asked again
# (one token stays to compute), and a chunked prompt preempted half computed
@example(_case([([1, 2, 3, 4], 2, 0), ([1, 2, 3, 4], 2, 3)], num_blocks=8, block_size=2,
               max_num_seqs=2, max_num_batched_tokens=8, chunked_prefill=False), False)
@example(_case([([7, 8, 9], 8, 0), (list(range(60, 84)), 1, 1)], num_blocks=7, block_size=4,
               max_num_seqs=2, max_num_batched_tokens=5, chunked_prefill=True), False)
def test_same_batches_as_the_engine(setup, tight):
    requests, eng = setup
    if tight:
        eng = {**eng, "num_blocks": max(-(-need(r) // eng["block_size"]) for r in requests)}
    want = serve(requests, prefix_caching=True, **eng)
    got, calls = run_mine(requests, **eng)
    assert_same_steps(want, got, calls, describe(requests, eng))
    cached = [r.num_cached_tokens for r in got.requests]
    assert cached == [r.num_cached_tokens for r in want.requests], f"{describe(requests, eng)}: cached tokens"
    event(f"hits: {sum(cached) > 0}")
    event(f"preempted: {any(s.preempted for s in want.steps)}")


# ---- what a shared system prompt buys (§3.5, §8.3) ----------------------------------------------

@st.composite
def chat_loads(draw):
    """A burst of single-turn chats arriving together, their lengths and system prompts from
    ``workload.chat_sessions`` (one or two system prompts of 96-192 tokens, short user messages
    and answers; drawn sizes and seed). Real token ids: each system prompt's tokens are below
    128 and each request's own part starts with ``128 + i``, so two requests share exactly their
    system prompt."""
    n, seed = draw(st.integers(6, 10)), draw(st.integers(0, 2**16))
    system_len = draw(st.integers(96, 192))
    loads, sp = chat_sessions(n, rate=1.0, seed=seed, system_len=system_len,
                              n_system_prompts=draw(st.integers(1, 2)), user_mean=6,
                              output_mean=4, sigma=0.5, max_len=240)
    rng = np.random.default_rng(seed)
    prompts: list[list[int]] = []
    for i in range(len(loads)):
        own = [128 + i % 128] + rng.integers(0, 128, int(loads.prompt_len[i] - system_len - 1)).tolist()
        system = prompts[sp.parent[i]][:system_len] if sp.parent[i] >= 0 \
            else rng.integers(0, 128, system_len).tolist()
        prompts.append(system + own)
    requests = [Request(p, int(m)) for p, m in zip(prompts, loads.output_len)]
    return requests, sp, system_len, draw(st.sampled_from([8, 16]))


@settings(max_examples=6)  # each example serves a burst twice
@given(chat_loads())
def test_a_shared_system_prompt_pays(load):
    # A burst's prefill is compute-bound on the paper GPU (hundreds of tokens, past the H100's
    # ridge point, §3.3): every prompt token the cache serves is a token the first step does
    # not compute, so the first tokens come sooner.
    requests, sp, system_len, bs = load
    need_blocks = sum(-(-need(r) // bs) for r in requests)
    eng = dict(num_blocks=need_blocks, block_size=bs, max_num_seqs=16,  # room for all: no eviction
               max_num_batched_tokens=4096, model=MODEL)
    base = serve(requests, **eng)  # servelab's engine without prefix caching
    got, _ = run_mine(requests, **eng)
    what = (f"{len(requests)} chats, system prompt of {system_len} tokens shared as "
            f"{sp.parent.tolist()} (parent request, -1: its first user), engine {eng | {'model': 'tiny'}}")
    # every later user of a system prompt reuses its whole blocks, and nothing else
    want_cached = [0 if p < 0 else system_len // bs * bs for p in sp.parent.tolist()]
    cached = [r.num_cached_tokens for r in got.requests]
    assert cached == want_cached, f"{what}: expected tokens served from cache {want_cached}, got {cached}"
    computed = sum(r.num_computed_tokens for r in got.requests)
    assert computed == sum(r.num_computed_tokens for r in base.requests) - sum(want_cached), \
        f"{what}: tokens computed {computed}, expected those without the cache minus the cached ones"
    for r, b in zip(got.requests, base.requests):
        assert r.tokens == b.tokens, f"{what}: request {r.request_id}'s tokens"
    ttft, ttft_base = (np.mean([r.ttft_s for r in res.requests]) for res in (got, base))
    assert ttft < ttft_base, (f"{what}: expected a mean TTFT below {ttft_base * 1e3:.2f} ms without "
                              f"prefix caching, got {ttft * 1e3:.2f} ms")
