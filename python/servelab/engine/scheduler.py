"""The continuous-batching scheduler (lecture §2.4, §3.5, §4.5 policy 3): its rules, numbered once.

A step is *planned* by a scheduler, ``schedule(state) -> Plan``, and *carried out* by
:class:`servelab.engine.Engine` (the forward on tiny_llm, sampling, the price). The same
scheduler plans the steps of the pure-Python simulator (:mod:`servelab.reference.continuous`);
the Rust simulator (``rust/src/sim/continuous/event_driven.rs``) is its fast twin, held equal batch for batch
by ``tests/test_sim_continuous.py``. Another policy (a speculative step, an offload decision, a
router) plugs in as another object with a ``schedule`` method: ``Engine(scheduler=...)``.

Contract. ``state.waiting`` and ``state.running`` hold :class:`Seq` views, read-only to the
scheduler. A scheduler given ``state.blocks`` (the engine's block allocator) takes and frees
slots on it as it decides, and must leave: no block for a preempted request; slots for
``context_len + new_tokens`` tokens for each batch entry. The engine then moves the requests
between the queues as the plan says, copies the blocks of ``plan.copies`` and runs
``plan.batch`` in its order. A scheduler without ``state.blocks`` (a8's, which runs sandboxed)
plans from ``free_blocks`` alone and its caller applies the plan to the allocator.

Rules
-----
Deterministic, so that the Rust simulator reproduces every batch. ``bs`` = block size; a
request's *tokens* are its prompt and the tokens generated so far; ``computed`` counts its
tokens whose KV is in the pool; ``m`` = ``max_new_tokens``; requests are numbered in the order
they were added. Step ``s`` does, in this order:

1. **Arrivals.** Requests with ``arrival_step == s`` (or, timed, ``arrival_s`` <= the clock
   when the step starts; an engine with nothing to do jumps its clock to the next one and logs
   no idle step) arrive, by id. A request is *unservable* (reported at once, never queued) if its
   ``need = len(prompt) + m - 1`` tokens (the last token is never fed back) need more than
   ``num_blocks`` blocks, or, without chunked prefill, ``need > max_num_batched_tokens`` (a
   recompute after preemption prefills ``need`` tokens at once). The rest join the back of the
   waiting queue.
2. **Running requests**, oldest admitted first, while the step's token budget
   (``max_num_batched_tokens``) lasts; the rest are skipped this step and keep their blocks.
   One still prefilling (chunked prefill) takes ``min(len(tokens) - computed, budget left)``
   tokens; a decoding one takes 1 token, its last sampled one, which first gets a slot with
   ``allocator.append``.
3. **Preemption by recompute.** If that append cannot succeed (``can_append`` is false), the
   *newest* running request (the last admitted, maybe the current one) is preempted: its
   blocks are freed, ``computed`` drops to 0, it keeps its generated tokens and goes to the
   *front* of the waiting queue. Repeat until the append can succeed or the current request
   was itself preempted (then rule 2 ends).
4. **Admission**, only if nobody was preempted this step: while requests wait, the budget
   lasts and fewer than ``max_num_seqs`` run, take the front request (strict FCFS: if it
   cannot be admitted, nobody behind it is). Without chunked prefill it needs
   ``len(tokens) <= budget left``; ``allocator.allocate(id, tokens, num_computed=0)`` of all
   its tokens must succeed (:class:`~servelab.blocks.OutOfBlocks` stops admission). It starts
   at ``computed = k * bs``, ``k`` its prefix-cache hits, and schedules ``len(tokens) -
   computed`` tokens, capped by the budget left with chunked prefill. It joins the end of the
   running list. Whenever a chunk is scheduled (here and in rule 2),
   ``allocator.mark_computed(id, computed + new_tokens)`` registers the blocks it completes, so
   only computed blocks can be hits; a request admitted after the writer in the same step may
   hit them, since each layer writes a sequence's KV before the next sequence reads it.
5. **The forward.** The batch is rule 2's entries in order, then rule 4's:
   ``(request_id, new_tokens, context_len = computed)``. One ``TinyLLM.forward_batch`` runs
   it; ``hw_model.step_cost`` of the entries is the step's time (an idle step costs 0, logs
   ``[]``).
6. **Sampling and leaving.** A request whose tokens are all computed samples its next token
   with ``sampler(logits, len(generated))`` (the first sets its first-token time: the clock at
   the end of the step). At ``m`` tokens it finishes and its blocks are freed at once.

A request arriving at step ``s`` arrives at the clock's value when step ``s`` starts. Without
prefix caching the schedule depends only on lengths, arrivals and settings.

>>> from servelab.blocks import BlockAllocator
>>> cfg = SchedulerConfig(block_size=2, num_blocks=3, max_num_seqs=4, max_num_batched_tokens=8)
>>> blocks = BlockAllocator(3, 2)
>>> blocks.allocate(0, [5, 6, 7]), blocks.allocate(1, [8, 9])
([0, 1], [2])
>>> running = [Seq(0, [5, 6, 7, 1], num_computed=3, num_slots=3), Seq(1, [8, 9, 4], 2, 2)]
>>> plan = schedule(SchedulerState(0, [], running, blocks.num_free_blocks, cfg, blocks))
>>> plan.batch, plan.preempted      # request 0's slot fits block 1; request 1 needs a new block
(((0, 1, 3),), (1,))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence

from servelab import _checks
from servelab.blocks import OutOfBlocks
from servelab.engine.records import BatchEntry

__all__ = ["SchedulerConfig", "Seq", "SchedulerState", "Plan", "VerifyStep", "Scheduler",
           "ContinuousBatchingScheduler", "schedule"]


@dataclass(frozen=True)
class SchedulerConfig:
    """The pool and the limits a scheduler plans within (rules 1-4)."""

    block_size: int
    num_blocks: int
    max_num_seqs: int
    max_num_batched_tokens: int
    chunked_prefill: bool = False
    prefix_caching: bool = False

    def __post_init__(self) -> None:
        for name in ("block_size", "num_blocks", "max_num_seqs", "max_num_batched_tokens"):
            object.__setattr__(self, name, _checks.integer(name, getattr(self, name), 1, None))
        for name in ("chunked_prefill", "prefix_caching"):
            object.__setattr__(self, name, _checks.flag(name, getattr(self, name)))

    def unservable_reason(self, prompt_len: int, max_new_tokens: int) -> str:
        """Why a request can never run (rule 1), or ``""``.

        >>> SchedulerConfig(4, 2, 8, 64).unservable_reason(8, 3)
        'needs 3 blocks for 10 tokens, the pool has 2 of 4'
        """
        need = _checks.integer("prompt_len", prompt_len, 1, None) \
            + _checks.integer("max_new_tokens", max_new_tokens, 1, None) - 1
        blocks = -(-need // self.block_size)
        if blocks > self.num_blocks:
            return (f"needs {blocks} blocks for {need} tokens, the pool has {self.num_blocks} "
                    f"of {self.block_size}")
        if not self.chunked_prefill and need > self.max_num_batched_tokens:
            return (f"a (re)prefill of up to {need} tokens exceeds max_num_batched_tokens "
                    f"{self.max_num_batched_tokens} without chunked prefill")
        return ""


@dataclass
class Seq:
    """One request as a scheduler sees it (read-only to the scheduler; the engine updates it)."""

    request_id: int
    tokens: list[int]  # prompt + generated so far
    num_computed: int = 0  # leading tokens whose KV is in the pool (0 while waiting)
    num_slots: int = 0  # tokens the allocator holds slots for (0 while waiting)
    # the request as added (prompt, max_new_tokens, sampler), for a policy that needs more
    # than lengths (a speculative step's cap and sampler); None outside the engine
    request: Any = None


@dataclass(frozen=True)
class SchedulerState:
    """What a scheduler sees at the start of a step (see the module docstring's contract)."""

    step: int
    waiting: Sequence[Seq]  # the queue, front first
    running: Sequence[Seq]  # admitted requests, oldest first
    free_blocks: int
    config: SchedulerConfig
    blocks: Any = None  # the engine's BlockAllocator, or None (the caller applies the plan)


@dataclass(frozen=True)
class Plan:
    """One step's decisions: the batch in forward order (rule 5), the requests preempted (in
    order) and admitted (in queue order), and copy-on-write block copies ``(src, dst)``.

    A feature that adds work to the step carries it in a subclass and hands the engine a
    :class:`VerifyStep` from :meth:`verify_step` (speculative decoding's
    :class:`~servelab.engine.speculative.SpeculativePlan` does); the engine knows no feature."""

    batch: tuple[BatchEntry, ...] = ()
    preempted: tuple[int, ...] = ()
    admitted: tuple[int, ...] = ()
    copies: tuple[tuple[int, int], ...] = ()

    def verify_step(self) -> VerifyStep | None:
        """The executor hook of a plan whose batch entries end in proposed tokens; None here."""
        return None


class VerifyStep(Protocol):
    """What the engine asks of a plan whose entries end in proposed tokens (lecture §8
    milestone 4a). Entry ``i``'s last ``len(proposals(i))`` new tokens get no KV slot before
    the forward; the forward writes the entry to ``cache(i, its cache)`` and returns a row of
    logits per new token; ``judge`` keeps what it accepts in that cache and returns the tokens
    the step emits for the entry. ``cost_s(gpu)``: paper seconds of the work that made the
    proposals, on top of the forward's price."""

    def proposals(self, i: int) -> tuple[int, ...]: ...

    def cache(self, i: int, cache: Any) -> Any: ...

    def judge(self, i: int, request: Any, out_index: int, logits: Any, cache: Any) -> list[int]: ...

    def cost_s(self, gpu: Any) -> float: ...


class Scheduler(Protocol):
    def schedule(self, state: SchedulerState) -> Plan: ...


class ContinuousBatchingScheduler:
    """Rules 2-4 on ``state.blocks`` (which it requires). Keeps no state between steps.

    No copy-on-write can happen here: nothing forks, and a prefix hit is a full block, never a
    sequence's last one (one token is always left to compute), so ``plan.copies`` stays empty.
    """

    def schedule(self, state: SchedulerState) -> Plan:
        _checks.instance("state", state, SchedulerState, "a SchedulerState")
        blocks, cfg = state.blocks, state.config
        if blocks is None:
            raise ValueError("state.blocks must be the engine's BlockAllocator, got None")
        batch: list[BatchEntry] = []
        preempted: list[int] = []
        budget = cfg.max_num_batched_tokens
        running = list(state.running)
        i = 0
        while i < len(running) and budget > 0:  # rule 2
            seq = running[i]
            if seq.num_computed < seq.num_slots:  # a prompt still being prefilled in chunks
                n = min(seq.num_slots - seq.num_computed, budget)
            else:
                while not blocks.can_append(seq.request_id):  # rule 3: the newest goes
                    victim = running.pop()
                    blocks.free(victim.request_id)
                    preempted.append(victim.request_id)
                    if victim is seq:
                        break
                if preempted and preempted[-1] == seq.request_id:
                    break
                blocks.append(seq.request_id, seq.tokens[-1])
                n = 1
            _take(blocks, batch, seq.request_id, n, seq.num_computed)
            budget -= n
            i += 1
        admitted: list[int] = []
        seats = len(running)
        for seq in state.waiting if not preempted else ():  # rule 4
            if budget <= 0 or seats >= cfg.max_num_seqs:
                break
            if not cfg.chunked_prefill and len(seq.tokens) > budget:
                break
            try:
                blocks.allocate(seq.request_id, seq.tokens, num_computed=0)
            except OutOfBlocks:  # nothing changed
                break
            start = blocks.num_cached_tokens(seq.request_id)
            n = len(seq.tokens) - start
            if cfg.chunked_prefill:
                n = min(n, budget)
            _take(blocks, batch, seq.request_id, n, start)
            admitted.append(seq.request_id)
            budget -= n
            seats += 1
        return Plan(tuple(batch), tuple(preempted), tuple(admitted))


def _take(blocks: Any, batch: list[BatchEntry], rid: int, n: int, start: int) -> None:
    """Schedule ``n`` tokens of ``rid`` from ``start`` and register the blocks they complete."""
    batch.append((rid, n, start))
    blocks.mark_computed(rid, start + n)


def schedule(state: SchedulerState) -> Plan:
    """The continuous-batching plan of one step (rules 2-4)."""
    return ContinuousBatchingScheduler().schedule(state)
