"""``x @ w`` summed in an order stated in full, one float32 scalar operation at a time.

Batch invariance (lecture §6.5) is a question of summation order: float32 addition is not
associative, so a kernel that picks its order from the batch's shape changes a row's bits when
the batch changes. To say whether a kernel keeps an order, one needs that order computed
plainly: :func:`ordered_matmul` cuts ``K`` into consecutive pieces, sums each piece from zero
for ``k`` ascending (every product and every addition rounded to float32), then adds the
pieces' sums left to right. It is slow on purpose (three Python loops): nothing in it is left
to a library's own order. The batch-invariance assignment's tests compare with it bit for bit.

>>> import numpy as np
>>> x = np.array([[1e8, 1.0, -1e8, 1.0]], dtype=np.float32)
>>> w = np.ones((4, 1), dtype=np.float32)
>>> ordered_matmul(x, w, [0]).item(), ordered_matmul(x, w, [0, 2]).item()  # same terms, other order
(1.0, 0.0)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from servelab import _checks

F32 = np.float32


def _matrix(name: str, value: object) -> np.ndarray:
    a = np.asarray(value)
    if a.ndim != 2 or a.dtype != F32:
        raise ValueError(f"{name} must be a 2-D float32 array, got {a.dtype} of shape {a.shape}")
    return a


def _piece_bounds(starts: Sequence[int], k: int) -> list[int]:
    """``starts`` then ``k``: where each piece begins, and where the last one ends."""
    bounds = [_checks.integer(f"starts[{i}]", s, 0, max(k - 1, 0)) for i, s in enumerate(starts)]
    if not bounds or bounds[0] != 0 or any(a >= b for a, b in zip(bounds, bounds[1:])):
        raise ValueError(f"starts must increase strictly from 0, got {list(starts)!r}")
    return bounds + [k]


def ordered_matmul(x: np.ndarray, w: np.ndarray, starts: Sequence[int]) -> np.ndarray:
    """``x @ w`` (``(B, K) @ (K, N)``, float32) with ``K`` cut into pieces beginning at
    ``starts`` (strictly increasing, ``starts[0] == 0``): each piece's sum starts from 0.0 and
    adds ``x[b, k] * w[k, n]`` for ``k`` ascending, then ``p0 + p1 + ...`` left to right, every
    operation one float32 rounding (module docstring). Returns a ``(B, N)`` float32 array.

    >>> import numpy as np
    >>> ordered_matmul(np.ones((1, 3), np.float32), np.full((3, 2), 2, np.float32), [0, 1]).tolist()
    [[6.0, 6.0]]
    """
    x, w = _matrix("x", x), _matrix("w", w)
    rows, k = x.shape
    if w.shape[0] != k:
        raise ValueError(f"w must have x's {k} columns as rows, got shape {w.shape}")
    bounds = _piece_bounds(starts, k)
    out = np.empty((rows, w.shape[1]), dtype=F32)
    for r in range(rows):
        for c in range(w.shape[1]):
            pieces = []
            for lo, hi in zip(bounds, bounds[1:]):
                acc = F32(0.0)
                for j in range(lo, hi):
                    acc = F32(acc + F32(x[r, j] * w[j, c]))
                pieces.append(acc)
            total = pieces[0]
            for p in pieces[1:]:
                total = F32(total + p)
            out[r, c] = total
    return out
