"""The event queue: against a plain model on random operation sequences, and the
documented errors."""

from __future__ import annotations

import math

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from servelab.events import EventQueue

# few distinct times, so ties are common; plus the bad ones
times = st.one_of(st.sampled_from([0.0, -0.0, 0.5, 1.0, 1.0 + 2**-52, 3.0]),
                  st.floats(0.0, 1e6),
                  st.sampled_from([math.nan, -1.0, -1e-300, math.inf, -math.inf]))


class Model:
    """What the queue promises, the slow way: an unsorted list scanned for the minimum of
    (time, push number); a push is refused when bad or earlier than the last pop."""

    def __init__(self) -> None:
        self.events: list[tuple[float, int, object]] = []
        self.pushes = 0
        self.now = 0.0

    def push(self, t: float, payload: object) -> bool:
        if not (math.isfinite(t) and t >= max(0.0, self.now)):
            return False
        self.events.append((t, self.pushes, payload))
        self.pushes += 1
        return True

    def earliest(self) -> tuple[float, int, object] | None:
        return min(self.events, key=lambda e: (e[0], e[1]), default=None)


class QueueMatchesModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.queue: EventQueue[object] = EventQueue()
        self.model = Model()

    @rule(t=times)
    def push(self, t):
        payload = object()  # the very object comes back, not a copy
        try:
            self.queue.push(t, payload)
            pushed = True
        except ValueError as exc:
            assert str(exc).startswith("time_s must") and str(exc).endswith(f"got {t + 0.0!r}")
            pushed = False
        assert pushed == self.model.push(t, payload)

    @rule(pop=st.booleans())
    def pop_or_peek(self, pop):
        want = self.model.earliest()
        if want is None:
            with pytest.raises(IndexError, match="EventQueue"):
                self.queue.pop() if pop else self.queue.peek()
            return
        time_s, payload = self.queue.pop() if pop else self.queue.peek()
        assert time_s == want[0] and math.copysign(1.0, time_s) == 1.0  # -0.0 comes back as 0.0
        assert payload is want[2]
        if pop:
            self.model.events.remove(want)
            self.model.now = time_s

    @invariant()
    def same_length(self):
        assert len(self.queue) == self.queue.len() == len(self.model.events)
        assert bool(self.queue) == bool(self.model.events)


TestQueueMatchesModel = QueueMatchesModel.TestCase


def test_time_order_then_insertion_order():
    q: EventQueue[str] = EventQueue()
    for t, p in [(2.0, "c"), (1.0, "a1"), (1.0, "a2"), (0.0, "z"), (1.0, "a3")]:
        q.push(t, p)
    assert [q.pop()[1] for _ in range(5)] == ["z", "a1", "a2", "a3", "c"]


def test_numpy_and_int_times_are_accepted():
    import numpy as np
    q: EventQueue[int] = EventQueue()
    q.push(np.float64(1.5), 1)
    q.push(np.int64(1), 2)
    q.push(0, 3)
    assert [q.pop() for _ in range(3)] == [(0.0, 3), (1.0, 2), (1.5, 1)]


@pytest.mark.parametrize("bad, shown", [(math.nan, "nan"), (-2.5, "-2.5"), (math.inf, "inf")])
def test_bad_times_name_the_value(bad, shown):
    q: EventQueue[None] = EventQueue()
    with pytest.raises(ValueError, match=f"^time_s must be a finite number >= 0, got {shown}$"):
        q.push(bad, None)
    assert len(q) == 0


@pytest.mark.parametrize("bad", [True, "1.0", None, 1j])
def test_non_numbers_are_value_errors(bad):
    with pytest.raises(ValueError, match="time_s must be a real number"):
        EventQueue().push(bad, None)


def test_empty_queue_errors_are_index_errors():
    q: EventQueue[None] = EventQueue()
    with pytest.raises(IndexError, match="pop from an empty EventQueue"):
        q.pop()
    with pytest.raises(IndexError, match="peek at an empty EventQueue"):
        q.peek()
    assert not q and repr(q) == "EventQueue(len=0)"


def test_a_small_simulation_on_the_queue():
    """What assignments do with it: an M/D/1 queue by hand, 3 customers, service 1.0 s."""
    q: EventQueue[tuple[str, int]] = EventQueue()
    for i, t in enumerate([0.0, 0.2, 3.0]):
        q.push(t, ("arrive", i))
    free_at, done = 0.0, {}
    while q:
        now, (kind, i) = q.pop()
        if kind == "arrive":
            start = max(now, free_at)
            free_at = start + 1.0
            q.push(free_at, ("leave", i))
        else:
            done[i] = now
    assert done == {0: 1.0, 1: 2.0, 2: 4.0}
