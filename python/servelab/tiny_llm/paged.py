"""A paged KV cache: every sequence's keys and values live in one shared pool of blocks (§2.4, §3.5).

:class:`PagedKVPool` holds, per layer, a K pool and a V pool of shape
``(num_blocks, block_size, n_kv_heads, d_head)``. Which blocks belong to which sequence is the
business of :class:`servelab.blocks.BlockAllocator` (the block tables); the pool only stores
data. :class:`PagedKVCache` is one sequence's view of the pool: it implements the four-call
protocol of :mod:`servelab.tiny_llm.cache`, so :meth:`TinyLLM.forward_batch` runs on it
unchanged. What paging adds: ``reserve`` only checks that the sequence's block table already has
the slots (the engine calls the allocator's ``allocate``/``append`` first: the allocator needs
the token ids, the cache never sees them); ``update`` scatters the new K and V into their slots
(token ``t`` sits in block ``table[t // block_size]`` at offset ``t % block_size``) and gathers
the whole sequence back through the block table, as PagedAttention reads KV.

``len(cache)`` counts tokens whose KV is *computed*, which can be fewer than the tokens the
allocator holds for the sequence (a prompt prefilled in chunks) and start above zero (a prefix
cache hit: ``PagedKVCache(pool, allocator, seq_id, num_computed=allocator.num_cached_tokens(seq_id))``
makes the forward skip the cached tokens). A copy-on-write reported by ``allocator.append``
is applied with :meth:`PagedKVPool.copy_block`.

>>> from servelab.blocks import BlockAllocator
>>> from servelab.tiny_llm import TINY, TinyLLM
>>> model, pool = TinyLLM(TINY), PagedKVPool(TINY, num_blocks=8, block_size=4)
>>> alloc = BlockAllocator(8, 4)
>>> prompt = list(b"hello world")
>>> alloc.allocate(0, prompt)
[0, 1, 2]
>>> cache = PagedKVCache(pool, alloc, 0)
>>> token = int(model.forward(prompt, cache).argmax())
>>> len(cache), alloc.append(0, token)        # 12th token: block 2 has room, no copy
(11, None)
>>> logits = model.forward([token], cache)
>>> len(cache), pool.bytes_per_block
(12, 2048)
"""

from __future__ import annotations

import numpy as np

from servelab import _checks
from servelab.blocks import BlockAllocator
from servelab.tiny_llm.cache import OWN_LAYOUTS, OneForwardAtATime
from servelab.tiny_llm.config import MAX_VALUES, ModelConfig

__all__ = ["PagedKVPool", "PagedKVCache"]

F32 = np.float32


class PagedKVPool:
    """K and V of every layer in blocks: ``k[layer]`` is ``(num_blocks, block_size, n_kv_heads,
    d_head)``, and so is ``v[layer]``.

    >>> from servelab.tiny_llm import TINY
    >>> PagedKVPool(TINY, num_blocks=0, block_size=4)
    Traceback (most recent call last):
    ...
    ValueError: num_blocks must be a positive integer, got 0
    """

    def __init__(self, config: ModelConfig, num_blocks: int, block_size: int) -> None:
        if not isinstance(config, ModelConfig):
            raise ValueError(f"config must be a ModelConfig, got {config!r}")
        for name, v in (("num_blocks", num_blocks), ("block_size", block_size)):
            _checks.positive_int(name, v)
        values = config.n_layers * int(num_blocks) * int(block_size) * config.kv_dim
        if values > MAX_VALUES:  # a ValueError naming the arguments, not a bare MemoryError
            raise ValueError(f"num_blocks={int(num_blocks)} x block_size={int(block_size)} KV slots of "
                             f"{config.n_layers * config.kv_dim} values each (n_layers x n_kv_heads x "
                             f"d_head) make {values} values per K or V pool, more than tiny_llm's "
                             f"limit of {MAX_VALUES} (MAX_VALUES, 512 MiB of FP32)")
        self.config = config
        self.num_blocks, self.block_size = int(num_blocks), int(block_size)
        shape = (config.n_layers, self.num_blocks, self.block_size, config.n_kv_heads,
                 config.d_head)
        self.k = np.zeros(shape, F32)
        self.v = np.zeros(shape, F32)

    def __repr__(self) -> str:
        return (f"PagedKVPool({self.config.name!r}, num_blocks={self.num_blocks}, "
                f"block_size={self.block_size})")

    @property
    def bytes_per_block(self) -> int:
        """K and V of ``block_size`` tokens over all layers: ``block_size * kv_bytes_per_token``."""
        return self.block_size * self.config.kv_bytes_per_token

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes

    def copy_block(self, src: int, dst: int) -> None:
        """Copy-on-write (§3.5): block ``dst`` gets ``src``'s K and V in every layer."""
        for name, b in (("src", src), ("dst", dst)):
            _checks.integer(name, b, 0, self.num_blocks - 1)
        self.k[:, dst] = self.k[:, src]
        self.v[:, dst] = self.v[:, src]


class PagedKVCache(OneForwardAtATime):
    """One sequence's KV in a :class:`PagedKVPool`, addressed through the allocator's block
    table (see the module docstring). ``max_len`` is the model's."""

    def __init__(self, pool: PagedKVPool, allocator: BlockAllocator, seq_id: int,
                 num_computed: int = 0) -> None:
        if not isinstance(pool, PagedKVPool):
            raise ValueError(f"pool must be a PagedKVPool, got {pool!r}")
        if allocator.block_size != pool.block_size or allocator.num_blocks != pool.num_blocks:
            raise ValueError(f"allocator ({allocator.num_blocks} blocks of {allocator.block_size}) "
                             f"does not match pool ({pool.num_blocks} blocks of {pool.block_size})")
        held = allocator.num_tokens(seq_id)  # KeyError for an unknown sequence
        if not _checks.is_int(num_computed) \
                or not 0 <= num_computed <= held:
            raise ValueError(f"num_computed must be an integer in [0, {held}] (the tokens the "
                             f"allocator holds for seq_id {seq_id}), got {num_computed!r}")
        self.pool, self.allocator, self.seq_id = pool, allocator, seq_id
        self.config = pool.config
        self.max_len = pool.config.max_len
        self._len = int(num_computed)
        self._pending = 0
        self._table = np.zeros(0, np.int64)

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        return f"PagedKVCache(seq_id={self.seq_id}, tokens={self._len})"

    def reserve(self, n_new: int) -> None:
        end = self._check_reservation(n_new)
        held = self.allocator.num_tokens(self.seq_id)
        if end > held:
            raise ValueError(f"seq_id {self.seq_id} holds slots for {held} tokens in the "
                             f"allocator, not {end} ({self._len} cached + n_new={n_new}): allocate "
                             "or append before the forward")
        self._table = np.asarray(self.allocator.block_table(self.seq_id), np.int64)
        self._pending = n_new

    def update(self, layer: int, k_new: np.ndarray,
               v_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = self._check_update(k_new)
        bs, end = self.pool.block_size, self._len + n
        pos = np.arange(self._len, end)
        blocks, offsets = self._table[pos // bs], pos % bs
        k_pool, v_pool = self.pool.k[layer], self.pool.v[layer]
        k_pool[blocks, offsets] = k_new.transpose(1, 0, 2)  # scatter (n, n_kv, d) into slots
        v_pool[blocks, offsets] = v_new.transpose(1, 0, 2)
        used = self._table[:-(-end // bs)]  # gather the sequence's blocks, in table order
        shape = (len(used) * bs, self.config.n_kv_heads, self.config.d_head)
        k = k_pool[used].reshape(shape)[:end].transpose(1, 0, 2)
        v = v_pool[used].reshape(shape)[:end].transpose(1, 0, 2)
        return k, v


OWN_LAYOUTS.add(PagedKVCache)
