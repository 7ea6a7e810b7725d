"""The KV data of a tiered cache's host tier (lecture §8, milestone 4b).

The allocator (:class:`servelab.blocks.BlockAllocator` with ``host_blocks > 0``) decides which
prefix blocks move to host memory and back; it only knows tokens and keys. This module moves
the KV data accordingly: :class:`HostKVStore` keeps the K and V of each offloaded key in host
(NumPy) arrays and replays the allocator's transfers onto the paged pool, in order:

* ``("offload", block, key, hits)``: the GPU block was evicted; its K and V are copied out under
  ``key``. The pool still holds them: a block is written only by a forward, and the engine
  applies the transfers before each forward.
* ``("recall", block, key, hits)``: a prompt hit ``key`` on the host; its K and V are copied into the
  fresh GPU block, which the forward then reads as a prefix-cache hit (no recomputation, so the
  tokens are those of a run without the tier).
* ``("drop", None, key, hits)``: the host tier no longer holds ``key``.

:class:`HostTierHook` is the engine's step hook (:class:`servelab.engine.core.StepHook`) for
an allocator with a host tier: before each forward it replays the step's transfers and prices each
recalled block as its tokens' copy over the host link (``hw_model.kv_host_transfer_s``), as the
simulator prices it. ``servelab.engine`` registers it, so ``Engine(host_blocks=...)`` has it.

>>> from servelab.blocks import BlockAllocator
>>> from servelab.tiny_llm import TINY
>>> from servelab.tiny_llm.paged import PagedKVPool
>>> pool, store = PagedKVPool(TINY, 2, 2), HostKVStore()
>>> alloc = BlockAllocator(2, 2, prefix_caching=True, host_blocks=4)
>>> pool.k[:, 0] = 1.0                              # stands for the KV of [1, 2]
>>> alloc.allocate(0, [1, 2, 3]); alloc.free(0)
[0, 1]
>>> alloc.allocate(1, [5, 5, 5, 5]); alloc.free(1)  # block 0 is evicted: offloaded
[1, 0]
>>> store.apply(alloc.take_transfers(), pool), len(store)
(0, 1)
>>> pool.k[:, 0] = 0.0                              # the forward overwrites block 0
>>> alloc.allocate(2, [1, 2, 9])                    # [1, 2] comes back from the host
[0, 1]
>>> store.apply(alloc.take_transfers(), pool), float(pool.k[:, 0].min())
(1, 1.0)
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from servelab import hw_model
from servelab.tiny_llm.paged import PagedKVPool

__all__ = ["HostKVStore", "HostTierHook"]


class HostKVStore:
    """K and V of the host tier's blocks, by key (host memory: plain NumPy arrays)."""

    def __init__(self) -> None:
        self._kv: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def __len__(self) -> int:
        return len(self._kv)

    def keys(self) -> list[int]:
        return sorted(self._kv)

    def apply(self, transfers: Iterable[tuple[str, int | None, int, int]], pool: PagedKVPool) -> int:
        """Replays ``transfers`` (from ``BlockAllocator.take_transfers``) onto ``pool`` in order;
        returns how many blocks were recalled (the engine prices their copy)."""
        recalled = 0
        for kind, block, key, _hits in transfers:
            if kind == "offload":
                self._kv[key] = (pool.k[:, block].copy(), pool.v[:, block].copy())
            elif kind == "recall":
                k, v = self._kv.pop(key)
                pool.k[:, block], pool.v[:, block] = k, v
                recalled += 1
            elif kind == "drop":
                self._kv.pop(key, None)
            else:
                raise ValueError(f"transfer kind must be 'offload', 'recall' or 'drop', got {kind!r}")
        return recalled


class HostTierHook:
    """The host tier's step hook: its :class:`HostKVStore` follows the engine's allocator."""

    def __init__(self) -> None:
        self.store = HostKVStore()

    @classmethod
    def for_engine(cls, engine: Any) -> HostTierHook | None:
        """A hook for ``engine`` if its allocator has a host tier, else None."""
        return cls() if engine.allocator.host_blocks else None

    def before_forward(self, engine: Any) -> float:
        """Replays the transfers since the last step (nothing has written the pool since the
        scheduler planned); returns the recalled blocks' copy time, s."""
        recalled = self.store.apply(engine.allocator.take_transfers(), engine.pool)
        if not recalled:
            return 0.0
        # tokens x one token's copy, as the simulator prices it (bit for bit)
        return recalled * engine.limits.block_size * hw_model.kv_host_transfer_s(engine.cost_model, engine.gpu, 1)
