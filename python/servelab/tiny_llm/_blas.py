"""Run BLAS on one thread while the tiny model computes.

The model's matrices are tiny (64 x 128 in ``TINY``): splitting such a matmul over threads costs
more than it saves, and on a busy 2-core machine OpenBLAS's threads can wait on each other for
milliseconds (measured: a 130 x 64 x 128 product took 8 ms on 2 threads and 45 us on one).
One thread is also what makes timings in demo 04 mean something. The limit is set around each
forward and restored after it, so other numpy code (demo 02's 4096 x 4096 products) keeps all
its threads. It is process-wide while it lasts: another Python thread multiplying big matrices
at the same moment runs on one BLAS thread too.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

__all__ = ["one_blas_thread"]

_libs: list[Any] | None = None


def _blas_libs() -> list[Any]:
    global _libs
    if _libs is None:
        try:
            from threadpoolctl import ThreadpoolController
            _libs = list(ThreadpoolController().select(user_api="blas").lib_controllers)
        except Exception:  # no threadpoolctl, or a BLAS it cannot drive: leave threads alone
            _libs = []
    return _libs


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Inside the ``with`` block, BLAS uses one thread; the previous count comes back after.

    >>> import numpy as np
    >>> with one_blas_thread():
    ...     float((np.ones((3, 3)) @ np.ones(3))[0])
    3.0
    """
    saved = [(lib, lib.get_num_threads()) for lib in _blas_libs()]
    changed = [(lib, n) for lib, n in saved if n != 1]
    for lib, _ in changed:
        lib.set_num_threads(1)
    try:
        yield
    finally:
        for lib, n in changed:
            lib.set_num_threads(n)
