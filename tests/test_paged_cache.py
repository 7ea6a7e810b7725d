"""The paged KV cache (§2.4, §3.5): the same logits as the contiguous cache wherever the blocks
sit in the pool; copy-on-write copies KV; the four-call protocol's checks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab import tiny_llm
from servelab.blocks import BlockAllocator
from servelab.tiny_llm import TINY, TinyLLM
from servelab.tiny_llm.paged import PagedKVCache, PagedKVPool
from assignment_strategies import prompts

MODEL = TinyLLM(TINY)
# room for the worst case at block_size 1: six holes of 20 tokens at once, then the three
# kept holes beside a 40-token prompt and 12 new tokens (60 + 52 blocks)
NUM_BLOCKS = 128


def fragmented(bs: int, holes: list[int]) -> tuple[BlockAllocator, PagedKVPool]:
    """An allocator whose free queue is shuffled by earlier sequences, so that block tables are
    not 0, 1, 2, ... (the gather must follow the table, not the block ids)."""
    alloc = BlockAllocator(NUM_BLOCKS, bs)
    for i, n in enumerate(holes):
        alloc.allocate(1000 + i, [1] * n)
    for i in range(len(holes))[::2]:
        alloc.free(1000 + i)
    return alloc, PagedKVPool(TINY, NUM_BLOCKS, bs)


def run_paged(alloc, pool, seq_id, prompt, n_new, sampler=tiny_llm.GREEDY):
    alloc.allocate(seq_id, prompt)
    cache = PagedKVCache(pool, alloc, seq_id)
    logits = [MODEL.forward(prompt, cache)]
    tokens = [int(sampler(logits[0], 0))]
    for step in range(1, n_new):
        copy = alloc.append(seq_id, tokens[-1])
        if copy is not None:
            pool.copy_block(*copy)
        logits.append(MODEL.forward([tokens[-1]], cache))
        tokens.append(int(sampler(logits[-1], step)))
    return tokens, np.stack(logits), cache


@given(prompts(1, 40), st.integers(1, 12), st.sampled_from([1, 2, 3, 4, 8, 16]),
       st.lists(st.integers(1, 20), max_size=6))
def test_paged_generation_equals_generate_bit_for_bit(prompt, n_new, bs, holes):
    alloc, pool = fragmented(bs, holes)
    tokens, logits, cache = run_paged(alloc, pool, 7, prompt, n_new)
    ref = tiny_llm.generate(prompt, n_new, model=MODEL)
    assert tokens == ref.tokens
    np.testing.assert_array_equal(logits, ref.logits)
    assert len(cache) == len(prompt) + n_new - 1 == alloc.num_tokens(7)
    # the KV sits where the table says: token t in block table[t // bs], slot t % bs
    table = alloc.block_table(7)
    for layer in range(TINY.n_layers):
        for t in (0, len(cache) - 1):
            np.testing.assert_array_equal(pool.k[layer, table[t // bs], t % bs],
                                          ref.cache.keys(layer)[:, t])


@given(prompts(2, 30), st.integers(2, 8), st.sampled_from([2, 4, 8]), st.integers(0, 2**31))
def test_copy_on_write_gives_a_forked_sequence_its_parents_kv(prompt, n_new, bs, seed):
    alloc = BlockAllocator(NUM_BLOCKS, bs)
    pool = PagedKVPool(TINY, NUM_BLOCKS, bs)
    alloc.allocate(0, prompt)
    parent = PagedKVCache(pool, alloc, 0)
    first = int(MODEL.forward(prompt, parent).argmax())
    alloc.fork(0, 1)  # parallel sampling: the child shares every block, partial one included
    child = PagedKVCache(pool, alloc, 1, num_computed=len(parent))
    samplers = {0: tiny_llm.GREEDY, 1: tiny_llm.Temperature(1.0, seed)}
    seqs = {0: list(prompt) + [first], 1: list(prompt) + [first]}
    copies = 0
    for step in range(1, n_new):
        for sid, cache in ((0, parent), (1, child)):
            copy = alloc.append(sid, seqs[sid][-1])
            if copy is not None:
                pool.copy_block(*copy)
                copies += 1
            logits = MODEL.forward([seqs[sid][-1]], cache)
            # the reference: the whole sequence so far, no cache at all
            ref = MODEL.forward(seqs[sid], None)
            np.testing.assert_allclose(logits, ref, rtol=1e-4, atol=1e-5)
            seqs[sid].append(int(samplers[sid](logits, step)))
    assert copies == (1 if len(prompt) % bs else 0)  # the shared partial block, once
    assert alloc.num_copies == copies


def test_reserve_needs_slots_from_the_allocator_and_a_failed_forward_changes_nothing():
    alloc = BlockAllocator(4, 4)
    pool = PagedKVPool(TINY, 4, 4)
    alloc.allocate(0, [1, 2, 3])
    cache = PagedKVCache(pool, alloc, 0)
    with pytest.raises(ValueError, match="holds slots for 3 tokens in the allocator, not 4"):
        MODEL.forward([1, 2, 3, 4], cache)
    assert len(cache) == 0
    MODEL.forward([1, 2, 3], cache)
    assert len(cache) == 3


def test_bad_arguments_name_the_value():
    alloc = BlockAllocator(4, 4)
    alloc.allocate(0, [1, 2])
    with pytest.raises(ValueError, match="block_size must be a positive integer, got 0"):
        PagedKVPool(TINY, 4, 0)
    with pytest.raises(ValueError, match="does not match pool"):
        PagedKVCache(PagedKVPool(TINY, 8, 4), alloc, 0)
    with pytest.raises(ValueError, match=r"num_computed must be an integer in \[0, 2\].*got 5"):
        PagedKVCache(PagedKVPool(TINY, 4, 4), alloc, 0, num_computed=5)
    with pytest.raises(KeyError):
        PagedKVCache(PagedKVPool(TINY, 4, 4), alloc, 9)
