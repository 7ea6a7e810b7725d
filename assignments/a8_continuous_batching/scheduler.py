"""Assignment 8: a continuous-batching scheduler over a paged KV pool (lecture §2.4, §3.5, §8;
course project milestones 2-3).

You write the *decisions* of one engine step; the tests run them on the real tiny model
(``servelab.tiny_llm``) with a paged KV pool (``servelab.blocks.BlockAllocator``) and price each
step on the paper GPU. Everything you get and return is plain data.

The state at the start of a step (no chunked prefill, no prefix caching):

* ``waiting``: ``[(request_id, num_tokens), ...]``, the front of the queue first. ``num_tokens``
  is the prompt plus the tokens generated so far (a request preempted earlier keeps its tokens).
  A waiting request holds no block; admitting it prefills all ``num_tokens`` tokens at once.
* ``running``: ``[(request_id, num_tokens), ...]``, oldest admitted first. Every running request
  is decoding: the KV of its first ``num_tokens - 1`` tokens is in the pool, in
  ``blocks_for(num_tokens - 1, block_size)`` blocks; a step feeds its last token, whose KV needs
  slot ``num_tokens - 1``, so a *fresh block* when ``num_tokens - 1`` is a multiple of
  ``block_size``.
* ``free_blocks``: blocks in the pool that nobody holds.

The rules (the ones ``servelab.engine`` documents, rules 2-4, without chunks or prefix hits):

1. **Running requests first**, oldest first, while the token budget
   (``max_num_batched_tokens`` per step) is not used up: each takes 1 token. Those left when it
   is used up are skipped this step (they keep their blocks). (With whole prompts admitted
   within the budget, as here, the running list never outgrows the budget, so this bites only
   in the tests' hand-made states; with chunked prefill it matters.)
2. **Preemption by recompute.** If a request's token needs a fresh block and none is free, the
   *newest* running request (the last in the running list, possibly the current one) is
   preempted: all its blocks go back to the pool. Repeat until a block is free or the current
   request was itself preempted (then rule 1 stops). The engine puts each one preempted at the
   front of the waiting queue; you only report them.
3. **Admission**, only if nobody was preempted this step: while requests wait, the budget is not
   used up and fewer than ``max_num_seqs`` requests run, take the *front* request. It needs all
   its ``num_tokens`` within the budget left and ``blocks_for(num_tokens, block_size)`` free
   blocks. If it cannot be admitted, nobody behind it is (strict first come, first served).

Return ``(decode, preempted, admitted)``, three lists of request ids: the running requests that
get a token this step (in running order), the ones preempted (in the order you preempt them),
and the waiting ones admitted (in queue order).

>>> schedule_step([(7, 5)], [], free_blocks=4, block_size=2, max_num_seqs=2,
...               max_num_batched_tokens=16)
([], [], [7])
>>> schedule_step([], [(0, 5), (1, 3)], free_blocks=0, block_size=2, max_num_seqs=2,
...               max_num_batched_tokens=16)
([0], [1], [])

Hint: keep your own copy of the running list, the free-block count and the budget as you go;
a preempted request gives back the blocks of its ``num_tokens - 1`` tokens.
Check yourself with ``make check TASK=a8_continuous_batching``.
"""

from __future__ import annotations


def blocks_for(num_tokens: int, block_size: int) -> int:
    """Blocks that hold the KV of ``num_tokens`` tokens (the last one may be partly empty).

    >>> blocks_for(5, 2), blocks_for(4, 2), blocks_for(0, 2)
    (3, 2, 0)
    """
    ### BEGIN SOLUTION
    return -(-num_tokens // block_size)
    ### END SOLUTION


def schedule_step(waiting, running, free_blocks: int, block_size: int, max_num_seqs: int,
                  max_num_batched_tokens: int):
    """One step's decisions ``(decode, preempted, admitted)`` (see the module docstring)."""
    ### BEGIN SOLUTION
    running = list(running)
    free, budget = free_blocks, max_num_batched_tokens
    decode: list[int] = []
    preempted: list[int] = []
    i = 0
    while i < len(running) and budget > 0:
        rid, n = running[i]
        needs_block = (n - 1) % block_size == 0  # the held blocks are full
        while needs_block and free == 0:
            victim, victim_n = running.pop()  # the newest; it has not fed a token this step
            free += blocks_for(victim_n - 1, block_size)
            preempted.append(victim)
        if preempted and preempted[-1] == rid:
            break
        if needs_block:
            free -= 1
        decode.append(rid)
        budget -= 1
        i += 1
    admitted: list[int] = []
    if not preempted:
        seats = len(running)
        for rid, n in waiting:
            if budget <= 0 or seats >= max_num_seqs or n > budget:
                break
            need = blocks_for(n, block_size)
            if need > free:
                break
            admitted.append(rid)
            free -= need
            budget -= n
            seats += 1
    return decode, preempted, admitted
    ### END SOLUTION
