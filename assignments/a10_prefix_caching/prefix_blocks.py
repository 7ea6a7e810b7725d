"""Assignment 10, part 1: paged KV blocks with prefix caching (lecture §3.5, §8 milestone 3).

``PrefixBlocks`` is ``servelab.blocks.BlockAllocator(num_blocks, block_size,
prefix_caching=True)`` without ``fork``: its block tables, free queue, hits and errors must
equal servelab's after every operation. The rules are in ``servelab.blocks``'s docstring
(**Tables**, **Free queue**, **Prefix caching**, **Registered when computed**); start from your
a7 allocator. ``allocate`` behaves as servelab's ``allocate(seq_id, tokens, num_computed=0)``:
it registers nothing new, ``mark_computed`` and ``append`` register blocks once computed.

The key of a full block must stand for its tokens *and* every token before them (a chain over
the parent's key), so a block is reused only after the same whole prefix. Python's ``hash`` of
a tuple of integers is the same in every process, so ``hash((parent_key, chunk))`` will do;
since two prefixes may collide on a hash, a hit also compares the block's stored tokens.

>>> a = PrefixBlocks(num_blocks=4, block_size=2)
>>> a.allocate(1, [7, 8, 9])
[0, 1]
>>> a.mark_computed(1, 3)           # [7, 8] is computed: block 0 is registered
>>> a.free(1)
>>> a.allocate(2, [7, 8, 5]), a.num_cached_tokens(2)   # block 0 reused from the cache
([0, 2], 2)
"""

from __future__ import annotations

from collections import OrderedDict

from prefix_errors import OutOfBlocks  # given: mirrors servelab.blocks.OutOfBlocks

ROOT_KEY = 0  # the parent key of a sequence's first block


def chain_key(parent_key: int, chunk: tuple) -> int:
    """The cache key of a full block holding ``chunk`` after the prefix ``parent_key`` stands for."""
    ### BEGIN SOLUTION
    return hash((parent_key, chunk))
    ### END SOLUTION


class _Seq:
    """One sequence: its block table, the chain keys of its leading registered (or reused)
    blocks, its length and how many of its tokens came from the cache."""

    def __init__(self, table: list[int], keys: list[int], num_tokens: int, cached: int) -> None:
        self.table, self.keys, self.num_tokens, self.cached = table, keys, num_tokens, cached


class PrefixBlocks:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        ### BEGIN SOLUTION
        self.free_queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.ref_count = [0] * num_blocks
        self.content: list[list[int]] = [[] for _ in range(num_blocks)]  # tokens each block holds
        self.key: list[int | None] = [None] * num_blocks  # the key the cache maps to the block
        self.cache: dict[int, int] = {}  # key -> block
        self.seqs: dict[int, _Seq] = {}
        ### END SOLUTION

    def allocate(self, seq_id: int, tokens: list[int]) -> list[int]:
        """Blocks for all ``tokens``: cached ones for the longest registered prefix (at most
        ``(len(tokens) - 1) // block_size`` of them), fresh ones from the free queue's front for
        the rest. Registers nothing new. ``OutOfBlocks`` (nothing changed) if they do not fit."""
        ### BEGIN SOLUTION
        if seq_id in self.seqs:
            raise KeyError(f"seq_id {seq_id} is already allocated")
        bs, n = self.block_size, len(tokens)
        hits: list[int] = []
        keys: list[int] = []
        for i in range((n - 1) // bs):  # at least one token is left to compute
            chunk = tuple(tokens[i * bs:(i + 1) * bs])
            key = chain_key(keys[-1] if keys else ROOT_KEY, chunk)
            block = self.cache.get(key)
            if block is None or tuple(self.content[block]) != chunk:
                break
            hits.append(block)
            keys.append(key)
        need = -(-n // bs) - len(hits)
        free = len(self.free_queue) - sum(self.ref_count[b] == 0 for b in hits)
        if need > free:
            raise OutOfBlocks(f"seq_id {seq_id} needs {need} new blocks, {free} free")
        for b in hits:
            if self.ref_count[b] == 0:  # a free block still cached: back in use
                del self.free_queue[b]
            self.ref_count[b] += 1
        table = list(hits)
        for start in range(len(hits) * bs, n, bs):
            b = self._take()
            self.content[b] = list(tokens[start:start + bs])
            table.append(b)
        self.seqs[seq_id] = _Seq(table, keys, n, len(hits) * bs)
        return list(table)
        ### END SOLUTION

    def mark_computed(self, seq_id: int, num_computed: int) -> None:
        """The first ``num_computed`` tokens' KV exists: register the full blocks they cover."""
        ### BEGIN SOLUTION
        seq = self._seq(seq_id)
        self._register(seq, num_computed // self.block_size)
        ### END SOLUTION

    def append(self, seq_id: int, token: int) -> None:
        """One more token: a fresh block when the last is full (``OutOfBlocks`` if none is
        free); a block it fills is registered (the tokens before it are computed)."""
        ### BEGIN SOLUTION
        seq = self._seq(seq_id)
        if seq.num_tokens % self.block_size == 0:
            if not self.free_queue:
                raise OutOfBlocks(f"seq_id {seq_id} needs 1 new block, 0 free")
            seq.table.append(self._take())
        self.content[seq.table[-1]].append(token)
        seq.num_tokens += 1
        if seq.num_tokens % self.block_size == 0:
            self._register(seq, seq.num_tokens // self.block_size)
        ### END SOLUTION

    def free(self, seq_id: int) -> None:
        """Drops the sequence; blocks nobody holds go to the queue's back, last block first
        (they keep their keys until taken for new content)."""
        ### BEGIN SOLUTION
        seq = self._seq(seq_id)
        del self.seqs[seq_id]
        for b in reversed(seq.table):
            self.ref_count[b] -= 1
            if self.ref_count[b] == 0:
                self.free_queue[b] = None
        ### END SOLUTION

    def can_append(self, seq_id: int) -> bool:
        """Whether ``append(seq_id, ...)`` would succeed."""
        ### BEGIN SOLUTION
        return self._seq(seq_id).num_tokens % self.block_size != 0 or bool(self.free_queue)
        ### END SOLUTION

    def num_cached_tokens(self, seq_id: int) -> int:
        """Tokens ``allocate`` took from the cache: ``hits * block_size``."""
        ### BEGIN SOLUTION
        return self._seq(seq_id).cached
        ### END SOLUTION

    def block_table(self, seq_id: int) -> list[int]:
        """A copy of the sequence's block table (``KeyError`` for an unknown id)."""
        ### BEGIN SOLUTION
        return list(self._seq(seq_id).table)
        ### END SOLUTION

    @property
    def num_free_blocks(self) -> int:
        """Blocks nobody holds, cached or not."""
        ### BEGIN SOLUTION
        return len(self.free_queue)
        ### END SOLUTION

    def _seq(self, seq_id: int) -> _Seq:
        """The sequence ``seq_id``, or ``KeyError`` (yours to write)."""
        ### BEGIN SOLUTION
        if seq_id not in self.seqs:
            raise KeyError(f"seq_id {seq_id} is not allocated")
        return self.seqs[seq_id]
        ### END SOLUTION

    def _take(self) -> int:
        """The front of the free queue, for new content: a key it still held is evicted (yours
        to write)."""
        ### BEGIN SOLUTION
        b, _ = self.free_queue.popitem(last=False)
        if self.key[b] is not None:
            del self.cache[self.key[b]]
            self.key[b] = None
        self.content[b] = []
        self.ref_count[b] = 1
        return b
        ### END SOLUTION

    def _register(self, seq: _Seq, upto: int) -> None:
        """Offers the sequence's blocks ``len(seq.keys) .. upto - 1`` to the cache, in order; a
        key already cached keeps its first block (yours to write)."""
        ### BEGIN SOLUTION
        for i in range(len(seq.keys), upto):
            b = seq.table[i]
            key = chain_key(seq.keys[-1] if seq.keys else ROOT_KEY, tuple(self.content[b]))
            seq.keys.append(key)
            if key not in self.cache:
                self.cache[key] = b
                self.key[b] = key
        ### END SOLUTION
