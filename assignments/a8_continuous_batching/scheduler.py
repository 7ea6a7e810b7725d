"""Assignment 8: a continuous-batching scheduler over paged KV blocks (lecture §2.4, §4.5, §8;
course project milestone 2, without milestone 3's prefix caching and chunked prefill).

Write ``schedule(state) -> Plan``: the interface of ``servelab.engine.scheduler``, whose module
docstring numbers the rules; yours are its rules 2-4 with chunked prefill and prefix caching
off. The tests plug your function into servelab's ``Engine`` (``scheduler_harness.py``, one
folder up). The grader runs this file alone, without servelab, so ``state`` arrives as plain
fields:

* ``state.waiting`` (front first) and ``state.running`` (oldest admitted first): requests with
  ``request_id``, ``tokens`` (prompt + generated), ``num_computed`` and ``num_slots``. A
  running request decodes: ``num_computed == num_slots == len(tokens) - 1``.
* ``state.free_blocks``; ``state.config``: ``block_size``, ``max_num_seqs``,
  ``max_num_batched_tokens``. ``state.blocks`` is None: the harness applies your plan.

Block arithmetic (``servelab.blocks``): ``k`` slots fill ``blocks_for(k)`` blocks; a decode's
token needs a fresh block when its ``num_slots`` fill whole blocks; a preempted request gives
all its blocks back; admission takes ``blocks_for(len(tokens))`` blocks.

>>> from types import SimpleNamespace as NS
>>> cfg = NS(block_size=2, max_num_seqs=2, max_num_batched_tokens=16)
>>> schedule(NS(waiting=[NS(request_id=7, tokens=[1] * 5, num_computed=0, num_slots=0)],
...             running=[], free_blocks=4, config=cfg))
Plan(batch=[(7, 5, 0)], preempted=[], admitted=[7])
>>> running = [NS(request_id=0, tokens=[1] * 5, num_computed=4, num_slots=4),
...            NS(request_id=1, tokens=[1] * 3, num_computed=2, num_slots=2)]
>>> schedule(NS(waiting=[], running=running, free_blocks=0, config=cfg))
Plan(batch=[(0, 1, 4)], preempted=[1], admitted=[])
"""

from __future__ import annotations

from scheduler_plan import Plan  # servelab.engine.Plan's fields, as plain lists (given)


def blocks_for(num_tokens: int, block_size: int) -> int:
    """``ceil(num_tokens / block_size)``.

    >>> blocks_for(5, 2), blocks_for(4, 2), blocks_for(0, 2)
    (3, 2, 0)
    """
    ### BEGIN SOLUTION
    return -(-num_tokens // block_size)
    ### END SOLUTION


def schedule(state) -> Plan:
    """One step's plan (rules 2-4 of ``servelab.engine.scheduler``)."""
    ### BEGIN SOLUTION
    cfg = state.config
    bs = cfg.block_size
    running = list(state.running)
    free, budget = state.free_blocks, cfg.max_num_batched_tokens
    plan = Plan()
    i = 0
    while i < len(running) and budget > 0:
        seq = running[i]
        needs_block = seq.num_slots % bs == 0  # the held blocks are full
        while needs_block and free == 0:
            victim = running.pop()  # the newest; it has not fed a token this step
            free += blocks_for(victim.num_slots, bs)
            plan.preempted.append(victim.request_id)
        if plan.preempted and plan.preempted[-1] == seq.request_id:
            break
        if needs_block:
            free -= 1
        plan.batch.append((seq.request_id, 1, seq.num_computed))
        budget -= 1
        i += 1
    if not plan.preempted:
        seats = len(running)
        for seq in state.waiting:
            n = len(seq.tokens)
            if budget <= 0 or seats >= cfg.max_num_seqs or n > budget:
                break
            need = blocks_for(n, bs)
            if need > free:
                break
            plan.batch.append((seq.request_id, n, 0))
            plan.admitted.append(seq.request_id)
            free -= need
            budget -= n
            seats += 1
    return plan
    ### END SOLUTION
