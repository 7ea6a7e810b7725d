"""Assignment 7: a paged KV block allocator (PagedAttention; lecture §2.4, §3.5; project milestone 2).

The KV cache of every sequence lives in fixed-size blocks of ``block_size`` token slots taken
from one shared pool, so memory is handed out as it is needed instead of reserved up front.
Write the methods of :class:`PagedAllocator` (in your copy, each one raises
``NotImplementedError``). The rules (servelab's Rust allocator, ``servelab.blocks.BlockAllocator``
without prefix caching, follows them exactly, and your block tables must equal its own):

* a sequence of ``n`` tokens holds ``ceil(n / block_size)`` blocks; each block counts how many
  sequences hold it; a block that no sequence holds is free;
* free blocks wait in one queue: new blocks are taken from its front; at start it holds
  ``0, 1, ..., num_blocks - 1`` in that order; ``free(seq_id)`` puts the blocks that became free
  at its back, the sequence's last block first (so a sequence's tail is reused before its head);
* ``allocate(seq_id, n_tokens)`` gives a new sequence its blocks and returns its block table;
* ``append(seq_id)`` adds one token: a new block when the last one is full; when the last block
  is partly filled and shared with another sequence, copy-on-write: take a new block, the
  sequence drops its reference to the shared one, and ``append`` returns ``(src, dst)`` (the KV
  to copy); otherwise ``None``;
* ``fork(parent_id, child_id)`` makes the child share every block of the parent;
* not enough free blocks: ``allocate`` and ``append`` raise ``OutOfBlocks`` (``errors.py``) and
  change nothing; an unknown ``seq_id`` (or one that already exists, for ``allocate`` and
  ``fork``'s child) raises ``KeyError``; ``free`` of a sequence that is not there raises
  ``KeyError`` too.

Check yourself with ``make check TASK=a7_paged_blocks``.
"""

from __future__ import annotations

from collections import deque

from errors import OutOfBlocks  # given: mirrors servelab.blocks.OutOfBlocks


class PagedAllocator:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        ### BEGIN SOLUTION
        self.free_queue: deque[int] = deque(range(num_blocks))
        self.ref_count = [0] * num_blocks
        self.tables: dict[int, list[int]] = {}
        self.lengths: dict[int, int] = {}
        ### END SOLUTION

    def allocate(self, seq_id: int, n_tokens: int) -> list[int]:
        ### BEGIN SOLUTION
        if seq_id in self.tables:
            raise KeyError(f"seq_id {seq_id} is already allocated")
        need = -(-n_tokens // self.block_size)
        if need > len(self.free_queue):
            raise OutOfBlocks(f"seq_id {seq_id} needs {need} blocks, {len(self.free_queue)} free")
        table = [self._take() for _ in range(need)]
        self.tables[seq_id], self.lengths[seq_id] = table, n_tokens
        return list(table)
        ### END SOLUTION

    def append(self, seq_id: int) -> tuple[int, int] | None:
        ### BEGIN SOLUTION
        table = self._table(seq_id)
        full = self.lengths[seq_id] % self.block_size == 0
        shared = self.ref_count[table[-1]] > 1
        if (full or shared) and not self.free_queue:
            raise OutOfBlocks(f"seq_id {seq_id} needs 1 block, 0 free")
        copy = None
        if full:
            table.append(self._take())
        elif shared:
            src, dst = table[-1], self._take()
            self.ref_count[src] -= 1
            table[-1] = dst
            copy = (src, dst)
        self.lengths[seq_id] += 1
        return copy
        ### END SOLUTION

    def fork(self, parent_id: int, child_id: int) -> None:
        ### BEGIN SOLUTION
        table = self._table(parent_id)
        if child_id in self.tables:
            raise KeyError(f"seq_id {child_id} is already allocated")
        for b in table:
            self.ref_count[b] += 1
        self.tables[child_id], self.lengths[child_id] = list(table), self.lengths[parent_id]
        ### END SOLUTION

    def free(self, seq_id: int) -> None:
        ### BEGIN SOLUTION
        table = self._table(seq_id)
        del self.tables[seq_id], self.lengths[seq_id]
        for b in reversed(table):
            self.ref_count[b] -= 1
            if self.ref_count[b] == 0:
                self.free_queue.append(b)
        ### END SOLUTION

    def block_table(self, seq_id: int) -> list[int]:
        ### BEGIN SOLUTION
        return list(self._table(seq_id))
        ### END SOLUTION

    @property
    def num_free_blocks(self) -> int:
        ### BEGIN SOLUTION
        return len(self.free_queue)
        ### END SOLUTION

    def _take(self) -> int:
        """Takes the block at the front of the free queue for new content (yours to write)."""
        ### BEGIN SOLUTION
        b = self.free_queue.popleft()
        self.ref_count[b] = 1
        return b
        ### END SOLUTION

    def _table(self, seq_id: int) -> list[int]:
        """The block table of ``seq_id``, or ``KeyError`` (yours to write)."""
        ### BEGIN SOLUTION
        if seq_id not in self.tables:
            raise KeyError(f"seq_id {seq_id} is not allocated")
        return self.tables[seq_id]
        ### END SOLUTION
