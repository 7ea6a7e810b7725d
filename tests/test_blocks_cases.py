"""Hand-checked cases of the block allocator, each run on the Rust core and on the reference.

Every expected block id below was worked out on paper from the rules in
``servelab.blocks``'s docstring (free queue starts ``0, 1, 2, ...``; new blocks from its front;
``free`` appends a sequence's blocks last block first).
"""

from __future__ import annotations

import doctest
import pickle

import numpy as np
import pytest

import servelab.blocks
import servelab.reference.blocks
from servelab import _core
from servelab.blocks import OutOfBlocks
from servelab.reference import blocks as ref

IMPLS = {"rust": servelab.blocks.BlockAllocator, "reference": ref.BlockAllocator}


@pytest.fixture(params=sorted(IMPLS))
def Alloc(request):
    return IMPLS[request.param]


def state(a) -> tuple:
    ids = a.seq_ids()
    return (a.stats(), [a.block_table(s) for s in ids], [a.num_tokens(s) for s in ids],
            a.ref_counts().tolist(), a.free_queue().tolist(),
            [(a.block_tokens(b), a.key_of(b)) for b in range(a.num_blocks)])


# ---- tables, append, free --------------------------------------------------------------------

def test_allocate_append_and_tables(Alloc):
    a = Alloc(6, 4)
    assert a.allocate(10, [1, 2, 3, 4, 5]) == [0, 1]
    assert (a.num_tokens(10), a.num_free_blocks) == (5, 4)
    assert [a.append(10, t) for t in (6, 7, 8)] == [None, None, None]
    assert a.block_table(10) == [0, 1]  # block 1 is now full
    assert a.append(10, 9) is None
    assert a.block_table(10) == [0, 1, 2]
    assert a.block_tokens(1) == [5, 6, 7, 8] and a.block_tokens(2) == [9]
    ids, offsets, blocks = a.block_tables()
    assert ids.tolist() == [10] and offsets.tolist() == [0, 3] and blocks.tolist() == [0, 1, 2]
    assert 10 in a and 11 not in a and len(a) == 1


def test_token_containers(Alloc):
    a = Alloc(8, 2)
    assert a.allocate(0, (1, 2, 3)) == [0, 1]
    assert a.allocate(1, np.array([4, 5], dtype=np.int64)) == [2]
    assert a.allocate(2, iter([6])) == [3]
    assert a.append(2, np.int32(7)) is None
    assert a.block_tokens(3) == [6, 7]
    assert a.allocate(3, [ref.TOKEN_LIMIT - 1]) == [4]


# ---- fork and copy-on-write ------------------------------------------------------------------

def test_fork_and_copy_on_write(Alloc):
    a = Alloc(5, 4)
    a.allocate(1, [1, 2, 3, 4, 5, 6])  # blocks 0 (full) and 1 (2 of 4 slots)
    a.fork(1, 2)
    assert a.block_table(2) == [0, 1] and a.ref_counts().tolist() == [2, 2, 0, 0, 0]
    assert a.num_free_blocks == 3
    # The child writes into shared, partly filled block 1: copied to block 2 first.
    assert a.append(2, 70) == (1, 2)
    assert a.block_table(1) == [0, 1] and a.block_table(2) == [0, 2]
    assert a.block_tokens(1) == [5, 6] and a.block_tokens(2) == [5, 6, 70]
    assert a.ref_counts().tolist() == [2, 1, 1, 0, 0] and a.num_copies == 1
    # The parent now owns block 1 alone: it writes in place.
    assert a.append(1, 60) is None and a.block_tokens(1) == [5, 6, 60]
    # A shared *full* block needs no copy: fork, fill, then append takes a new block.
    a.append(1, 61)
    a.fork(1, 3)
    assert a.append(3, 62) is None and a.block_table(3) == [0, 1, 3]
    assert a.num_copies == 1


def test_fork_of_fork_copies_once_per_writer(Alloc):
    a = Alloc(6, 4)
    a.allocate(1, [1, 2])
    a.fork(1, 2)
    a.fork(2, 3)
    assert a.ref_counts().tolist()[0] == 3
    assert a.append(3, 9) == (0, 1)
    assert a.append(2, 8) == (0, 2)
    assert a.append(1, 7) is None  # the last holder writes in place
    assert [a.block_tokens(b) for b in (0, 1, 2)] == [[1, 2, 7], [1, 2, 9], [1, 2, 8]]


# ---- prefix caching --------------------------------------------------------------------------

def test_prefix_hit_of_k_full_blocks(Alloc):
    bs, k = 4, 3
    a = Alloc(16, bs, prefix_caching=True)
    system = list(range(100, 100 + k * bs))  # k full blocks of shared system prompt
    assert a.allocate(1, system + [1, 2]) == [0, 1, 2, 3]
    assert a.num_cached_tokens(1) == 0 and a.num_cached_blocks == k
    assert a.allocate(2, system + [7, 8, 9]) == [0, 1, 2, 4]
    assert a.num_cached_tokens(2) == k * bs
    assert (a.num_hits, a.num_lookups) == (k, 2 * k)
    assert a.ref_counts().tolist()[:5] == [2, 2, 2, 1, 1]
    # A prefix that differs inside block 1 reuses block 0 only.
    other = system[:bs] + [0] + system[bs + 1:]
    assert a.allocate(3, other + [5])[:1] == [0] and a.num_cached_tokens(3) == bs


def test_at_least_one_token_left_to_compute(Alloc):
    a = Alloc(8, 2, prefix_caching=True)
    a.allocate(1, [1, 2, 3, 4])  # blocks 0, 1, both cached
    # The exact same prompt: only block 0 may hit; block 1 is computed again in block 2, and
    # stays uncached (block 1 is the cached copy of that prefix: first wins).
    assert a.allocate(2, [1, 2, 3, 4]) == [0, 2]
    assert a.num_cached_tokens(2) == 2 and a.key_of(2) is None and a.key_of(1) is not None
    # One more token: both full blocks hit.
    assert a.allocate(3, [1, 2, 3, 4, 5]) == [0, 1, 3] and a.num_cached_tokens(3) == 4
    # A one-token prompt can never hit.
    assert a.allocate(4, [1]) == [4] and a.num_cached_tokens(4) == 0


def test_freed_cached_blocks_are_free_and_hit_until_evicted(Alloc):
    a = Alloc(5, 2, prefix_caching=True)
    a.allocate(1, [1, 2, 3, 4, 5])  # 0=[1,2] 1=[3,4] 2=[5]
    a.free(1)
    assert a.num_free_blocks == 5 and a.num_cached_blocks == 2
    assert a.free_queue().tolist() == [3, 4, 2, 1, 0]
    # Reuse of a free cached chain takes its blocks off the free queue.
    assert a.allocate(2, [1, 2, 3, 4, 6]) == [0, 1, 3]
    assert a.free_queue().tolist() == [4, 2] and a.num_evictions == 0
    a.free(2)
    assert a.free_queue().tolist() == [4, 2, 3, 1, 0]
    # An unrelated prompt takes 4, 2, 3 (uncached), then evicts 1 (the tail, [3, 4]) before 0.
    assert a.allocate(3, [9] * 8) == [4, 2, 3, 1]
    assert a.num_evictions == 1 and a.key_of(0) == ref.block_key(ref.ROOT_KEY, [1, 2])
    a.free(3)
    assert a.free_queue().tolist() == [0, 1, 3, 2, 4]
    # The head is still cached: [1, 2] hits, [3, 4] no longer does.
    assert a.allocate(4, [1, 2, 3, 4, 8]) == [0, 1, 3]
    assert a.num_cached_tokens(4) == 2 and a.num_evictions == 3


def test_append_registers_full_blocks(Alloc):
    a = Alloc(8, 2, prefix_caching=True)
    a.allocate(1, [1])
    a.append(1, 2)  # block 0 now full: cached
    a.append(1, 3)
    assert a.key_of(0) == ref.block_key(ref.ROOT_KEY, [1, 2])
    a.free(1)
    assert a.allocate(2, [1, 2, 3])[0] == 0 and a.num_cached_tokens(2) == 2


def test_keys_are_registered_when_computed(Alloc):
    # a block is findable only once its KV is computed
    a = Alloc(16, 2, prefix_caching=True)
    assert a.allocate(1, [1, 2, 3, 4, 5, 6, 7], num_computed=3) == [0, 1, 2, 3]
    assert a.num_cached_blocks == 1  # [1, 2] only: [3, 4] and [5, 6] are not computed
    assert a.allocate(2, [1, 2, 3, 4, 9], num_computed=0) == [0, 4, 5]
    assert a.num_cached_tokens(2) == 2
    a.mark_computed(1, 6)
    a.mark_computed(1, 6)  # idempotent
    a.mark_computed(1, 0)  # going back changes nothing
    assert [a.key_of(b) is not None for b in range(4)] == [True, True, True, False]
    a.mark_computed(2, 4)  # its [3, 4] is computed too, but block 1 was first
    assert a.key_of(4) is None and a.num_cached_blocks == 3
    assert a.allocate(3, [1, 2, 3, 4, 5, 6, 0], num_computed=0) == [0, 1, 2, 6]
    # append: the new token's predecessors are computed, so every earlier block registers too
    assert a.allocate(4, [8, 8, 8, 8, 8], num_computed=0) == [7, 8, 9]
    a.append(4, 8)
    assert [a.key_of(b) is not None for b in (7, 8, 9)] == [True, True, True]
    # default None: standalone use, every full block registered at once (task a7's semantics)
    a.allocate(5, [6, 6, 6])
    assert a.key_of(10) == ref.block_key(ref.ROOT_KEY, [6, 6])


def test_hits_are_verified_on_tokens_not_the_hash(monkeypatch):
    # Make every block collide: a hit must still only return blocks with the request's tokens.
    monkeypatch.setattr(ref, "block_key", lambda parent, tokens: 42)
    a = ref.BlockAllocator(8, 2, prefix_caching=True)
    a.allocate(1, [1, 2, 3])
    assert a.allocate(2, [5, 6, 7]) == [2, 3] and a.num_cached_tokens(2) == 0
    assert a.allocate(3, [1, 2, 9]) == [0, 4] and a.num_cached_tokens(3) == 2


def test_key_is_pinned_across_languages():
    # Pinned integers: changing the hash changes which prefixes are found again, so it is a
    # change of semantics, to be made on purpose in both languages at once.
    for impl in (ref.block_key, servelab.blocks.block_key, _core.block_key):
        assert impl(ref.ROOT_KEY, []) == 0x483CBE61D6CEFCDE
        k = impl(ref.ROOT_KEY, [1, 2, 3, 4])
        assert k == 0xE5C92DD97164FFC1
        assert impl(k, [5]) == 0x26AD92E482E85040


# ---- LRU order of reuse ----------------------------------------------------------------------

def test_lru_reuse_least_recently_freed_tail_first(Alloc):
    a = Alloc(8, 1)
    a.allocate(1, [1, 1, 1])  # 0 1 2
    a.allocate(2, [2, 2])  # 3 4
    a.allocate(3, [3])  # 5
    a.free(2)
    a.free(1)
    assert a.free_queue().tolist() == [6, 7, 4, 3, 2, 1, 0]
    assert a.allocate(4, [4] * 5) == [6, 7, 4, 3, 2]
    a.free(3)
    assert a.free_queue().tolist() == [1, 0, 5]
    # Shared blocks become free only with their last reference, at that free's turn.
    a.free(4)
    a.allocate(5, [5, 5])  # 1 0
    a.fork(5, 6)
    a.free(5)
    assert a.free_queue().tolist() == [5, 2, 3, 4, 7, 6]
    a.free(6)
    assert a.free_queue().tolist() == [5, 2, 3, 4, 7, 6, 0, 1]


# ---- running out -----------------------------------------------------------------------------

def test_out_of_blocks_changes_nothing(Alloc):
    a = Alloc(4, 2, prefix_caching=True)
    a.allocate(1, [1, 2, 3])
    a.fork(1, 2)
    before = state(a)
    with pytest.raises(OutOfBlocks, match=r"^seq_id 3 needs 3 new blocks, 2 free$"):
        a.allocate(3, [7, 7, 7, 7, 7])
    assert state(a) == before
    # 2 hits of free cached blocks count against the free blocks they come from.
    a.append(1, 4)  # copy-on-write of block 1 into block 2, now full and cached
    a.free(1)
    assert a.free_queue().tolist() == [3, 2]
    before = state(a)
    # Hits block 0 (held by seq 2) and block 2 (free): block 2 cannot also be a new block.
    with pytest.raises(OutOfBlocks, match=r"^seq_id 4 needs 2 new blocks, 1 free$"):
        a.allocate(4, [1, 2, 3, 4, 5, 6, 7])
    assert state(a) == before
    a.allocate(4, [5, 5, 5])  # blocks 3 and 2: the pool is full
    a.fork(4, 5)
    before = state(a)
    assert not a.can_append(4)  # block 2 is shared and partly full: it needs a copy
    with pytest.raises(OutOfBlocks, match=r"^seq_id 4 needs 1 new block, 0 free$"):
        a.append(4, 9)
    assert state(a) == before
    assert a.can_append(2) and a.append(2, 9) is None  # seq 2 owns block 1: written in place
    before = state(a)
    assert not a.can_append(2)  # block 1 is full now
    with pytest.raises(OutOfBlocks, match=r"^seq_id 2 needs 1 new block, 0 free$"):
        a.append(2, 10)
    assert state(a) == before


def test_can_allocate(Alloc):
    a = Alloc(4, 4)
    assert a.can_allocate(0) and a.can_allocate(16) and not a.can_allocate(17)
    a.allocate(1, [1] * 5)
    assert a.can_allocate(8) and not a.can_allocate(9)


def test_out_of_blocks_class():
    assert OutOfBlocks is _core.OutOfBlocks is ref.OutOfBlocks
    assert issubclass(OutOfBlocks, RuntimeError) and not issubclass(OutOfBlocks, MemoryError)
    assert OutOfBlocks.__module__ == "servelab.blocks" and OutOfBlocks.__name__ == "OutOfBlocks"
    e = pickle.loads(pickle.dumps(OutOfBlocks("x")))
    assert type(e) is OutOfBlocks and e.args == ("x",)


# ---- errors: type and message ----------------------------------------------------------------

ERRORS = [
    (lambda a: a.free(99), KeyError, "seq_id 99 is not allocated"),
    (lambda a: a.append(99, 1), KeyError, "seq_id 99 is not allocated"),
    (lambda a: a.block_table(-3), KeyError, "seq_id -3 is not allocated"),
    (lambda a: a.num_cached_tokens(5), KeyError, "seq_id 5 is not allocated"),
    (lambda a: a.allocate(1, [1]), KeyError, "seq_id 1 is already allocated"),
    (lambda a: a.fork(7, 8), KeyError, "seq_id 7 is not allocated"),
    (lambda a: a.fork(1, 1), KeyError, "seq_id 1 is already allocated"),
    (lambda a: a.allocate(2, []), ValueError, "token_ids must not be empty"),
    (lambda a: a.allocate(2, [3, -1]), ValueError, "token_ids[1] must be in [0, 4294967296), got -1"),
    (lambda a: a.allocate(2, [2**70]), ValueError,
     "token_ids[0] must be in [0, 4294967296), got 1180591620717411303424"),
    (lambda a: a.allocate(2, [1, 2.0]), TypeError, "token_ids[1] must be an integer, got 2.0"),
    (lambda a: a.allocate(2, "abc"), TypeError, "token_ids must be a sequence of integers, got str"),
    (lambda a: a.allocate(2, 5), TypeError, "token_ids must be a sequence of integers, got int"),
    (lambda a: a.append(1, 2**32), ValueError, "token_id must be in [0, 4294967296), got 4294967296"),
    (lambda a: a.append(1, "a"), TypeError, "token_id must be an integer, got 'a'"),
    (lambda a: a.can_allocate(-1), ValueError, "n_tokens must be a non-negative integer, got -1"),
    (lambda a: a.allocate(2, [1, 2], 3), ValueError, "num_computed must be an integer in [0, 2], got 3"),
    (lambda a: a.allocate(2, [1], -1), ValueError, "num_computed must be an integer in [0, 1], got -1"),
    (lambda a: a.mark_computed(1, 4), ValueError, "num_computed must be an integer in [0, 3], got 4"),
    (lambda a: a.mark_computed(1, -2), ValueError, "num_computed must be an integer in [0, 3], got -2"),
    (lambda a: a.mark_computed(9, 0), KeyError, "seq_id 9 is not allocated"),
    (lambda a: a.block_tokens(4), ValueError, "block_id must be in [0, 4), got 4"),
    (lambda a: a.key_of(-1), ValueError, "block_id must be in [0, 4), got -1"),
]


@pytest.mark.parametrize("call, exc, message", ERRORS)
def test_errors(Alloc, call, exc, message):
    a = Alloc(4, 2)
    a.allocate(1, [1, 2, 3])
    before = state(a)
    with pytest.raises(exc) as info:
        call(a)
    assert info.value.args == (message,)
    assert state(a) == before


def test_double_free_raises(Alloc):
    a = Alloc(4, 2)
    a.allocate(1, [1])
    a.free(1)
    with pytest.raises(KeyError, match="seq_id 1 is not allocated"):
        a.free(1)
    assert a.num_free_blocks == 4


@pytest.mark.parametrize("args, message", [
    ((0, 4), "num_blocks must be an integer in [1, 16777216], got 0"),
    ((1 << 24 | 1, 4), "num_blocks must be an integer in [1, 16777216], got 16777217"),
    ((4, 0), "block_size must be an integer in [1, 65536], got 0"),
    ((4, 1 << 17), "block_size must be an integer in [1, 65536], got 131072"),
])
def test_constructor_errors(Alloc, args, message):
    with pytest.raises(ValueError) as info:
        Alloc(*args)
    assert info.value.args == (message,)


@pytest.mark.parametrize("call", [
    lambda a: a.free("1"), lambda a: a.allocate(None, [1]), lambda a: a.fork(1, 2.0),
    lambda a: a.allocate(2, [1], 0.5), lambda a: a.mark_computed(1, "1"),
    lambda a: Alloc_type(a)(4.0, 2), lambda a: Alloc_type(a)(4, 2, prefix_caching=1),
])
def test_type_errors(Alloc, call):
    # PyO3 words its own argument TypeErrors; only the type is part of the contract.
    a = Alloc(4, 2)
    a.allocate(1, [1])
    with pytest.raises(TypeError):
        call(a)
    with pytest.raises(OverflowError):
        a.free(1 << 63)


def Alloc_type(a):
    return type(a)


# ---- bulk: replay ----------------------------------------------------------------------------

def random_trace(seed: int, n_ops: int = 400):
    """A valid-by-construction trace, recorded by running the reference."""
    rng = np.random.default_rng(seed)
    a = ref.BlockAllocator(12, 3, prefix_caching=True)
    op, seq, arg, prompts = [], [], [], []
    live: list[int] = []
    next_id = 0
    for _ in range(n_ops):
        kind = int(rng.integers(4)) if live else 0
        if kind == 0:
            base = prompts[int(rng.integers(len(prompts)))][:6] if prompts and rng.random() < 0.7 else []
            p = base + rng.integers(0, 3, size=int(rng.integers(1, 6))).tolist()
            op.append(0), seq.append(next_id), arg.append(len(prompts))
            prompts.append(p)
            try:
                a.allocate(next_id, p)
                live.append(next_id)
            except OutOfBlocks:
                pass
            next_id += 1
        elif kind == 1:
            s = live[int(rng.integers(len(live)))]
            t = int(rng.integers(3))
            op.append(1), seq.append(s), arg.append(t)
            try:
                a.append(s, t)
            except OutOfBlocks:
                pass
        elif kind == 2:
            s = live[int(rng.integers(len(live)))]
            op.append(2), seq.append(s), arg.append(next_id)
            a.fork(s, next_id)
            live.append(next_id)
            next_id += 1
        else:
            s = live.pop(int(rng.integers(len(live))))
            op.append(3), seq.append(s), arg.append(0)
            a.free(s)
    offsets = np.cumsum([0] + [len(p) for p in prompts]).astype(np.int64)
    tokens = np.array([t for p in prompts for t in p], dtype=np.int64)
    i64 = lambda v: np.array(v, dtype=np.int64)  # noqa: E731
    return (i64(op), i64(seq), i64(arg), tokens, offsets), state(a)


@pytest.mark.parametrize("seed", range(5))
def test_replay_matches_op_by_op(seed):
    trace, recorded = random_trace(seed)
    r = servelab.blocks.BlockAllocator(12, 3, prefix_caching=True)
    p = ref.BlockAllocator(12, 3, prefix_caching=True)
    sr, sp = r.replay(*trace), p.replay(*trace)
    assert sr.dtype == np.int64 and sr.tolist() == sp.tolist()
    assert state(r) == state(p) == recorded
    assert set(sr.tolist()) <= {0, 1, 2}


@pytest.mark.parametrize("bad, exc, message", [
    (lambda t: (t[0], t[1][:-1], *t[2:]), ValueError,
     "op, seq and arg must have the same length, got 3, 2 and 3"),
    (lambda t: (np.array([0, 1, 9]), *t[1:]), ValueError,
     "op 2: unknown op code 9 (0 allocate, 1 append, 2 fork, 3 free)"),
    (lambda t: (t[0], t[1], np.array([1, 5, 0]), *t[3:]), ValueError,
     "op 0: prompt index must be in [0, 1), got 1"),
    (lambda t: (t[0], np.array([0, 0, 0]), t[2], t[3], np.array([0, 9])), ValueError,
     "op 0: prompt 0 spans [0, 9), outside tokens of length 2"),
    (lambda t: (t[0], np.array([0, 1, 0]), *t[2:]), KeyError, "op 1: seq_id 1 is not allocated"),
])
def test_replay_errors(Alloc, bad, exc, message):
    trace = (np.array([0, 1, 3]), np.array([0, 0, 0]), np.array([0, 5, 0]),
             np.array([1, 2]), np.array([0, 2]))
    a = Alloc(4, 2)
    with pytest.raises(exc) as info:
        a.replay(*(np.asarray(x, dtype=np.int64) for x in bad(trace)))
    assert info.value.args == (message,)


# ---- docs ------------------------------------------------------------------------------------

@pytest.mark.parametrize("module", [servelab.blocks, servelab.reference.blocks])
def test_doctests(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
