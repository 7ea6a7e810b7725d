"""Assignment 9: why the batch size changes a request's numbers, and a kernel where it does not
(lecture §6.5; exercise 10). The story and the exact summation order are in this folder's README.

All float32: ``x`` is ``(B, K)`` (the batch), ``w`` is ``(K, N)``, results ``(B, N)``.
Check yourself with ``make check TASK=a9_batch_invariance``.
"""

from __future__ import annotations

import numpy as np


def split_count(batch_size: int, k: int, num_units: int = 16, min_piece: int = 8) -> int:
    """How many pieces the split-K kernel cuts ``K`` into (given, not graded): enough for the
    ``batch_size`` rows to keep ``num_units`` compute units busy, but no piece shorter than
    ``min_piece`` (and always at least one piece).

    >>> [split_count(b, 256) for b in (1, 2, 5, 16, 64)]
    [16, 8, 3, 1, 1]
    >>> split_count(1, 20)
    2
    """
    return max(1, min(num_units // batch_size, k // min_piece))


def reduce_in_pieces(x, w, starts) -> np.ndarray:
    """``x @ w`` with ``K`` cut into pieces starting at ``starts`` (increasing, ``starts[0] == 0``):
    per piece ``acc = acc + x[:, k] * w[k, :]`` for ``k`` ascending, then ``p0 + p1 + ...`` left
    to right; elementwise float32 only (README)."""
    ### BEGIN SOLUTION
    x = np.asarray(x, dtype=np.float32)
    w = np.asarray(w, dtype=np.float32)
    b, k = x.shape
    bounds = [int(s) for s in starts] + [k]
    total = None
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        acc = np.zeros((b, w.shape[1]), dtype=np.float32)
        for j in range(lo, hi):
            acc = acc + x[:, j:j + 1] * w[j:j + 1, :]  # (B, 1) * (1, N): each product rounded
        total = acc if total is None else total + acc
    return total
    ### END SOLUTION


def piece_starts(k: int, pieces: int) -> list[int]:
    """Where each of ``pieces`` near-equal consecutive pieces of ``range(k)`` starts: the first
    ``k % pieces`` pieces are one longer than the others (as ``numpy.array_split`` cuts).

    For example ``piece_starts(10, 3) == [0, 4, 7]`` (pieces of 4, 3 and 3)."""
    ### BEGIN SOLUTION
    size, extra = divmod(k, pieces)
    starts, at = [], 0
    for i in range(pieces):
        starts.append(at)
        at += size + (1 if i < extra else 0)
    return starts
    ### END SOLUTION


def matmul_split_k(x, w, num_units: int = 16) -> np.ndarray:
    """The shape-tuned kernel: ``x @ w`` with ``K`` cut into ``split_count(B, K, num_units)``
    near-equal pieces (:func:`piece_starts`). Its rows change with the batch size."""
    ### BEGIN SOLUTION
    b, k = np.shape(x)
    return reduce_in_pieces(x, w, piece_starts(k, split_count(b, k, num_units)))
    ### END SOLUTION


def matmul_batch_invariant(x, w, block_k: int = 32) -> np.ndarray:
    """The batch-invariant kernel: ``x @ w`` with ``K`` cut into pieces of ``block_k`` (the
    last one shorter when ``block_k`` does not divide ``K``), whatever the batch size. Each row
    of the result has the same bits whether it is computed alone or in any batch."""
    ### BEGIN SOLUTION
    k = np.shape(x)[1]
    return reduce_in_pieces(x, w, list(range(0, k, block_k)))
    ### END SOLUTION
