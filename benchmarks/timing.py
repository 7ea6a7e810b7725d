"""The one timing helper of the benchmarks: best of ``repeat`` runs (the least disturbed by a
noisy shared machine), and the last run's result so callers can check answers are equal."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def best_of(fn: Callable[[], T], repeat: int, clock: Callable[[], float] = time.perf_counter) -> tuple[float, T]:
    """``(fastest seconds, result)`` of calling ``fn()`` ``repeat`` times: wall seconds, or
    ``clock=time.thread_time`` for this thread's CPU seconds (what a ratio of two short runs on a
    loaded machine should compare: time slices lost to other processes do not count)."""
    best, out = float("inf"), None
    for _ in range(max(1, repeat)):
        t0 = clock()
        out = fn()
        best = min(best, clock() - t0)
    return best, out  # type: ignore[return-value]
