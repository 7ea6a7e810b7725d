"""Pure-Python twin of the paged KV block allocator (lecture §2.4, §3.5; PagedAttention).

What ``servelab.blocks.BlockAllocator`` (Rust, ``rust/src/blocks.rs``) computes, written to be
read: the rules are :mod:`servelab.blocks`'s (its module docstring is the contract, written
once), and this file enforces the same ones in the shape of nano-vllm's block manager: a free
queue (``_take_free``), a prefix cache (``_cached_prefix``, ``_mark``), the operations, then
the queries. The host tier (§8 milestone 4b) is its own small class, :class:`HostTier`, which
the allocator tells of evictions, hits and registrations. It is not the solution of the
paged-KV assignment (a7 builds a smaller allocator of its own, with another interface). The
Rust path must make the same choice of block at every step, report the same copies, counters
and transfers, and raise the same errors with the same messages
(``tests/test_blocks_state_machine.py`` drives both with the same operations).

>>> a = BlockAllocator(num_blocks=4, block_size=2, prefix_caching=True)
>>> a.allocate(1, [7, 8, 9])
[0, 1]
>>> a.free(1)
>>> a.allocate(2, [7, 8, 5])   # block 0 ([7, 8]) is reused from the cache
[0, 2]
>>> a.num_cached_tokens(2)
2
"""

from __future__ import annotations

import operator
from collections import OrderedDict
from typing import Any, Iterable

import numpy as np

from servelab.blocks import OutOfBlocks

__all__ = ["BlockAllocator", "OutOfBlocks", "block_key", "ROOT_KEY", "TOKEN_LIMIT"]

MAX_NUM_BLOCKS = 1 << 24  # same bounds as rust/src/blocks.rs
MAX_BLOCK_SIZE = 1 << 16
TOKEN_LIMIT = 1 << 32
ROOT_KEY = 0  # the parent key of a sequence's first block

# ---- the hash chain: SplitMix64's finaliser, on 64-bit integers ------------------------------

_M64 = (1 << 64) - 1
_KEY_SEED = 0x7365_7276_656C_6162  # "servelab"
_GOLDEN = 0x9E37_79B9_7F4A_7C15


def _mix(x: int) -> int:
    x = ((x ^ (x >> 30)) * 0xBF58_476D_1CE4_E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D0_49BB_1331_11EB) & _M64
    return x ^ (x >> 31)


def block_key(parent_key: int, token_ids: Iterable[int]) -> int:
    """The cache key of a full block: a hash of its parent block's key and its own tokens.
    Deterministic across runs and equal to Rust's (Python's ``hash`` is salted per process)."""
    h = _mix(((_KEY_SEED ^ parent_key) + _GOLDEN) & _M64)
    for t in token_ids:
        h = _mix(((h ^ t) + _GOLDEN) & _M64)
    return h


# ---- argument checks (messages identical to the Rust core's) ---------------------------------

def _seq_id(x: Any) -> int:
    v = operator.index(x)  # TypeError for a non-integer, as in Rust
    if not -(1 << 63) <= v < (1 << 63):
        raise OverflowError(f"seq_id must fit in int64, got {v}")
    return v


def _token(name: str, t: Any) -> int:
    try:
        v = operator.index(t)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {t!r}") from None
    if not 0 <= v < TOKEN_LIMIT:
        raise ValueError(f"{name} must be in [0, {TOKEN_LIMIT}), got {v}")
    return v


def _tokens(token_ids: Any) -> list[int]:
    if isinstance(token_ids, (str, bytes)) or not hasattr(token_ids, "__iter__"):
        raise TypeError(f"token_ids must be a sequence of integers, got {type(token_ids).__name__}")
    out = [_token(f"token_ids[{i}]", t) for i, t in enumerate(token_ids)]
    if not out:
        raise ValueError("token_ids must not be empty")
    return out


def _out_of_blocks(seq_id: int, need: int, free: int) -> OutOfBlocks:
    return OutOfBlocks(f"seq_id {seq_id} needs {need} new block{'' if need == 1 else 's'}, {free} free")


# ---- the records -----------------------------------------------------------------------------

class Block:
    __slots__ = ("block_id", "ref_count", "key", "parent_key", "token_ids", "hits")

    def __init__(self, block_id: int):
        self.block_id = block_id
        self.ref_count = 0
        self.key: int | None = None  # set iff the cache maps this key to this block
        self.parent_key = ROOT_KEY  # what the key was made with, checked on a hit
        self.token_ids: list[int] = []
        self.hits = 0  # prefix hits on this content (the host tier's "hits" policy)

    def reset(self) -> None:
        """Taken for new content by one sequence."""
        self.key, self.token_ids, self.hits, self.ref_count = None, [], 0, 1


class Seq:
    __slots__ = ("block_table", "keys", "marked", "num_tokens", "num_cached_tokens")

    def __init__(self, block_table: list[int], keys: list[int], marked: int, num_tokens: int,
                 num_cached_tokens: int):
        self.block_table = block_table
        self.keys = keys  # chain keys of the full blocks (prefix caching only)
        self.marked = marked  # leading full blocks already offered to the cache (computed)
        self.num_tokens = num_tokens
        self.num_cached_tokens = num_cached_tokens

    def copy(self) -> "Seq":
        return Seq(list(self.block_table), list(self.keys), self.marked, self.num_tokens,
                   self.num_cached_tokens)


# ---- the host tier (lecture §8 milestone 4b) -----------------------------------------------------

HOST_POLICIES = ("lru", "hits")


class HostEntry:
    __slots__ = ("parent_key", "token_ids", "hits", "stamp")

    def __init__(self, parent_key: int, token_ids: list[int], hits: int, stamp: int):
        self.parent_key, self.token_ids, self.hits, self.stamp = parent_key, token_ids, hits, stamp


class HostTier:
    """Evicted prefix blocks by key, at most ``capacity`` of them (0: no tier, every call a
    no-op), and the transfers an engine replays onto its KV data.

    When full, it drops the entry that ranks first: ``"lru"`` the one offloaded longest ago
    (an entry is never touched on the host: a hit moves it back to the GPU), ``"hits"`` the one
    with the fewest hits, the oldest among equals.

    >>> t = HostTier(1, "lru")
    >>> t.insert(5, 0, [1, 2], hits=3), t.insert(6, 0, [3, 4], hits=0)   # 5 dropped for 6
    (None, (5, 3))
    """

    def __init__(self, capacity: int, policy: str):
        self.capacity, self.policy = capacity, policy
        self.entries: dict[int, HostEntry] = {}
        self.clock = 0
        self.transfers: list[tuple[str, int | None, int, int]] = []
        self.num_hits = self.num_offloads = self.num_evictions = 0

    def rank(self, e: HostEntry) -> tuple[int, int]:
        return (e.hits if self.policy == "hits" else 0, e.stamp)

    def victim(self) -> int:
        """The key a full tier drops (assignment a14's subject)."""
        return min(self.entries, key=lambda k: self.rank(self.entries[k]))

    def insert(self, key: int, parent_key: int, token_ids: list[int], hits: int) -> tuple[int, int] | None:
        """Stores an evicted block; returns ``(key, hits)`` of the entry dropped to make room."""
        victim = None
        if len(self.entries) >= self.capacity:
            v = self.victim()
            victim = (v, self.entries.pop(v).hits)
        self.entries[key] = HostEntry(parent_key, token_ids, hits, self.clock)
        self.clock += 1
        return victim

    def offload(self, block: Block) -> None:
        """A cached block is evicted from the GPU: its prefix moves here."""
        key = block.key
        if not self.capacity or key is None:
            return
        self.num_offloads += 1
        self.transfers.append(("offload", block.block_id, key, block.hits))
        victim = self.insert(key, block.parent_key, block.token_ids, block.hits)
        if victim is not None:
            self.num_evictions += 1
            self.transfers.append(("drop", None, *victim))

    def holds(self, key: int, parent_key: int, token_ids: list[int]) -> bool:
        """Whether ``key`` is here with this content (a hit is checked on the data, as ever)."""
        e = self.entries.get(key)
        return e is not None and e.parent_key == parent_key and e.token_ids == token_ids

    def take(self, key: int) -> HostEntry:
        """Takes a held entry out, to be recalled (:meth:`recalled` once it has a block)."""
        self.num_hits += 1
        return self.entries.pop(key)

    def recalled(self, block_id: int, key: int, entry: HostEntry) -> None:
        """``entry`` came back into ``block_id`` under ``key``: its KV is copied in."""
        self.transfers.append(("recall", block_id, key, entry.hits))

    def superseded(self, key: int) -> None:
        """``key`` is registered on the GPU: a key lives in one tier."""
        old = self.entries.pop(key, None)
        if old is not None:
            self.transfers.append(("drop", None, key, old.hits))

    def keys(self) -> list[int]:
        return sorted(self.entries, key=lambda k: self.rank(self.entries[k]))

    def take_transfers(self) -> list[tuple[str, int | None, int, int]]:
        out, self.transfers = self.transfers, []
        return out


# ---- the allocator -----------------------------------------------------------------------------

def _num_computed(num_computed: Any, num_tokens: int) -> int:
    if num_computed is None:
        return num_tokens
    v = operator.index(num_computed)
    if not 0 <= v <= num_tokens:
        raise ValueError(f"num_computed must be an integer in [0, {num_tokens}], got {v}")
    return v


class BlockAllocator:
    """Same interface as :class:`servelab.blocks.BlockAllocator`."""

    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool = False,
                 host_blocks: int = 0, host_policy: str = "lru"):
        num_blocks, block_size = operator.index(num_blocks), operator.index(block_size)
        host_blocks = operator.index(host_blocks)
        for name, v, hi in (("num_blocks", num_blocks, MAX_NUM_BLOCKS), ("block_size", block_size, MAX_BLOCK_SIZE)):
            if not 1 <= v <= hi:
                raise ValueError(f"{name} must be an integer in [1, {hi}], got {v}")
        if not isinstance(prefix_caching, bool):
            raise TypeError(f"prefix_caching must be a bool, got {prefix_caching!r}")
        if not 0 <= host_blocks <= MAX_NUM_BLOCKS:
            raise ValueError(f"host_blocks must be an integer in [0, {MAX_NUM_BLOCKS}], got {host_blocks}")
        if host_blocks and not prefix_caching:
            raise ValueError(f"host_blocks={host_blocks} needs prefix_caching=True "
                             "(the host tier holds cached prefixes)")
        if not isinstance(host_policy, str):
            raise TypeError(f"host_policy must be a str, got {host_policy!r}")
        if host_policy not in HOST_POLICIES:  # worded as the Rust core words it
            raise ValueError(f"host_policy must be 'lru' or 'hits', got \"{host_policy}\"")
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_ids: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))  # LRU order
        self.cache: dict[int, int] = {}  # key -> block id
        self.seqs: dict[int, Seq] = {}
        self.host = HostTier(host_blocks, host_policy)
        self.num_hits = self.num_lookups = self.num_evictions = self.num_copies = 0

    # -- the free queue --

    def _take_free(self) -> Block:
        """The least recently freed block, for new content; its cached key is evicted."""
        block_id, _ = self.free_ids.popitem(last=False)
        block = self.blocks[block_id]
        if block.key is not None:
            del self.cache[block.key]
            self.num_evictions += 1
            self.host.offload(block)
        block.reset()
        return block

    def _hold(self, block: Block) -> None:
        """One more reference to a cached block (off the free queue if it was free)."""
        if block.ref_count == 0:
            del self.free_ids[block.block_id]
        block.ref_count += 1
        block.hits += 1

    # -- the prefix cache --

    def _keys(self, chunks: list[list[int]]) -> list[int]:
        keys: list[int] = []
        for chunk in chunks:
            if len(chunk) < self.block_size:
                break
            keys.append(block_key(keys[-1] if keys else ROOT_KEY, chunk))
        return keys

    def _cached_prefix(self, keys: list[int], chunks: list[list[int]], max_hits: int) -> list[Block | None]:
        """The longest cached prefix, verified on parent key and tokens: a GPU block per hit, or
        None for a key found on the host tier."""
        hits: list[Block | None] = []
        for i in range(max_hits):
            parent = keys[i - 1] if i else ROOT_KEY
            block_id = self.cache.get(keys[i])
            if block_id is None:
                if not self.host.holds(keys[i], parent, chunks[i]):
                    break
                hits.append(None)
                continue
            block = self.blocks[block_id]
            if block.parent_key != parent or block.token_ids != chunks[i]:
                break
            hits.append(block)
        return hits

    def _mark(self, seq: Seq, upto: int) -> None:
        """Offers the sequence's full blocks ``seq.marked .. upto - 1`` to the cache, in order."""
        for i in range(seq.marked, upto):
            key = seq.keys[i]
            if key not in self.cache:  # first wins
                block = self.blocks[seq.block_table[i]]
                self.cache[key] = block.block_id
                self.host.superseded(key)
                block.key, block.parent_key = key, seq.keys[i - 1] if i else ROOT_KEY
        seq.marked = max(seq.marked, upto)

    def _seq(self, seq_id: Any) -> Seq:
        seq_id = _seq_id(seq_id)
        if seq_id not in self.seqs:
            raise KeyError(f"seq_id {seq_id} is not allocated")
        return self.seqs[seq_id]

    # -- operations --

    def allocate(self, seq_id: int, token_ids: Iterable[int], num_computed: int | None = None) -> list[int]:
        seq_id = _seq_id(seq_id)
        tokens = _tokens(token_ids)
        computed = _num_computed(num_computed, len(tokens))
        if seq_id in self.seqs:
            raise KeyError(f"seq_id {seq_id} is already allocated")
        bs, n = self.block_size, len(tokens)
        chunks = [tokens[i:i + bs] for i in range(0, n, bs)]
        keys = self._keys(chunks) if self.prefix_caching else []
        max_hits = (n - 1) // bs if self.prefix_caching else 0  # one token left to compute
        hits = self._cached_prefix(keys, chunks, max_hits)
        gpu_hits = [b for b in hits if b is not None]
        need = len(chunks) - len(gpu_hits)  # a recalled block needs a fresh GPU block
        free = len(self.free_ids) - sum(b.ref_count == 0 for b in gpu_hits)
        if need > free:
            raise _out_of_blocks(seq_id, need, free)
        # Commit: nothing below can fail.
        self.num_lookups += max_hits
        self.num_hits += len(gpu_hits)
        for block in gpu_hits:
            self._hold(block)
        # out of the host before an eviction below could push them out
        recalled = [self.host.take(keys[i]) for i, b in enumerate(hits) if b is None]
        table = []
        for i, hit in enumerate(hits):
            if hit is None:  # a recall: a fresh block, registered at once (its KV comes by copy)
                entry = recalled.pop(0)
                hit = self._take_free()
                hit.token_ids, hit.hits = entry.token_ids, entry.hits + 1
                hit.key, hit.parent_key = keys[i], entry.parent_key
                self.cache[keys[i]] = hit.block_id
                self.host.recalled(hit.block_id, keys[i], entry)
            table.append(hit.block_id)
        for chunk in chunks[len(hits):]:  # take every new block first...
            block = self._take_free()
            block.token_ids = list(chunk)
            table.append(block.block_id)
        seq = Seq(table, keys, len(hits), n, len(hits) * bs)
        self._mark(seq, min(computed // bs, len(keys)))  # ...then register the computed ones
        self.seqs[seq_id] = seq
        return list(table)

    def mark_computed(self, seq_id: int, num_computed: int) -> None:
        seq = self._seq(seq_id)
        computed = _num_computed(num_computed, seq.num_tokens)
        self._mark(seq, min(computed // self.block_size, len(seq.keys)))

    def append(self, seq_id: int, token_id: int) -> tuple[int, int] | None:
        seq_id = _seq_id(seq_id)
        token = _token("token_id", token_id)
        seq = self._seq(seq_id)
        last = self.blocks[seq.block_table[-1]]
        last_full = seq.num_tokens % self.block_size == 0
        shared = last.ref_count > 1
        if (last_full or shared) and not self.free_ids:
            raise _out_of_blocks(seq_id, 1, 0)
        copy = None
        if last_full:  # a new block
            block = self._take_free()
            seq.block_table.append(block.block_id)
        elif shared:  # copy-on-write
            block = self._take_free()
            block.token_ids = list(last.token_ids)
            last.ref_count -= 1
            seq.block_table[-1] = block.block_id
            self.num_copies += 1
            copy = (last.block_id, block.block_id)
        else:
            block = last
        block.token_ids.append(token)
        seq.num_tokens += 1
        if self.prefix_caching and seq.num_tokens % self.block_size == 0:
            seq.keys.append(block_key(seq.keys[-1] if seq.keys else ROOT_KEY, block.token_ids))
            self._mark(seq, len(seq.keys))  # the tokens before this one are computed
        return copy

    def fork(self, parent_id: int, child_id: int) -> None:
        child_id = _seq_id(child_id)
        parent = self._seq(parent_id)
        if child_id in self.seqs:
            raise KeyError(f"seq_id {child_id} is already allocated")
        for block_id in parent.block_table:
            self.blocks[block_id].ref_count += 1
        self.seqs[child_id] = parent.copy()

    def free(self, seq_id: int) -> None:
        seq_id = _seq_id(seq_id)
        seq = self._seq(seq_id)
        del self.seqs[seq_id]
        for block_id in reversed(seq.block_table):  # tail first: reused before the head
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                self.free_ids[block_id] = None

    # -- queries --

    def block_table(self, seq_id: int) -> list[int]:
        return list(self._seq(seq_id).block_table)

    def num_tokens(self, seq_id: int) -> int:
        return self._seq(seq_id).num_tokens

    def num_cached_tokens(self, seq_id: int) -> int:
        return self._seq(seq_id).num_cached_tokens

    def can_allocate(self, n_tokens: int) -> bool:
        n_tokens = operator.index(n_tokens)
        if n_tokens < 0:
            raise ValueError(f"n_tokens must be a non-negative integer, got {n_tokens}")
        return -(-n_tokens // self.block_size) <= len(self.free_ids)

    def can_append(self, seq_id: int) -> bool:
        seq = self._seq(seq_id)
        needs_block = (seq.num_tokens % self.block_size == 0
                       or self.blocks[seq.block_table[-1]].ref_count > 1)
        return not needs_block or bool(self.free_ids)

    def __contains__(self, seq_id: int) -> bool:
        return _seq_id(seq_id) in self.seqs

    def __len__(self) -> int:
        return len(self.seqs)

    def seq_ids(self) -> list[int]:
        return sorted(self.seqs)

    def block_tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ids = self.seq_ids()
        tables = [self.seqs[i].block_table for i in ids]
        offsets = np.cumsum([0] + [len(t) for t in tables], dtype=np.int64)
        return (np.array(ids, dtype=np.int64), offsets,
                np.array([b for t in tables for b in t], dtype=np.int64))

    def _block(self, block_id: int) -> Block:
        block_id = operator.index(block_id)
        if not 0 <= block_id < len(self.blocks):
            raise ValueError(f"block_id must be in [0, {len(self.blocks)}), got {block_id}")
        return self.blocks[block_id]

    def block_tokens(self, block_id: int) -> list[int]:
        return list(self._block(block_id).token_ids)

    def key_of(self, block_id: int) -> int | None:
        return self._block(block_id).key

    def ref_counts(self) -> np.ndarray:
        return np.array([b.ref_count for b in self.blocks], dtype=np.int64)

    def free_queue(self) -> np.ndarray:
        return np.array(list(self.free_ids), dtype=np.int64)

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_ids)

    @property
    def num_cached_blocks(self) -> int:
        return len(self.cache)

    @property
    def host_blocks(self) -> int:
        return self.host.capacity

    @property
    def host_policy(self) -> str:
        return self.host.policy

    @property
    def num_host_cached_blocks(self) -> int:
        return len(self.host.entries)

    @property
    def num_host_hits(self) -> int:
        return self.host.num_hits

    def host_keys(self) -> list[int]:
        return self.host.keys()

    def take_transfers(self) -> list[tuple[str, int | None, int, int]]:
        return self.host.take_transfers()

    def stats(self) -> dict[str, int]:
        return {"num_blocks": self.num_blocks, "block_size": self.block_size,
                "num_free_blocks": self.num_free_blocks, "num_cached_blocks": self.num_cached_blocks,
                "num_seqs": len(self.seqs), "num_hits": self.num_hits, "num_lookups": self.num_lookups,
                "num_evictions": self.num_evictions, "num_copies": self.num_copies,
                "host_blocks": self.host.capacity, "num_host_cached_blocks": len(self.host.entries),
                "num_host_hits": self.host.num_hits, "num_offloads": self.host.num_offloads,
                "num_host_evictions": self.host.num_evictions}

    def replay(self, op: np.ndarray, seq: np.ndarray, arg: np.ndarray,
               tokens: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """Runs a recorded trace; see :meth:`servelab.blocks.BlockAllocator.replay`."""
        op, seq, arg = op.tolist(), seq.tolist(), arg.tolist()
        tokens, offsets = tokens.tolist(), offsets.tolist()
        if not len(op) == len(seq) == len(arg):
            raise ValueError(f"op, seq and arg must have the same length, "
                             f"got {len(op)}, {len(seq)} and {len(arg)}")
        status = []
        for i, (code, s, a) in enumerate(zip(op, seq, arg)):
            try:
                if code == 0:
                    if not 0 <= a < len(offsets) - 1:
                        raise ValueError(f"prompt index must be in [0, {max(len(offsets) - 1, 0)}), got {a}")
                    lo, hi = offsets[a], offsets[a + 1]
                    if not 0 <= lo <= hi <= len(tokens):
                        raise ValueError(f"prompt {a} spans [{lo}, {hi}), outside tokens of length {len(tokens)}")
                    self.allocate(s, tokens[lo:hi])
                    status.append(0)
                elif code == 1:
                    status.append(0 if self.append(s, a) is None else 1)
                elif code == 2:
                    self.fork(s, a)
                    status.append(0)
                elif code == 3:
                    self.free(s)
                    status.append(0)
                else:
                    raise ValueError(f"unknown op code {code} (0 allocate, 1 append, 2 fork, 3 free)")
            except OutOfBlocks:
                status.append(2)
            except (KeyError, ValueError) as e:
                raise type(e)(f"op {i}: {e.args[0]}") from None
        return np.array(status, dtype=np.int64)

    def check_invariants(self) -> None:
        """Asserts the allocator's invariants (raises AssertionError naming the broken one)."""
        refs = [0] * len(self.blocks)
        for seq_id, seq in self.seqs.items():
            assert len(seq.block_table) == -(-seq.num_tokens // self.block_size), seq_id
            for block_id in seq.block_table:
                refs[block_id] += 1
        for block in self.blocks:
            assert block.ref_count == refs[block.block_id], f"block {block.block_id}: ref_count"
            assert (block.ref_count == 0) == (block.block_id in self.free_ids), f"block {block.block_id}: free"
            if block.key is not None:
                assert self.cache[block.key] == block.block_id
                assert len(block.token_ids) == self.block_size
                assert block_key(block.parent_key, block.token_ids) == block.key
        assert all(self.blocks[b].key == k for k, b in self.cache.items())
        assert len(self.host.entries) <= self.host.capacity, "host tier over capacity"
        for k, e in self.host.entries.items():
            assert k not in self.cache, f"key {k} in both tiers"
            assert block_key(e.parent_key, e.token_ids) == k, f"host key {k}: content"

    def __repr__(self) -> str:
        return (f"BlockAllocator(num_blocks={self.num_blocks}, block_size={self.block_size}, "
                f"prefix_caching={self.prefix_caching}, free={self.num_free_blocks}, seqs={len(self.seqs)})")
