"""A continuous-batching engine on tiny_llm, with paged KV blocks (lecture §2.4, §3.5, §8 milestones 2-3).

Orca's idea (iteration-level scheduling): the batch is chosen anew at every step, so a finished
request leaves at once and a waiting one joins as soon as there is room. vLLM's idea
(PagedAttention): KV memory is taken a block at a time from a shared pool
(:class:`servelab.blocks.BlockAllocator` does the bookkeeping,
:class:`servelab.tiny_llm.paged.PagedKVPool` holds the data), so a request holds only the blocks
its tokens fill. Both must keep §6.5's invariant: every request gets exactly the tokens that
``tiny_llm.generate`` gives it alone (samplers are seeded by ``(seed, output index)``, so a token
never depends on the batch it was computed in).

The tokens are real (tiny_llm computes them); the time is paper time: each step's batch
``[(new_tokens, context_len), ...]`` is priced by ``hw_model.step_cost`` for ``cost_model`` on
``gpu`` (default Llama-3-8B on an H100), so TTFT and TPOT are those of the big model on the
paper GPU serving the same schedule (§8.3).

Scheduling rules
----------------
They are deterministic and written to be re-implemented exactly (the Rust simulator must
reproduce the same batches). Notation: ``bs`` = block size; a request's *tokens* are its prompt
followed by the tokens generated so far; ``computed`` counts its tokens whose KV is in the pool;
``m`` = ``max_new_tokens``. Requests are numbered 0, 1, 2, ... in the order they were added.
Steps are numbered 0, 1, 2, ...; step ``s`` does, in this order:

1. **Arrivals.** Requests with ``arrival_step == s`` arrive, by id. A request is *unservable*
   (reported at once with status ``"unservable"``, never queued) if its
   ``need = len(prompt) + m - 1`` tokens (the last token is never fed back) need more than
   ``num_blocks`` blocks (``ceil(need / bs) > num_blocks``), or, without chunked prefill, if
   ``need > max_num_batched_tokens`` (a recompute after preemption may have to prefill ``need``
   tokens in one step). Every other arrival goes to the back of the waiting queue.
2. **Running requests**, in the order they were admitted (oldest first), while the token budget
   (``max_num_batched_tokens`` per step) is not used up; those left over when it is are skipped
   this step (they keep their blocks):

   * a request still prefilling (chunked prefill only) takes
     ``min(len(tokens) - computed, budget left)`` tokens;
   * a decoding request takes 1 token, its last sampled one, which first gets a slot with
     ``allocator.append``.
3. **Preemption by recompute.** If that ``append`` cannot succeed (``can_append`` is false),
   the *newest* running request (the last admitted, possibly the current one) is preempted:
   its blocks are freed, its ``computed`` drops to 0, it keeps its generated tokens and goes to
   the *front* of the waiting queue. Repeat until the append can succeed or the current request
   was itself preempted (then step 2 ends).
4. **Admission**, only if nobody was preempted in this step: while the waiting queue is not
   empty, the budget is not used up and fewer than ``max_num_seqs`` requests run, take the
   front request (strict FCFS: if it cannot be admitted, nobody behind it is):

   * without chunked prefill it needs ``len(tokens) <= budget left`` (all of its tokens, cached
     or not: the hit count is only known after allocating);
   * ``allocator.allocate(id, tokens, num_computed=0)`` for all its tokens (prompt, plus the
     generated ones after a preemption); :class:`OutOfBlocks` stops admission;
   * with prefix caching it starts at ``computed = k * bs``, ``k`` its prefix-hit blocks; it
     schedules ``len(tokens) - computed`` tokens, capped by the budget left with chunked prefill.

   It joins the end of the running list. Whenever a request's chunk is scheduled (here and in
   rule 2), ``allocator.mark_computed(id, computed + new_tokens)`` registers the keys of the
   blocks it completes, so only computed blocks can be hits. A block completed earlier in the
   same step may be hit by a request admitted after its writer: the reader comes later in the
   batch, and each layer writes a sequence's KV before the next sequence reads it.
5. **The forward.** The batch is the running requests of rule 2 in order, then the admitted
   ones; entry ``(request_id, new_tokens, context_len = computed)``. One
   ``TinyLLM.forward_batch`` runs it; the step costs ``hw_model.step_cost`` of the entries
   (an idle step, with nothing to run, costs 0 and logs ``[]``).
6. **Sampling and leaving.** A request whose tokens are all computed samples its next token
   with ``sampler(logits, len(generated))``; the first one sets its first-token time (the
   clock at the end of the step). At ``m`` tokens it finishes: its blocks are freed at once.

Simulated times: a request arriving at step ``s`` arrives at the clock's value when step ``s``
starts (the end of step ``s - 1``).

The schedule depends on token *values* only through prefix-cache hits (block keys hash the
tokens, generated ones included); without prefix caching it is a function of the lengths,
arrival steps and engine settings alone. ``EngineResult.batch_log()`` is the plain record to
compare against: one list per step of ``(request_id, new_tokens, context_len)``.

>>> from servelab.tiny_llm import generate
>>> res = serve([Request(list(b"hello"), 4), Request(list(b"hello world"), 3, arrival_step=1)],
...             num_blocks=16, block_size=4)
>>> res.batch_log()
[[(0, 5, 0)], [(0, 1, 5), (1, 11, 0)], [(0, 1, 6), (1, 1, 11)], [(0, 1, 7), (1, 1, 12)]]
>>> res.requests[1].tokens == generate(list(b"hello world"), 3).tokens
True
>>> round(res.requests[0].ttft_s * 1e3, 2), res.requests[1].status
(6.1, 'finished')
"""

from servelab.engine.core import Engine, serve
from servelab.engine.records import (BatchEntry, EngineResult, EngineStep, Request,
                                     RequestResult)

__all__ = ["Engine", "serve", "Request", "RequestResult", "EngineStep", "EngineResult",
           "BatchEntry"]
