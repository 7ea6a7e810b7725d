"""A time-ordered event queue for discrete-event simulators (lecture §4.5).

The clock of a discrete-event simulator jumps from one event to the next: an arrival, the end
of a forward step, a timeout. :class:`EventQueue` hands the events back earliest first; events
at the same time come back in the order they were pushed, so a simulation never depends on how
a heap breaks ties. The queue itself is Rust (``rust/src/events.rs``); this class adds the typed
Python surface. (The course's own copy also holds a pure-Python twin, for parity tests.)

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

import numbers
from typing import Generic, TypeVar

from servelab import _checks, _core

__all__ = ["EventQueue"]

T = TypeVar("T")


class EventQueue(Generic[T]):
    """Events ``(time_s, payload)``, popped earliest first, ties in insertion order.

    ``time_s`` must be a finite number ``>= 0`` and not earlier than the last popped event's
    time (``ValueError`` naming the value otherwise): a discrete-event clock only moves forward.
    ``pop`` and ``peek`` on an empty queue raise ``IndexError``.
    """

    __slots__ = ("_inner",)

    def __init__(self) -> None:
        self._inner = _core.EventQueue()

    def push(self, time_s: float, payload: T) -> None:
        """Schedules ``payload`` at ``time_s`` seconds."""
        if not _checks.is_real(time_s):
            raise ValueError(f"time_s must be a real number, got {time_s!r}")
        self._inner.push(float(time_s), payload)

    def pop(self) -> tuple[float, T]:
        """Removes and returns the earliest event."""
        return self._inner.pop()  # type: ignore[return-value]

    def peek(self) -> tuple[float, T]:
        """The event :meth:`pop` would return, left in the queue."""
        return self._inner.peek()  # type: ignore[return-value]

    def len(self) -> int:
        """Number of events waiting (also ``len(queue)``)."""
        return len(self._inner)

    def __len__(self) -> int:
        return len(self._inner)

    def __bool__(self) -> bool:
        return len(self._inner) > 0

    def __repr__(self) -> str:
        return repr(self._inner)
