"""Tests of assignment 14 (the host tier's eviction choice), against servelab's allocator: your
choice on generated entries, against the allocator's on a tier holding the same entries;
generated request traces run on servelab's allocator, whose every host-tier eviction your
function must reproduce from what the tier held at that moment; and the win of the hits policy
on a hot system prompt, measured on runs your choices reproduce."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

import host_policy as mine
from assignment_strategies import answer_int
from servelab.blocks import BlockAllocator, OutOfBlocks

POLICIES = ("hits", "lru")  # your functions are <policy>_victim, looked up when a test runs


def _allocator_victim(policy: str, entries: list) -> int:
    """The key servelab's allocator drops from a full host tier holding ``entries``: each
    entry becomes a one-block prefix, hit ``hits`` times on a 2-block GPU, and pushed to the
    host in ``stamp`` order by the next prompt; two one-off prompts then overflow the tier."""
    by_stamp = {e["stamp"]: e for e in entries}  # the strategy draws unique stamps
    order = [by_stamp[s] for s in sorted(by_stamp)]
    alloc = BlockAllocator(2, 2, True, len(entries), policy)
    offloaded: list[int] = []  # the allocator's keys, in the order of ``order``
    for i, e in enumerate([*order, None, None]):
        prompt = [2 * i, 2 * i + 1, 0] if e is not None else [10**6 + i, 10**6, 0]
        for _ in range(1 + (e["hits"] if e is not None else 0)):
            alloc.allocate(0, prompt)
            alloc.free(0)
        for kind, _, key, _ in alloc.take_transfers():
            if kind == "offload":
                offloaded.append(key)
            elif kind == "drop":
                return order[offloaded.index(key)]["key"]
    raise AssertionError(f"the allocator dropped nothing from a full host tier of {len(entries)}")


def _victim(policy: str, entries: list) -> int:
    name = f"{policy}_victim"
    got = answer_int(name, getattr(mine, name)(entries))
    keys = [e["key"] for e in entries]
    assert got in keys, f"{name}: returned {got}, which is not the key of any entry ({keys})"
    return got


class TierReplay:
    """The host tier as the allocator's transfers show it (offloads in, recalls and drops
    out); at each eviction of a full tier, your function must pick the key the allocator
    dropped."""

    def __init__(self, capacity: int, policy: str) -> None:
        self.capacity, self.policy = capacity, policy
        self.entries: dict[int, dict] = {}
        self.clock = 0

    def follow(self, transfers: list, where: str) -> None:
        """``transfers``: one ``allocate``'s. Its recalls left the host first (they are listed
        after the evictions they made room for, so that an engine copies an evicted block out
        before a recall overwrites it)."""
        for kind, _, key, _ in transfers:
            if kind == "recall":
                del self.entries[key]
        i = 0
        while i < len(transfers):
            kind, _, key, hits = transfers[i]
            if kind == "offload":
                if len(self.entries) >= self.capacity:
                    entries = list(self.entries.values())
                    random.Random(self.clock).shuffle(entries)  # no order to lean on
                    got = _victim(self.policy, entries)
                    dropped = transfers[i + 1][2]
                    assert got == dropped, (f"{where}: the full host tier held {entries}; "
                                            f"{self.policy} drops key {dropped}, you chose {got}")
                    del self.entries[dropped]
                    i += 1  # that drop
                self.entries[key] = {"key": key, "stamp": self.clock, "hits": hits, "parent_key": 0}
                self.clock += 1
            elif kind == "drop":  # a GPU copy of the same prefix was registered
                del self.entries[key]
            i += 1


@st.composite
def entry_lists(draw):
    n = draw(st.integers(1, 12))
    stamps = draw(st.lists(st.integers(0, 10**6), min_size=n, max_size=n, unique=True))
    keys = draw(st.lists(st.integers(0, 2**64 - 1), min_size=n, max_size=n, unique=True))
    hits = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))  # few values: many ties
    return [{"key": k, "stamp": s, "hits": h, "parent_key": 0} for k, s, h in zip(keys, stamps, hits)]


@given(entry_lists(), st.sampled_from(sorted(POLICIES)))
def test_the_victim_follows_the_rule(entries, policy):
    want = _allocator_victim(policy, entries)
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


def _replay(policy: str, trace) -> int:
    """Runs the trace on servelab's allocator, checking your choice at each eviction; returns
    the host hits (blocks served from the host instead of recomputed)."""
    bs, num_blocks, host_blocks, prompts, overlap = trace
    alloc = BlockAllocator(num_blocks, bs, True, host_blocks, policy)
    tier = TierReplay(host_blocks, policy)
    live: list[int] = []
    for i, prompt in enumerate(prompts):
        try:
            alloc.allocate(i, prompt)
            live.append(i)
        except OutOfBlocks:
            pass
        while len(live) > (1 if overlap else 0):
            alloc.free(live.pop(0))
        tier.follow(alloc.take_transfers(),
                    f"{policy}, block_size {bs}, {num_blocks} GPU blocks, {host_blocks} host blocks, prompt {i}")
    return alloc.num_host_hits


def _same_as_rust(policy: str, trace) -> None:
    _replay(policy, trace)


@settings(max_examples=40)  # every eviction is a call into your function
@given(traces())
def test_lru_drops_what_the_allocator_drops(trace):
    _same_as_rust("lru", trace)


@settings(max_examples=40)
@given(traces())
def test_hits_drops_what_the_allocator_drops(trace):
    _same_as_rust("hits", trace)


def hot_prompt_trace():
    """A hot system prompt, hit once on the GPU, then one request in four, between one-off
    prompts that push it off the GPU: 4 GPU blocks of 2 tokens, 3 host blocks."""
    hot = [9, 9, 9, 9, 1]
    prompts = [hot]
    for r in range(12):
        prompts += [hot] + [[100 + 10 * r + j, 7, 100 + 10 * r + j, 8, 1] for j in range(3)]
    return 2, 4, 3, prompts, False


def test_hits_keeps_the_hot_prompt_on_the_host():
    # your choices reproduce both runs eviction for eviction, so their host hits are yours
    lru, hits = _replay("lru", hot_prompt_trace()), _replay("hits", hot_prompt_trace())
    assert hits > lru, f"hits should serve the hot prompt from the host more often than lru: {hits} vs {lru}"
