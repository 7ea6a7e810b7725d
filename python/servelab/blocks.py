"""Paged KV blocks (lecture §2.4, §3.5; PagedAttention; the course project's milestones 2-3).

Reserving ``max_len`` slots of KV cache per request wastes most of the memory that limits the
batch size. A paged cache cuts KV memory into blocks of ``block_size`` tokens and gives each
sequence a *block table*, so memory is taken a block at a time, shared between sequences
(``fork``, prefix caching) and given back the moment a request ends.

:class:`BlockAllocator` is the bookkeeping half: which block holds which tokens of which
sequence. It runs in Rust (``servelab._core``, folder ``rust/src/blocks/``); the course's own
copy also holds a pure-Python twin (:mod:`servelab.reference.blocks`), checked against it
operation by operation by a Hypothesis state machine.

**The contract.** This list is the allocator's contract, written once: the Rust core and the
twin enforce it and link here. The rules are vLLM's, kept exact so that both implementations
choose the same block at every step:

* **Tables.** A sequence of ``n`` tokens holds ``ceil(n / block_size)`` blocks, the last maybe
  partly filled. ``allocate`` gives a new sequence its blocks; ``append`` adds one token and
  takes a new block when the last one is full.
* **Sharing.** ``fork`` gives a child every block of its parent (reference counts).
  ``append`` into a shared, partly filled last block first copies it into a fresh block
  (copy-on-write) and returns the copy ``(src, dst)``, for the KV cache to copy the data. A
  shared *full* block is never written (the next token goes into a new block), so it needs no copy.
* **Free queue.** A block with no reference is free, whether or not it still holds a cached
  prefix; ``num_free_blocks`` counts them all. Free blocks wait in one queue, initially
  ``0, 1, ..., num_blocks - 1``. New blocks come from its front; ``free`` puts a sequence's
  newly unreferenced blocks at its back, *last block first*: the least recently freed block is
  reused first and, within a sequence, tail blocks before head blocks (a head is the prefix
  other requests are likeliest to share).
* **Prefix caching** (``prefix_caching=True``). A full block's *key* is a hash chain,
  ``key_i = block_key(key_{i-1}, tokens of block i)`` with ``key_{-1} = ROOT_KEY = 0``, so a
  key stands for the whole prefix up to and including the block. The cache maps a key to at
  most one block; when a block's key is already cached in another block, the first one stays the
  cached copy and the newcomer is not cached. A free block keeps its key and its tokens until it
  is taken from the free queue for new content: that is an *eviction*. ``allocate`` walks the
  prompt's full blocks and reuses cached ones until the first miss. A hit is checked on the stored
  data, never on the hash alone: the block's tokens and its parent key must both equal the
  request's. At most ``(n - 1) // block_size`` blocks can hit, so that at least one prompt
  token is always left to compute (as vLLM does: the model must run on one token to produce the
  next one's logits). ``num_cached_tokens(seq_id)`` is the number of tokens reused
  (``hits * block_size``); a forked child inherits its parent's.
* **Registered when computed** (vLLM v1's ``cache_blocks``). A key must not be findable before
  its block's KV exists, or a reader would skip tokens nobody has computed. ``allocate(seq_id,
  tokens, num_computed=c)`` takes all its new blocks first (evicting as it goes), then registers
  only its new full blocks inside the first ``c`` tokens (hits are registered already);
  ``mark_computed(seq_id, c)`` registers the rest as an engine computes them (idempotent;
  each full block is offered to the cache once, in order). ``num_computed=None`` (the default)
  registers every full block at once: tokens stand for computed KV. ``append`` registers the
  block whose last slot it writes, and any earlier one still unregistered (appending a token
  means the tokens before it are computed).
* **The hash.** :func:`block_key` is SplitMix64's finaliser folded over 64-bit words (the
  parent key, then each token): deterministic across runs and machines, and computed
  identically by the Rust core and the reference (Python's ``hash()`` is salted per process,
  so it cannot be used). It is not cryptographic; since a hit is checked on the block's tokens
  and parent key, a wrong hit needs two different prefixes to collide on all 64 bits of an
  earlier key.
* **Errors.** ``allocate`` and ``append`` check the pool first and raise :class:`OutOfBlocks`
  with nothing changed (tables, counts, queue, counters). An unknown ``seq_id`` (so also a
  second ``free`` of the same sequence) or one already in use raises ``KeyError``; bad token ids
  raise ``TypeError`` (not an integer) or ``ValueError`` (outside ``[0, 2**32)``, or an empty
  prompt), naming the first bad one.
* **Counters.** ``num_lookups`` counts the blocks ``allocate`` could have reused (at most
  ``(n - 1) // block_size`` a prompt), ``num_hits`` those it did, ``num_evictions`` cached blocks
  given new content, ``num_copies`` copy-on-writes.
* **Host tier** (``host_blocks > 0``, lecture §8 milestone 4b: a tiered KV cache). When a
  cached free block is evicted, its key and tokens move to a host (CPU) tier of ``host_blocks``
  blocks instead of vanishing; ``allocate`` that misses the GPU cache but finds the key on the
  host (verified as ever) takes a fresh GPU block for it and registers it at once: a *recall*,
  a copy over the host link (``hw_model.kv_host_transfer_s``) instead of a recomputation. It
  counts in ``num_cached_tokens`` and ``num_host_hits`` (not ``num_hits``), and needs a free
  block like any new one. A key lives in one tier: registering it on the GPU drops its host
  copy. A full host tier drops one entry first, by ``host_policy``: ``"lru"`` the one offloaded
  longest ago, ``"hits"`` the one with the fewest prefix hits (oldest among equals), so a
  shared system prompt outlives one-off prompts. ``take_transfers()`` returns, in order, each
  ``("offload", block, key, hits)``, ``("recall", block, key, hits)`` and ``("drop", None,
  key, hits)`` since its last call (``hits``: the moved entry's hit count): an engine copies
  KV by it before writing any block (an evicted block's data is intact until then;
  :mod:`servelab.engine.offload`). ``host_blocks=0`` (the default) is the allocator without
  the tier, bit for bit.
* ``can_allocate(n_tokens)`` is ``ceil(n_tokens / block_size) <= num_free_blocks``: when it is
  true, ``allocate`` of that many tokens cannot fail (prefix hits only lower the need).

Example:
    >>> from servelab.blocks import BlockAllocator
    >>> a = BlockAllocator(num_blocks=8, block_size=4, prefix_caching=True)
    >>> a.allocate(0, [1, 2, 3, 4, 5, 6])       # 6 tokens: one full block and a partial one
    [0, 1]
    >>> a.fork(0, 1)                            # the child shares both blocks
    >>> a.append(1, 7)                          # block 1 is shared and partly full: copy it
    (1, 2)
    >>> a.block_table(0), a.block_table(1)
    ([0, 1], [0, 2])
    >>> a.allocate(2, [1, 2, 3, 4, 9])          # the first block is a prefix hit
    [0, 3]
    >>> a.num_cached_tokens(2), a.num_free_blocks
    (4, 4)
    >>> a.allocate(3, [5, 5, 5, 5, 0], num_computed=0)   # nothing computed: nothing registered
    [4, 5]
    >>> a.allocate(4, [5, 5, 5, 5, 1], num_computed=0)   # so no hit: [5, 5, 5, 5] computed twice
    [6, 7]
    >>> a.mark_computed(3, 4), a.mark_computed(4, 4)    # both first blocks are computed now
    (None, None)
    >>> a.key_of(4) is not None, a.key_of(6)            # seq 3's was registered first
    (True, None)

With a host tier, an evicted prefix comes back by copy:

    >>> t = BlockAllocator(num_blocks=2, block_size=2, prefix_caching=True, host_blocks=4)
    >>> t.allocate(0, [1, 2, 3]); t.free(0)
    [0, 1]
    >>> t.allocate(1, [5, 5, 5, 5]); t.free(1)     # evicts [1, 2] from the GPU to the host
    [1, 0]
    >>> [kind for kind, *_ in t.take_transfers()]
    ['offload']
    >>> t.allocate(2, [1, 2, 9]), t.num_cached_tokens(2), t.num_host_hits
    ([0, 1], 2, 1)
    >>> [kind for kind, *_ in t.take_transfers()]   # block 0 is freed of [5, 5] for [1, 2]
    ['offload', 'recall', 'offload']
"""

from __future__ import annotations

from operator import attrgetter
from typing import Iterable

import numpy as np

from servelab import _checks, _core
from servelab._core import OutOfBlocks

__all__ = ["BlockAllocator", "OutOfBlocks", "block_key", "ROOT_KEY", "TOKEN_LIMIT",
           "OP_ALLOCATE", "OP_APPEND", "OP_FORK", "OP_FREE",
           "STATUS_OK", "STATUS_COPIED", "STATUS_OUT_OF_BLOCKS", "HOST_POLICIES"]

# which entry a full host tier drops (the Rust core refuses any other name)
HOST_POLICIES = ("lru", "hits")

ROOT_KEY: int = _core.ROOT_KEY
TOKEN_LIMIT: int = _core.TOKEN_LIMIT

# Op codes and statuses of BlockAllocator.replay.
OP_ALLOCATE, OP_APPEND, OP_FORK, OP_FREE = 0, 1, 2, 3
STATUS_OK, STATUS_COPIED, STATUS_OUT_OF_BLOCKS = 0, 1, 2


def block_key(parent_key: int, token_ids: Iterable[int]) -> int:
    """The cache key of a full block: the hash chain step over its parent's key and its tokens.

    >>> block_key(ROOT_KEY, [1, 2, 3, 4]) == block_key(ROOT_KEY, [1, 2, 3, 4])
    True
    """
    try:
        return _core.block_key(parent_key, token_ids)
    except (TypeError, OverflowError) as exc:
        try:
            _checks.integer("parent_key", parent_key, 0, 2**64 - 1)
        except (TypeError, ValueError) as named:
            if isinstance(exc, OverflowError) and isinstance(named, ValueError):
                raise OverflowError(str(named)) from None
            raise named from None
        raise exc


def _stat(name: str, doc: str) -> property:
    """A read-only property of :class:`BlockAllocator`: its ``stats()[name]``."""
    return property(lambda self: self._inner.stats()[name], doc=doc)


class BlockAllocator:
    """A pool of ``num_blocks`` KV blocks of ``block_size`` tokens, shared by sequences.

    See the module docstring for the rules. ``seq_id`` is any integer that fits in int64;
    token ids are integers in ``[0, 2**32)``.
    """

    __slots__ = ("_inner",)

    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool = False,
                 host_blocks: int = 0, host_policy: str = "lru"):
        if not isinstance(host_policy, str):
            raise TypeError(f"host_policy must be a str, got {host_policy!r}")
        try:
            self._inner = _core.BlockAllocator(num_blocks, block_size, prefix_caching,
                                               host_blocks, host_policy)
        except (TypeError, OverflowError) as exc:
            _checks.reraise_named(exc, {"num_blocks": num_blocks, "block_size": block_size,
                                        "host_blocks": host_blocks},
                                  {"prefix_caching": prefix_caching})

    # ---- operations --------------------------------------------------------------------------

    def allocate(self, seq_id: int, token_ids: Iterable[int],
                 num_computed: int | None = None) -> list[int]:
        """Gives a new sequence the blocks for its prompt and returns its block table.

        ``num_computed``: how many leading tokens have their KV computed (``None``: all); only
        full blocks inside them get their keys registered (see "Registered when computed").
        Raises ``KeyError`` if ``seq_id`` is in use, :class:`OutOfBlocks` if the pool is short,
        ``ValueError`` if ``num_computed`` is outside ``[0, len(token_ids)]``.
        """
        return self._inner.allocate(seq_id, token_ids, num_computed)

    def mark_computed(self, seq_id: int, num_computed: int) -> None:
        """The first ``num_computed`` tokens of ``seq_id`` have their KV now: registers the
        keys of its full blocks inside them not registered yet (first wins). Idempotent; a
        smaller count than before changes nothing. ``KeyError`` for an unknown sequence,
        ``ValueError`` if ``num_computed`` is outside ``[0, num_tokens(seq_id)]``.
        """
        self._inner.mark_computed(seq_id, num_computed)

    def append(self, seq_id: int, token_id: int) -> tuple[int, int] | None:
        """Adds one token; returns the copy-on-write ``(src, dst)`` if one was needed."""
        return self._inner.append(seq_id, token_id)

    def fork(self, parent_id: int, child_id: int) -> None:
        """Makes ``child_id`` a new sequence sharing every block (and token) of ``parent_id``."""
        self._inner.fork(parent_id, child_id)

    def free(self, seq_id: int) -> None:
        """Drops the sequence; its blocks without another reference become free."""
        self._inner.free(seq_id)

    def replay(self, op: np.ndarray, seq: np.ndarray, arg: np.ndarray,
               tokens: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """Runs a recorded trace of operations inside Rust, without the GIL.

        All five are 1-D int64 arrays. Op ``i`` is ``op[i]`` (``OP_ALLOCATE``, ``OP_APPEND``,
        ``OP_FORK``, ``OP_FREE``) on sequence ``seq[i]``; ``arg[i]`` is the prompt index for
        allocate (its tokens are ``tokens[offsets[a]:offsets[a + 1]]``), the token for append,
        the child id for fork, and ignored for free. Returns one status per op: ``STATUS_OK``,
        ``STATUS_COPIED`` (an append that made a copy-on-write) or ``STATUS_OUT_OF_BLOCKS`` (the
        op changed nothing). Any other error stops the replay, its message prefixed with
        ``op {i}: ``; the ops before it stay done.
        """
        cols = [_checks.int64_array(name, a) for name, a in (
            ("op", op), ("seq", seq), ("arg", arg), ("tokens", tokens), ("offsets", offsets))]
        return self._inner.replay(*cols)

    def append_many(self, seq_ids: Iterable[int] | np.ndarray,
                    token_ids: Iterable[int] | np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
        """A whole decode step's appends in one call: ``token_ids[i]`` onto ``seq_ids[i]``, in
        order, as many :meth:`append` calls would (one Python call instead of one per sequence).

        Stops at the first append the pool cannot serve, which changes nothing, and returns
        ``(done, copy_src, copy_dst)``: the first ``done`` appends went through, and append ``i``
        made the copy-on-write ``(copy_src[i], copy_dst[i])``, or ``(-1, -1)`` if none. An
        engine then preempts and calls again with the rest. A bad token or an unknown sequence
        raises with ``seq_ids[i]: `` before the message; the appends before it stay done.

        >>> a = BlockAllocator(num_blocks=2, block_size=2)
        >>> a.allocate(1, [7, 7]), a.allocate(2, [8])
        ([0], [1])
        >>> done, src, dst = a.append_many([2, 1], [5, 6])   # 1 needs a block, none is free
        >>> done, a.block_table(2), a.num_tokens(1)
        (1, [1], 2)
        """
        s = _int_array("seq_ids", seq_ids)
        t = _int_array("token_ids", token_ids)
        return self._inner.append_many(s, t)

    def free_many(self, seq_ids: Iterable[int] | np.ndarray) -> None:
        """Frees every sequence of ``seq_ids`` in order, as many :meth:`free` calls would. An
        unknown one raises ``KeyError`` with ``seq_ids[i]: `` before the message; the frees
        before it stay done."""
        self._inner.free_many(_int_array("seq_ids", seq_ids))

    # ---- queries -----------------------------------------------------------------------------

    def block_table(self, seq_id: int) -> list[int]:
        return self._inner.block_table(seq_id)

    def block_tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every block table at once, as CSR: ``(seq_ids ascending, offsets, blocks)``; the
        table of ``seq_ids[i]`` is ``blocks[offsets[i]:offsets[i + 1]]``."""
        return self._inner.block_tables()

    def num_tokens(self, seq_id: int) -> int:
        return self._inner.num_tokens(seq_id)

    def num_cached_tokens(self, seq_id: int) -> int:
        """Prompt tokens whose KV was reused from the prefix cache at ``allocate``."""
        return self._inner.num_cached_tokens(seq_id)

    def can_allocate(self, n_tokens: int) -> bool:
        """Whether ``allocate`` of ``n_tokens`` tokens surely succeeds now."""
        return self._inner.can_allocate(n_tokens)

    def can_append(self, seq_id: int) -> bool:
        """Whether ``append`` to ``seq_id`` succeeds now."""
        return self._inner.can_append(seq_id)

    def seq_ids(self) -> list[int]:
        return self._inner.seq_ids()

    def block_tokens(self, block_id: int) -> list[int]:
        """The tokens a block holds (a free block keeps its last content until reused)."""
        return self._inner.block_tokens(block_id)

    def key_of(self, block_id: int) -> int | None:
        """The block's cache key, or None if the block is not the cached copy of a prefix."""
        return self._inner.key_of(block_id)

    def ref_counts(self) -> np.ndarray:
        """References of every block (int64, indexed by block id)."""
        return self._inner.ref_counts()

    def free_queue(self) -> np.ndarray:
        """Free block ids, in the order they will be reused."""
        return self._inner.free_queue()

    def stats(self) -> dict[str, int]:
        """Sizes and counters in one call."""
        return self._inner.stats()

    def check_invariants(self) -> None:
        """Raises ``RuntimeError`` naming the first broken internal invariant (for tests)."""
        self._inner.check_invariants()

    # Sizes and counters are read from ``stats()`` (one call into the core serves them all); the
    # core has getters for the settings and for the free count an engine reads every step.
    num_blocks = _stat("num_blocks", "Blocks in the pool.")
    block_size = _stat("block_size", "Tokens a block holds.")
    num_cached_blocks = _stat("num_cached_blocks", "Blocks that are the cached copy of a prefix (in use or free).")
    num_hits = _stat("num_hits", "Prompt blocks ``allocate`` reused from the prefix cache.")
    num_lookups = _stat("num_lookups", "Prompt blocks ``allocate`` could have reused.")
    num_evictions = _stat("num_evictions", "Cached blocks given new content.")
    num_copies = _stat("num_copies", "Copy-on-writes.")
    host_blocks = _stat("host_blocks", "Capacity of the host tier, in blocks (0: no tier; §8 milestone 4b).")
    num_host_cached_blocks = _stat("num_host_cached_blocks", "Blocks the host tier holds now.")
    num_host_hits = _stat("num_host_hits", "Prompt blocks recalled from the host tier instead of recomputed.")
    prefix_caching = property(attrgetter("_inner.prefix_caching"), doc="Whether full blocks are cached by key.")
    host_policy = property(attrgetter("_inner.host_policy"), doc='Which entry a full host tier drops: "lru" or "hits".')
    num_free_blocks = property(attrgetter("_inner.num_free_blocks"), doc="Blocks without a reference, cached or not.")

    # ---- the host tier (§8 milestone 4b) -----------------------------------------------------

    def host_keys(self) -> list[int]:
        """The host tier's keys in the order its policy would drop them, next victim first."""
        return self._inner.host_keys()

    def take_transfers(self) -> list[tuple[str, int | None, int, int]]:
        """What crossed the host link since the last call, in order, then forgets it:
        ``("offload", block_id, key, hits)`` (copy the evicted block's KV to the host),
        ``("recall", block_id, key, hits)`` (copy the host's KV of ``key`` into the block) and
        ``("drop", None, key, hits)`` (the host no longer holds ``key``); ``hits`` is the
        moved entry's hit count, what the ``"hits"`` policy ranks by. An ``allocate`` takes its
        recalled keys off the host before it evicts anything, but lists each recall after the
        evictions before it: replayed in order, an evicted block is copied out before a recall
        overwrites it."""
        return self._inner.take_transfers()

    def __contains__(self, seq_id: int) -> bool:
        try:
            return seq_id in self._inner
        except (TypeError, OverflowError):
            return False  # no sequence has an id that is not an int64

    def __len__(self) -> int:
        return len(self._inner)

    def __repr__(self) -> str:
        return repr(self._inner)


def _int_array(name: str, values: object) -> np.ndarray:
    """A 1-D int64 array of ``values`` (integers only: a float or a bool is an error, not
    silently cast; so is an unsigned value past int64)."""
    if isinstance(values, np.ndarray) and values.dtype == np.int64 and values.ndim == 1 \
            and values.flags.c_contiguous:
        return values  # the common case of a decode loop: nothing to check or convert
    try:
        arr = np.asarray(values)
    except (TypeError, ValueError, OverflowError) as exc:  # ragged or unconvertible
        raise ValueError(f"{name} must be a one-dimensional sequence of integers, got "
                         f"{values!r:.200} ({exc})") from None
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must hold integers, got dtype {arr.dtype}")
    if arr.dtype == np.uint64 and int(arr.max()) > np.iinfo(np.int64).max:
        i = int(np.argmax(arr > np.iinfo(np.int64).max))
        raise ValueError(f"{name}[{i}] must fit in int64, got {arr[i]}")
    return np.ascontiguousarray(arr, dtype=np.int64)
