"""Assignment 7: a paged KV block allocator (PagedAttention; lecture §2.4, §3.5; milestone 2).

Your block tables must equal those of ``servelab.blocks.BlockAllocator`` without prefix caching,
whose docstring states the rules (this folder's README says which). Check yourself with
``make check TASK=a7_paged_blocks``.
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
        """A new sequence's ``ceil(n_tokens / block_size)`` blocks from the queue's front; its table."""
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
        """One more token: a new block when the last is full; ``(src, dst)`` on copy-on-write."""
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
        """The child shares every block of the parent (reference counts + 1)."""
        ### BEGIN SOLUTION
        table = self._table(parent_id)
        if child_id in self.tables:
            raise KeyError(f"seq_id {child_id} is already allocated")
        for b in table:
            self.ref_count[b] += 1
        self.tables[child_id], self.lengths[child_id] = list(table), self.lengths[parent_id]
        ### END SOLUTION

    def free(self, seq_id: int) -> None:
        """Drops the sequence; blocks nobody holds go to the queue's back, last block first."""
        ### BEGIN SOLUTION
        table = self._table(seq_id)
        del self.tables[seq_id], self.lengths[seq_id]
        for b in reversed(table):
            self.ref_count[b] -= 1
            if self.ref_count[b] == 0:
                self.free_queue.append(b)
        ### END SOLUTION

    def block_table(self, seq_id: int) -> list[int]:
        """A copy of the sequence's block table."""
        ### BEGIN SOLUTION
        return list(self._table(seq_id))
        ### END SOLUTION

    @property
    def num_free_blocks(self) -> int:
        """Blocks in the free queue."""
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
