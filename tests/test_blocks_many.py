"""The allocator's batched calls: ``append_many`` and ``free_many`` do what one
``append`` / ``free`` per sequence does, in order, in one Python call; bad input names the
argument and the index."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab.blocks import BlockAllocator, OutOfBlocks


def _observables(a: BlockAllocator):
    ids, offsets, blocks = a.block_tables()
    return (ids.tolist(), offsets.tolist(), blocks.tolist(), a.free_queue().tolist(),
            a.ref_counts().tolist(), a.stats())


@given(seed=st.integers(0, 2**32 - 1), prefix=st.booleans())
def test_append_many_is_appends_in_order(seed, prefix):
    rng = np.random.default_rng(seed)
    nb, bs = int(rng.integers(1, 20)), int(rng.integers(1, 5))
    bulk, one = BlockAllocator(nb, bs, prefix), BlockAllocator(nb, bs, prefix)
    for sid in range(int(rng.integers(1, 8))):
        prompt = rng.integers(0, 3, int(rng.integers(1, 7))).tolist()
        try:
            one.allocate(sid, prompt)
        except OutOfBlocks:
            continue
        bulk.allocate(sid, prompt)
        if rng.random() < 0.3:  # a fork shares blocks: its appends copy on write
            one.fork(sid, 100 + sid)
            bulk.fork(sid, 100 + sid)
    for _ in range(10):
        ids = bulk.seq_ids()
        toks = rng.integers(0, 3, len(ids))
        done, src, dst = bulk.append_many(ids, toks)
        want = []
        for s, t in zip(ids, toks.tolist()):
            try:
                want.append(one.append(s, t) or (-1, -1))
            except OutOfBlocks:
                break
        assert done == len(want)
        assert list(zip(src.tolist(), dst.tolist())) == want
        assert _observables(bulk) == _observables(one)
        if done < len(ids):  # preempt the newest two, as an engine would
            bulk.free_many(ids[-2:])
            for s in ids[-2:]:
                one.free(s)
            assert _observables(bulk) == _observables(one)
    bulk.check_invariants()


def test_errors_name_the_index_and_keep_earlier_work():
    a = BlockAllocator(4, 2)
    a.allocate(1, [5])
    with pytest.raises(KeyError, match=r"seq_ids\[1\]: seq_id 9 is not allocated"):
        a.append_many([1, 9], [0, 0])
    assert a.num_tokens(1) == 2
    with pytest.raises(ValueError, match=r"seq_ids\[0\]: token_id must be in \[0, 4294967296\), got -1"):
        a.append_many([1], [-1])
    with pytest.raises(ValueError, match="same length"):
        a.append_many([1, 1], [0])
    with pytest.raises(ValueError, match="token_ids must hold integers, got dtype float64"):
        a.append_many([1], [0.5])
    with pytest.raises(ValueError, match="seq_ids must be one-dimensional"):
        a.free_many([[1]])
    with pytest.raises(KeyError, match=r"seq_ids\[1\]: seq_id 1 is not allocated"):
        a.free_many([1, 1])
    assert len(a) == 0
    assert a.append_many([], [])[0] == 0
