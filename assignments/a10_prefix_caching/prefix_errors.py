"""The allocator's own error (given, not graded): raise it when the pool has too few free
blocks. It mirrors ``servelab.blocks.OutOfBlocks`` (a ``RuntimeError`` too); student code may not
import servelab inside the grader's sandbox, so the assignment carries its own."""


class OutOfBlocks(RuntimeError):
    """Not enough free blocks for an ``allocate`` or an ``append``; nothing was changed."""
