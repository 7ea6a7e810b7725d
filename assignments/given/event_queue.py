"""A pure-Python event queue with the API of ``servelab.events.EventQueue`` (given, not graded).

a5's and a6's simulators import it (``from event_queue import EventQueue``) so that they run
unchanged inside the autograder's sandbox, where student code may import nothing of servelab.
It is standard library only, and behaves as ``servelab.events.EventQueue`` does, errors
included (``tests/test_assignment_helpers.py``).

>>> q = EventQueue()
>>> q.push(2.0, "b"); q.push(1.0, "a"); q.push(2.0, "c")
>>> [q.pop() for _ in range(q.len())]
[(1.0, 'a'), (2.0, 'b'), (2.0, 'c')]
"""

from __future__ import annotations

import heapq
import math
import numbers
from typing import Any


class EventQueue:
    """Events ``(time_s, payload)`` come out earliest first; events at the same time in the
    order they were pushed (a counter breaks ties, so payloads are never compared). A time must
    be a finite real ``>= 0`` and not earlier than the last popped event's: the clock of a
    discrete-event simulation never runs backwards (lecture §4.5)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Any]] = []
        self._pushed = 0
        self._now = 0.0  # time of the last popped event

    def push(self, time_s: float, payload: Any) -> None:
        if not isinstance(time_s, numbers.Real) or type(time_s).__name__ in ("bool", "bool_"):
            raise ValueError(f"time_s must be a real number, got {time_s!r}")
        t = float(time_s) + 0.0  # + 0.0: -0.0 is the instant 0.0
        if not (math.isfinite(t) and t >= 0.0):
            raise ValueError(f"time_s must be a finite number >= 0, got {t!r}")
        if t < self._now:
            raise ValueError(f"time_s must not be earlier than the last popped event's time {self._now!r}, got {t!r}")
        heapq.heappush(self._heap, (t, self._pushed, payload))
        self._pushed += 1

    def pop(self) -> tuple[float, Any]:
        if not self._heap:
            raise IndexError("pop from an empty EventQueue")
        t, _, payload = heapq.heappop(self._heap)
        self._now = t
        return t, payload

    def peek(self) -> tuple[float, Any]:
        if not self._heap:
            raise IndexError("peek at an empty EventQueue")
        t, _, payload = self._heap[0]
        return t, payload

    def len(self) -> int:
        """Number of events waiting (also ``len(queue)``)."""
        return len(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)
