"""A time-ordered event queue for discrete-event simulators (lecture §4.5).

The clock of a discrete-event simulator jumps from one event to the next: an arrival, the end
of a forward step, a timeout. :class:`EventQueue` hands the events back earliest first; events
at the same time come back in the order they were pushed, so a simulation never depends on how
a heap breaks ties. It is plain Python, a heap of ``(time_s, seq, payload)``: ``seq`` counts the
pushes, so ties pop first in, first out and the heap never compares two payloads. (The Rust
simulators keep their own clocks and need no queue.)

>>> q = EventQueue()
>>> q.push(2.0, "step done")
>>> q.push(0.5, "arrival A")
>>> q.push(0.5, "arrival B")       # same time: comes out after A
>>> len(q), q.peek()
(3, (0.5, 'arrival A'))
>>> [q.pop() for _ in range(len(q))]
[(0.5, 'arrival A'), (0.5, 'arrival B'), (2.0, 'step done')]
>>> q.pop()
Traceback (most recent call last):
...
IndexError: pop from an empty EventQueue
>>> q.push(float("nan"), "never")
Traceback (most recent call last):
...
ValueError: time_s must be a finite number >= 0, got nan
>>> q.push(1.0, "in the past")    # the last event popped was at 2.0: the clock never runs back
Traceback (most recent call last):
...
ValueError: time_s must not be earlier than the last popped event's time 2.0, got 1.0
"""

from __future__ import annotations

import heapq
import math
from typing import Generic, TypeVar

from servelab import _checks

__all__ = ["EventQueue"]

T = TypeVar("T")


class EventQueue(Generic[T]):
    """Events ``(time_s, payload)``, popped earliest first, ties in insertion order.

    ``time_s`` must be a finite number ``>= 0`` and not earlier than the last popped event's
    time (``ValueError`` naming the value otherwise): a discrete-event clock only moves forward.
    ``pop`` and ``peek`` on an empty queue raise ``IndexError``.
    """

    __slots__ = ("_heap", "_seq", "_now")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, T]] = []
        self._seq = 0  # pushes so far: the tie-break
        self._now = 0.0  # time of the last popped event: the clock

    def push(self, time_s: float, payload: T) -> None:
        """Schedules ``payload`` at ``time_s`` seconds."""
        if type(time_s) is not float and not _checks.is_real(time_s):  # floats skip the slow check
            raise ValueError(f"time_s must be a real number, got {time_s!r}")
        time_s = float(time_s) + 0.0  # + 0.0: -0.0 is the instant 0.0
        if not (math.isfinite(time_s) and time_s >= 0.0):
            raise ValueError(f"time_s must be a finite number >= 0, got {time_s!r}")
        if time_s < self._now:
            raise ValueError("time_s must not be earlier than the last popped event's time "
                             f"{self._now!r}, got {time_s!r}")
        heapq.heappush(self._heap, (time_s, self._seq, payload))
        self._seq += 1

    def pop(self) -> tuple[float, T]:
        """Removes and returns the earliest event."""
        if not self._heap:
            raise IndexError("pop from an empty EventQueue")
        time_s, _, payload = heapq.heappop(self._heap)
        self._now = time_s
        return time_s, payload

    def peek(self) -> tuple[float, T]:
        """The event :meth:`pop` would return, left in the queue."""
        if not self._heap:
            raise IndexError("peek at an empty EventQueue")
        time_s, _, payload = self._heap[0]
        return time_s, payload

    def len(self) -> int:
        """Number of events waiting (also ``len(queue)``)."""
        return len(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __repr__(self) -> str:
        if not self._heap:
            return "EventQueue(len=0)"
        return f"EventQueue(len={len(self._heap)}, next_time_s={self._heap[0][0]!r})"
