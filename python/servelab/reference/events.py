"""Pure-Python twin of :class:`servelab.events.EventQueue`: a heap keyed by ``(time, seq)``.

``seq`` counts pushes, so events at equal times pop in insertion order (FIFO), and the heap
never compares two payloads. A push earlier than the last popped event's time is refused: the
clock never runs backwards. Same errors, same messages as the Rust queue.

>>> q = EventQueue()
>>> q.push(1.0, "b"); q.push(0.0, "a"); q.push(1.0, "c")
>>> [q.pop() for _ in range(3)]
[(0.0, 'a'), (1.0, 'b'), (1.0, 'c')]
"""

from __future__ import annotations

import heapq
import math
import numbers
from typing import Any


class EventQueue:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Any]] = []
        self._seq = 0
        self._now = 0.0  # time of the last popped event

    def push(self, time_s: float, payload: Any) -> None:
        if not isinstance(time_s, numbers.Real) or type(time_s).__name__ in ("bool", "bool_"):
            raise ValueError(f"time_s must be a real number, got {time_s!r}")
        time_s = float(time_s)
        if not (math.isfinite(time_s) and time_s >= 0.0):
            raise ValueError(f"time_s must be a finite number >= 0, got {time_s!r}")
        if time_s < self._now:
            raise ValueError("time_s must not be earlier than the last popped event's time "
                             f"{self._now!r}, got {time_s!r}")
        heapq.heappush(self._heap, (time_s + 0.0, self._seq, payload))  # + 0.0: -0.0 -> 0.0
        self._seq += 1

    def pop(self) -> tuple[float, Any]:
        if not self._heap:
            raise IndexError("pop from an empty EventQueue")
        time_s, _, payload = heapq.heappop(self._heap)
        self._now = time_s
        return time_s, payload

    def peek(self) -> tuple[float, Any]:
        if not self._heap:
            raise IndexError("peek at an empty EventQueue")
        time_s, _, payload = self._heap[0]
        return time_s, payload

    def len(self) -> int:
        return len(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)
