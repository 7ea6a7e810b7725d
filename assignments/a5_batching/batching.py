"""Assignment 5: batch-1 and static batching on an event queue (lecture §4.5; exercise 5).

Write two small discrete-event simulators on an event queue with the API of
``servelab.events.EventQueue`` (given in ``assignments/given/event_queue.py``, which the
grader copies beside your file: ``push(time_s, payload)``, ``pop() -> (time_s, payload)``, ``peek()``, ``len()``; events at equal times come
out in the order they were pushed). Requests are numpy arrays in arrival
order: ``arrival_s``, ``prompt_len``, ``output_len`` (``L_o`` output tokens, the first made by
the prefill). ``step_time(batch, price)`` (given in ``given/pricing.py``) gives the seconds of
one forward over ``batch = [(new_tokens, context_len), ...]`` on the paper GPU whose constants
``price`` holds.

The rules (the same as ``servelab.serving_core``):

* a request's prefill is one step ``(prompt_len, 0)``, which makes its first token; its decode
  step ``s = 1 .. L_o - 1`` is ``(1, prompt_len + s - 1)``; it finishes at the end of step
  ``L_o - 1`` (at the end of the prefill when ``L_o = 1``);
* batch 1: whenever the GPU is free, the oldest waiting request runs alone to its end;
* static batching: whenever the GPU is free, start a batch of the oldest waiting requests (at
  most ``batch_size``) as soon as ``batch_size`` are waiting or the oldest has waited
  ``max_wait_s``; the batch prefills together in one step, then decodes until its longest member
  ends; nobody joins a running batch. With ``ride_along=True`` finished members keep computing
  padding in every step; with ``False`` they stop computing, but their seats are not refilled;
* everything that happens at one instant (arrivals, the end of a step) is taken in before the
  scheduler decides, so a request arriving exactly when a batch starts is in it.

Both functions return ``(first_token_s, finish_s)``, two float arrays in request order.
Check yourself with ``make check TASK=a5_batching``.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from event_queue import EventQueue  # the API of servelab.events.EventQueue, in pure Python
from pricing import step_time


def simulate_batch1(arrival_s, prompt_len, output_len, price):
    """Batch 1, first come first served."""
    ### BEGIN SOLUTION
    return simulate_static(arrival_s, prompt_len, output_len, price, batch_size=1, max_wait_s=0.0)
    ### END SOLUTION


def simulate_static(arrival_s, prompt_len, output_len, price, batch_size: int,
                    max_wait_s: float = 0.2, ride_along: bool = True):
    """Static batching (see the module docstring)."""
    ### BEGIN SOLUTION
    n = len(arrival_s)
    first, finish = np.full(n, np.nan), np.full(n, np.nan)
    events = EventQueue()
    for i in range(n):
        events.push(float(arrival_s[i]), ("arrival", i))
    waiting: deque[int] = deque()
    batch: list[int] = []
    step = 0
    woken_for = None

    def run(now: float) -> None:
        if step == 0:
            shape = [(int(prompt_len[j]), 0) for j in batch]
        else:
            members = batch if ride_along else [j for j in batch if output_len[j] - 1 >= step]
            shape = [(1, int(prompt_len[j]) + step - 1) for j in members]
        events.push(now + step_time(shape, price), ("step_end", None))

    while len(events):
        now = events.peek()[0]
        while len(events) and events.peek()[0] == now:
            _, (kind, i) = events.pop()
            if kind == "arrival":
                waiting.append(i)
            elif kind == "step_end":
                for j in batch:
                    if step == 0:
                        first[j] = now
                    if output_len[j] - 1 == step:
                        finish[j] = now
                step += 1
                if step <= max(output_len[j] for j in batch) - 1:
                    run(now)
                else:
                    batch = []
        if not batch and waiting:
            deadline = float(arrival_s[waiting[0]]) + max_wait_s
            if len(waiting) >= batch_size or now >= deadline:
                batch = [waiting.popleft() for _ in range(min(batch_size, len(waiting)))]
                step = 0
                run(now)
            elif deadline != woken_for:
                woken_for = deadline
                events.push(deadline, ("wake", None))
    return first, finish
    ### END SOLUTION


def seat_waste(output_len, batch_members) -> float:
    """Share of decode seats that produced no real token, over batches given as lists of
    request indices: a batch of ``m`` members whose longest has ``L`` output tokens offers
    ``m * (L - 1)`` decode seats, and member ``j`` uses ``output_len[j] - 1`` of them."""
    ### BEGIN SOLUTION
    seats = sum(len(b) * (max(output_len[j] for j in b) - 1) for b in batch_members)
    used = sum(output_len[j] - 1 for b in batch_members for j in b)
    return 1.0 - used / seats if seats else 0.0
    ### END SOLUTION
