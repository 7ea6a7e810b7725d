"""KV caches: where a sequence keeps the keys and values it has computed (§2.2, §2.4).

A forward talks to a cache through four calls (:class:`KVCacheProtocol`), so that other layouts
(a paged cache addressed through block tables, §3.5 and lecture 3) can stand in without touching
the model:

1. ``reserve(n_new)`` before anything is computed: make room for ``n_new`` more tokens, or raise
   ``ValueError`` (overflow past ``max_len``) and change nothing;
2. ``update(layer, k_new, v_new)`` once per layer: store the new tokens' K and V (each
   ``(n_kv_heads, n_new, d_head)``) after the ``len(cache)`` cached ones, and return the K and V of
   the whole sequence so far, ``(n_kv_heads, len(cache) + n_new, d_head)``, for attention;
3. ``commit(n_new)`` when the forward is done: the new tokens now count in ``len(cache)``;
4. ``rollback()`` if the forward failed half-way: forget what was reserved.

Two layouts live here. :class:`KVCache` grows as tokens arrive (doubling its arrays, like a
Python list). :class:`ContiguousKVCache` reserves ``max_len`` tokens up front, as early serving
systems did when they could not know how long a request would run; demo 01 part 4 measures how
much of that reservation a short request leaves empty.

>>> from servelab.tiny_llm.config import TINY
>>> cache = ContiguousKVCache(TINY)
>>> cache.reserved_tokens, cache.reserved_bytes, len(cache)
(256, 131072, 0)
"""

from __future__ import annotations

from typing import Protocol, TypeGuard, runtime_checkable

import numpy as np

from servelab import _checks
from servelab.tiny_llm.config import ModelConfig

__all__ = ["KVCacheProtocol", "KVCache", "ContiguousKVCache", "is_kv_cache"]


@runtime_checkable
class KVCacheProtocol(Protocol):
    """What :meth:`TinyLLM.forward` needs of a cache (see the module docstring)."""

    config: ModelConfig
    max_len: int

    def __len__(self) -> int: ...

    def reserve(self, n_new: int) -> None: ...

    def update(self, layer: int, k_new: np.ndarray,
               v_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    def commit(self, n_new: int) -> None: ...

    def rollback(self) -> None: ...


# servelab's own layouts, each known to hold the protocol: an exact type among them needs no
# runtime protocol check, which looks up every member of the protocol on each call (tens of
# microseconds on Python 3.11, a tenth of a tiny-model decode step, and a forward checks its
# caches every time)
OWN_LAYOUTS: set[type] = set()


def is_kv_cache(obj: object) -> TypeGuard[KVCacheProtocol]:
    """``isinstance(obj, KVCacheProtocol)``, answered at once for servelab's own caches.

    >>> from servelab.tiny_llm.config import TINY
    >>> is_kv_cache(KVCache(TINY)), is_kv_cache([])
    (True, False)
    """
    return type(obj) in OWN_LAYOUTS or isinstance(obj, KVCacheProtocol)


class OneForwardAtATime:
    """The reserve / update / commit bookkeeping that every cache of :class:`KVCacheProtocol`
    shares: one forward at a time reserves ``n_new`` slots, each layer's ``update`` brings
    exactly that many, ``commit`` makes them part of the cache and ``rollback`` forgets them.
    Subclasses keep ``_len`` (tokens cached), ``_pending`` (reserved) and ``max_len``."""

    _len: int
    _pending: int
    max_len: int

    def _check_reservation(self, n_new: int) -> int:
        """Checks a forward of ``n_new`` tokens may start; returns the length it would reach."""
        if self._pending:
            raise ValueError(f"cache already has {self._pending} tokens reserved by a forward "
                             "that has not committed (one cache serves one forward at a time)")
        if not _checks.is_int(n_new) or n_new < 1:
            raise ValueError(f"n_new must be a positive integer, got {n_new!r:.80}")
        end = self._len + n_new
        if end > self.max_len:
            raise ValueError(f"cache overflow: {self._len} cached + {n_new} new tokens = "
                             f"{end} > max_len {self.max_len} (n_new={n_new})")
        return end

    def _check_update(self, k_new: np.ndarray) -> int:
        """The number of new tokens in ``k_new``, which must be the number reserved."""
        n = k_new.shape[1]
        if n != self._pending:
            raise ValueError(f"update got {n} new tokens but {self._pending} were reserved")
        return n

    def commit(self, n_new: int) -> None:
        if not _checks.is_int(n_new) or n_new != self._pending:
            raise ValueError(f"commit of n_new={n_new!r:.80} tokens but {self._pending} were reserved")
        self._len += n_new
        self._pending = 0

    def rollback(self) -> None:
        self._pending = 0


class _ArrayKVCache(OneForwardAtATime):
    """K and V of one sequence in two arrays ``(n_layers, n_kv_heads, capacity, d_head)``."""

    def __init__(self, config: ModelConfig, max_len: int | None, capacity: int | None) -> None:
        if not isinstance(config, ModelConfig):
            raise ValueError(f"config must be a ModelConfig, got {config!r}")
        limit = config.max_len if max_len is None else max_len
        if not _checks.is_int(limit) \
                or not 1 <= limit <= config.max_len:
            raise ValueError(f"max_len must be an integer in [1, {config.max_len}] "
                             f"(the model's max_len), got {max_len!r}")
        self.config = config
        self.max_len = int(limit)
        self._len = 0
        self._pending = 0
        cap = self.max_len if capacity is None else min(capacity, self.max_len)
        shape = (config.n_layers, config.n_kv_heads, cap, config.d_head)
        self._k = np.zeros(shape, dtype=np.float32)
        self._v = np.zeros(shape, dtype=np.float32)

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.config.name!r}, tokens={self._len}, "
                f"capacity={self.capacity}, max_len={self.max_len})")

    @property
    def capacity(self) -> int:
        """Tokens the arrays hold room for right now."""
        return self._k.shape[2]

    @property
    def nbytes(self) -> int:
        """Bytes allocated for K and V (used or not)."""
        return self._k.nbytes + self._v.nbytes

    @property
    def used_bytes(self) -> int:
        """Bytes of K and V actually stored: ``len(cache) * kv_bytes_per_token``."""
        return self._len * self.config.kv_bytes_per_token

    def reserve(self, n_new: int) -> None:
        self._check_reservation(n_new)
        if self._len + n_new > self.capacity:
            self._grow(self._len + n_new)
        self._pending = n_new

    def _grow(self, need: int) -> None:
        raise AssertionError(f"{type(self).__name__} cannot grow (need {need})")  # pragma: no cover

    def update(self, layer: int, k_new: np.ndarray,
               v_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = self._check_update(k_new)
        end = self._len + n
        self._k[layer, :, self._len:end] = k_new
        self._v[layer, :, self._len:end] = v_new
        return self._k[layer, :, :end], self._v[layer, :, :end]

    def truncate(self, n_tokens: int) -> None:
        """Forget every token after the first ``n_tokens`` (their slots are reused).

        >>> from servelab.tiny_llm.config import TINY
        >>> KVCache(TINY).truncate(3)
        Traceback (most recent call last):
        ...
        ValueError: n_tokens must be an integer in [0, 0] (the tokens cached), got 3
        """
        if not _checks.is_int(n_tokens) \
                or not 0 <= n_tokens <= self._len:
            raise ValueError(f"n_tokens must be an integer in [0, {self._len}] (the tokens "
                             f"cached), got {n_tokens!r}")
        self._len = int(n_tokens)

    def _layer(self, layer: object) -> int:
        if not _checks.is_int(layer) \
                or not 0 <= layer < self.config.n_layers:
            raise ValueError(f"layer must be an integer in [0, {self.config.n_layers}), got {layer!r:.80}")
        return int(layer)

    def keys(self, layer: int) -> np.ndarray:
        """Cached keys of ``layer``, ``(n_kv_heads, len(cache), d_head)`` (a read-only view)."""
        view = self._k[self._layer(layer), :, :self._len]
        view.flags.writeable = False
        return view

    def values(self, layer: int) -> np.ndarray:
        """Cached values of ``layer``, ``(n_kv_heads, len(cache), d_head)`` (a read-only view)."""
        view = self._v[self._layer(layer), :, :self._len]
        view.flags.writeable = False
        return view


class KVCache(_ArrayKVCache):
    """A cache that grows with the sequence, up to ``max_len`` (default: the model's).

    Its arrays double when full, so appending one token at a time costs amortised O(1) copies.

    >>> from servelab.tiny_llm.config import TINY
    >>> cache = KVCache(TINY)
    >>> len(cache), cache.capacity
    (0, 16)
    >>> KVCache(TINY, max_len=1000)
    Traceback (most recent call last):
    ...
    ValueError: max_len must be an integer in [1, 256] (the model's max_len), got 1000
    """

    def __init__(self, config: ModelConfig, max_len: int | None = None,
                 initial_capacity: int = 16) -> None:
        super().__init__(config, max_len, _checks.integer("initial_capacity", initial_capacity, 1, None))

    def _grow(self, need: int) -> None:
        cap = self.capacity
        while cap < need:
            cap *= 2
        cap = min(cap, self.max_len)
        shape = (*self._k.shape[:2], cap, self._k.shape[3])
        k, v = np.zeros(shape, np.float32), np.zeros(shape, np.float32)
        k[:, :, :self._len] = self._k[:, :, :self._len]
        v[:, :, :self._len] = self._v[:, :, :self._len]
        self._k, self._v = k, v


class ContiguousKVCache(_ArrayKVCache):
    """A cache that reserves room for ``max_len`` tokens when it is made (§2.4).

    >>> from servelab.tiny_llm.config import TINY
    >>> cache = ContiguousKVCache(TINY, max_len=100)
    >>> cache.reserved_tokens, cache.utilisation
    (100, 0.0)
    """

    def __init__(self, config: ModelConfig, max_len: int | None = None) -> None:
        super().__init__(config, max_len, None)

    @property
    def reserved_tokens(self) -> int:
        """Token slots reserved up front: ``max_len``."""
        return self.max_len

    @property
    def reserved_bytes(self) -> int:
        """Bytes reserved up front: ``max_len * kv_bytes_per_token``."""
        return self.max_len * self.config.kv_bytes_per_token

    @property
    def utilisation(self) -> float:
        """Fraction of the reservation holding KV: ``len(cache) / max_len``."""
        return self._len / self.max_len


OWN_LAYOUTS.update((KVCache, ContiguousKVCache))
