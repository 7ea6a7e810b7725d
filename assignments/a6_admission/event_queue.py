"""A pure-Python event queue with the API of ``servelab.events.EventQueue`` (given, not graded).

Your simulators use this one so that they run unchanged inside the autograder's sandbox, which
lets student code import nothing of servelab. Locally you may swap in
``from servelab.events import EventQueue`` (the Rust one): the two behave the same, which
``tests/test_assignment_helpers.py`` checks.

>>> q = EventQueue()
>>> q.push(2.0, "b"); q.push(1.0, "a"); q.push(2.0, "c")
>>> [q.pop() for _ in range(len(q))]
[(1.0, 'a'), (2.0, 'b'), (2.0, 'c')]
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import Any


class EventQueue:
    """Events come out earliest first; events at the same time in the order they were pushed."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Any]] = []
        self._order = itertools.count()
        self._now = 0.0  # time of the last popped event: the clock never runs backwards

    def push(self, time_s: float, payload: Any) -> None:
        t = float(time_s)
        if math.isnan(t) or math.isinf(t) or t < 0:
            raise ValueError(f"time_s must be a finite number >= 0, got {time_s!r}")
        if t < self._now:
            raise ValueError(f"time_s must not be earlier than the last popped event's time "
                             f"{self._now!r}, got {t!r}")
        heapq.heappush(self._heap, (t, next(self._order), payload))

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

    def __len__(self) -> int:
        return len(self._heap)

    def len(self) -> int:
        return len(self._heap)
