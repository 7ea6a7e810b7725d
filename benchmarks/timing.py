"""The one timing helper of the benchmarks: best of ``repeat`` runs (the least disturbed by a
noisy shared machine), and the last run's result so callers can check answers are equal."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def best_of(fn: Callable[[], T], repeat: int) -> tuple[float, T]:
    """``(fastest wall seconds, result)`` of calling ``fn()`` ``repeat`` times."""
    best, out = float("inf"), None
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out  # type: ignore[return-value]
