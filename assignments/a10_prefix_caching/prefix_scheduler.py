"""Assignment 10, part 2: continuous batching with prefix-cache hits and chunked prefill
(lecture §2.4, §3.5, §8; course project milestone 3).

Write ``schedule(state) -> Plan``, the interface and rules 2-4 of ``servelab.engine.scheduler``
(its module docstring numbers them), now with both of milestone 3's features: start from your
a8 scheduler. ``state.blocks`` is your own :class:`prefix_blocks.PrefixBlocks` (the engine's
``BlockAllocator`` in servelab): take and free slots on it as you decide, as the engine's
``ContinuousBatchingScheduler`` does on its allocator. The tests (``scheduler_harness.py``, one
folder up) plug your function into servelab's ``Engine`` and apply your plan to servelab's
allocator too.

What is new since a8:

* ``state.config.chunked_prefill``: a prompt may be fed in chunks. A running request with
  ``num_computed < num_slots`` is still prefilling and takes its next chunk; an admitted one
  takes as many of its tokens as the budget left allows. Without it, a prompt is fed whole.
* Prefix caching: admission allocates *all* the request's tokens with ``blocks.allocate`` and
  starts at ``blocks.num_cached_tokens(id)``: the batch entry is ``(id, new_tokens, start)``.
* A block is registered once computed: after scheduling ``n`` tokens of a request from
  ``start`` (a chunk, a whole prompt or a decode), call ``blocks.mark_computed(id, start + n)``,
  so that a request admitted later, even in the same step, can hit what they complete.

>>> from types import SimpleNamespace as NS
>>> from prefix_blocks import PrefixBlocks
>>> blocks = PrefixBlocks(8, 2)
>>> cfg = NS(block_size=2, max_num_seqs=4, max_num_batched_tokens=6, chunked_prefill=True)
>>> waiting = [NS(request_id=0, tokens=[1, 2, 3, 4, 5], num_computed=0, num_slots=0),
...            NS(request_id=1, tokens=[1, 2, 3, 4, 9], num_computed=0, num_slots=0)]
>>> schedule(NS(step=0, waiting=waiting, running=[], free_blocks=8, config=cfg, blocks=blocks))
Plan(batch=[(0, 5, 0), (1, 1, 4)], preempted=[], admitted=[0, 1])
"""

from __future__ import annotations

from prefix_errors import OutOfBlocks  # what your PrefixBlocks raises when the pool is short
from scheduler_plan import Plan  # servelab.engine.Plan's fields, as plain lists (given)


def schedule(state) -> Plan:
    """One step's plan (rules 2-4 of ``servelab.engine.scheduler``, chunked prefill and prefix
    caching on)."""
    ### BEGIN SOLUTION
    blocks, cfg = state.blocks, state.config
    plan = Plan()
    budget = cfg.max_num_batched_tokens
    running = list(state.running)
    i = 0
    while i < len(running) and budget > 0:  # rule 2
        seq = running[i]
        if seq.num_computed < seq.num_slots:  # the next chunk of its prompt
            n = min(seq.num_slots - seq.num_computed, budget)
        else:
            while not blocks.can_append(seq.request_id):  # rule 3: the newest goes
                victim = running.pop()
                blocks.free(victim.request_id)
                plan.preempted.append(victim.request_id)
                if victim is seq:
                    break
            if seq.request_id in plan.preempted:
                break
            blocks.append(seq.request_id, seq.tokens[-1])
            n = 1
        _feed(blocks, plan, seq.request_id, n, seq.num_computed)
        budget -= n
        i += 1
    seats = len(running)
    for seq in state.waiting if not plan.preempted else ():  # rule 4
        if budget <= 0 or seats >= cfg.max_num_seqs:
            break
        if not cfg.chunked_prefill and len(seq.tokens) > budget:
            break
        try:
            blocks.allocate(seq.request_id, seq.tokens)
        except OutOfBlocks:
            break
        start = blocks.num_cached_tokens(seq.request_id)
        n = len(seq.tokens) - start
        if cfg.chunked_prefill:
            n = min(n, budget)
        _feed(blocks, plan, seq.request_id, n, start)
        plan.admitted.append(seq.request_id)
        budget -= n
        seats += 1
    return plan
    ### END SOLUTION


def _feed(blocks, plan: Plan, request_id: int, n: int, start: int) -> None:
    """Schedules ``n`` tokens of ``request_id`` from ``start`` and registers the blocks they
    complete (yours to write, or to inline)."""
    ### BEGIN SOLUTION
    plan.batch.append((request_id, n, start))
    blocks.mark_computed(request_id, start + n)
    ### END SOLUTION
