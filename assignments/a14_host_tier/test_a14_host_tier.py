"""Tests of assignment 14 (the host tier's eviction choice), against servelab's allocator: your
choice on generated entries, generated request traces replayed through the course's allocator
with your function making every host-tier eviction (compared step by step with the Rust
allocator), and the measured win of the hits policy on a hot system prompt."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

import host_policy as mine
from assignment_strategies import answer_int
from servelab.blocks import BlockAllocator
from servelab.reference import blocks as ref

POLICIES = {"lru": mine.lru_victim, "hits": mine.hits_victim}


def _rule(policy: str, entries: list) -> int:
    rank = (lambda e: e["stamp"]) if policy == "lru" else (lambda e: (e["hits"], e["stamp"]))
    return min(entries, key=rank)["key"]


def _victim(policy: str, entries: list) -> int:
    name = POLICIES[policy].__name__
    got = answer_int(name, POLICIES[policy](entries))
    keys = [e["key"] for e in entries]
    assert got in keys, f"{name}: returned {got}, which is not the key of any entry ({keys})"
    return got


class YourTier(ref.HostTier):
    """The course allocator's host tier, dropping the entry your function chooses."""

    def victim(self) -> int:
        entries = [{"key": k, "stamp": e.stamp, "hits": e.hits, "parent_key": e.parent_key}
                   for k, e in self.entries.items()]
        random.Random(self.clock).shuffle(entries)  # no order to lean on
        return _victim(self.policy, entries)


def yours(num_blocks: int, block_size: int, host_blocks: int, policy: str) -> ref.BlockAllocator:
    a = ref.BlockAllocator(num_blocks, block_size, True, host_blocks, policy)
    a.host = YourTier(host_blocks, policy)
    return a


@st.composite
def entry_lists(draw):
    n = draw(st.integers(1, 12))
    stamps = draw(st.lists(st.integers(0, 10**6), min_size=n, max_size=n, unique=True))
    keys = draw(st.lists(st.integers(0, 2**64 - 1), min_size=n, max_size=n, unique=True))
    hits = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))  # few values: many ties
    return [{"key": k, "stamp": s, "hits": h, "parent_key": 0} for k, s, h in zip(keys, stamps, hits)]


@given(entry_lists(), st.sampled_from(sorted(POLICIES)))
def test_the_victim_follows_the_rule(entries, policy):
    want = _rule(policy, entries)
    got = _victim(policy, entries)
    assert got == want, f"{policy}: entries {entries}: expected key {want}, got {got}"


@st.composite
def traces(draw):
    """Prompts drawn from a few shared prefixes plus tails, each allocated then freed (one or
    two alive at a time), in pools small enough that the GPU evicts and the host tier fills."""
    bs = draw(st.integers(1, 3))
    prefixes = [draw(st.lists(st.integers(0, 3), min_size=bs, max_size=3 * bs))
                for _ in range(draw(st.integers(1, 4)))]
    prompts = [draw(st.sampled_from(prefixes)) + draw(st.lists(st.integers(0, 3), max_size=2 * bs))
               for _ in range(draw(st.integers(1, 30)))]
    prompts = [p for p in prompts if p]
    return bs, draw(st.integers(2, 8)), draw(st.integers(1, 5)), prompts, draw(st.booleans())


def _same_as_rust(policy: str, trace) -> None:
    bs, num_blocks, host_blocks, prompts, overlap = trace
    rust = BlockAllocator(num_blocks, bs, True, host_blocks, policy)
    mine_ = yours(num_blocks, bs, host_blocks, policy)
    live: list[int] = []
    for i, prompt in enumerate(prompts):
        for a in (rust, mine_):
            try:
                a.allocate(i, prompt)
            except ref.OutOfBlocks:
                pass
        if i in rust:
            live.append(i)
        while len(live) > (1 if overlap else 0):
            s = live.pop(0)
            rust.free(s)
            mine_.free(s)
        where = f"{policy}, block_size {bs}, {num_blocks} GPU blocks, {host_blocks} host blocks, prompt {i}"
        assert mine_.take_transfers() == rust.take_transfers(), f"{where}: another block was dropped or recalled"
        assert sorted(mine_.host_keys()) == sorted(rust.host_keys()), f"{where}: the host tiers differ"
        assert mine_.stats() == rust.stats(), f"{where}: {mine_.stats()} != {rust.stats()}"


@settings(max_examples=40)  # every eviction is a call into your function
@given(traces())
def test_lru_drops_what_the_allocator_drops(trace):
    _same_as_rust("lru", trace)


@settings(max_examples=40)
@given(traces())
def test_hits_drops_what_the_allocator_drops(trace):
    _same_as_rust("hits", trace)


def _host_hits(policy: str, alloc) -> int:
    """A hot system prompt, hit once on the GPU, then one request in four, between one-off
    prompts that push it off the GPU: 4 GPU blocks of 2 tokens, 3 host blocks."""
    hot = [9, 9, 9, 9, 1]
    prompts = [hot]
    for r in range(12):
        prompts += [hot] + [[100 + 10 * r + j, 7, 100 + 10 * r + j, 8, 1] for j in range(3)]
    for i, p in enumerate(prompts):
        alloc.allocate(i, p)
        alloc.free(i)
    return alloc.num_host_hits


def test_hits_keeps_the_hot_prompt_on_the_host():
    lru = _host_hits("lru", yours(4, 2, 3, "lru"))
    hits = _host_hits("hits", yours(4, 2, 3, "hits"))
    want_lru = _host_hits("lru", BlockAllocator(4, 2, True, 3, "lru"))
    want_hits = _host_hits("hits", BlockAllocator(4, 2, True, 3, "hits"))
    assert (lru, hits) == (want_lru, want_hits), \
        f"host hits (lru, hits): expected {(want_lru, want_hits)}, got {(lru, hits)}"
    assert hits > lru, f"hits should serve the hot prompt from the host more often than lru: {hits} vs {lru}"
