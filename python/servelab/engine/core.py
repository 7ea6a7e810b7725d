"""The engine loop: one :meth:`Engine.step` schedules a batch, runs it on tiny_llm over the paged
KV pool, samples, and prices the batch on the paper GPU. The rules are in the package docstring
(:mod:`servelab.engine`); the numbered comments below point at them.

>>> e = Engine(num_blocks=8, block_size=4)
>>> e.add_request(list(b"hi there"), 3), e.add_request(list(b"yo"), 2, arrival_step=1)
(0, 1)
>>> res = e.run()
>>> res.batch_log()
[[(0, 8, 0)], [(0, 1, 8), (1, 2, 0)], [(0, 1, 9), (1, 1, 2)]]
>>> [r.tokens for r in res.requests] == [generate(list(b"hi there"), 3).tokens,
...                                      generate(list(b"yo"), 2).tokens]
True
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Sequence

from servelab import _checks, hw_model
from servelab.blocks import BlockAllocator, OutOfBlocks
from servelab.engine.records import (BatchEntry, EngineResult, EngineStep, Request,
                                     RequestResult)
from servelab.tiny_llm import TINY, ModelConfig, TinyLLM, as_token_ids, generate, model_for
from servelab.tiny_llm.paged import PagedKVCache, PagedKVPool
from servelab.tiny_llm.sampling import GREEDY, Sampler, sampled_token

__all__ = ["Engine", "serve"]

MAX_ARRIVAL_STEP = 1_000_000  # idle steps are recorded one by one; keep the log finite


def _positive(name: str, v: Any) -> int:
    if not _checks.is_int(v) or v < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")
    return int(v)


@dataclass
class _Live:
    """Mutable state of one request inside the engine."""

    rid: int
    request: Request
    tokens: list[int]  # prompt + generated so far
    out: list[int] = field(default_factory=list)
    computed: int = 0  # tokens of `tokens` whose KV is in the pool (0 while waiting)
    held: int = 0  # tokens the allocator holds slots for (0 while waiting)
    cache: PagedKVCache | None = None
    first_step: int | None = None
    first_s: float = math.nan
    preemptions: int = 0
    cached_tokens: int = 0
    computed_tokens: int = 0


class Engine:
    """A continuous-batching engine on tiny_llm with a paged KV cache (see :mod:`servelab.engine`).

    ``config``/``model``: the tiny model that computes the tokens. ``num_blocks`` blocks of
    ``block_size`` tokens form the KV pool. ``max_num_seqs`` caps the running requests and
    ``max_num_batched_tokens`` the tokens of one step. ``cost_model`` and ``gpu`` price each
    step (``hw_model.step_cost``) for the simulated clock.

    >>> Engine(num_blocks=0)
    Traceback (most recent call last):
    ...
    ValueError: num_blocks must be a positive integer, got 0
    """

    def __init__(self, config: ModelConfig = TINY, *, num_blocks: int = 64, block_size: int = 16,
                 max_num_seqs: int = 8, max_num_batched_tokens: int = 256,
                 chunked_prefill: bool = False, prefix_caching: bool = False,
                 cost_model: hw_model.ModelSpec = hw_model.LLAMA3_8B,
                 gpu: hw_model.GpuSpec = hw_model.H100, model: TinyLLM | None = None) -> None:
        if not isinstance(config, ModelConfig):
            raise ValueError(f"config must be a ModelConfig, got {config!r}")
        self.num_blocks = _positive("num_blocks", num_blocks)
        self.block_size = _positive("block_size", block_size)
        self.max_num_seqs = _positive("max_num_seqs", max_num_seqs)
        self.max_num_batched_tokens = _positive("max_num_batched_tokens", max_num_batched_tokens)
        for name, v in (("chunked_prefill", chunked_prefill), ("prefix_caching", prefix_caching)):
            if not isinstance(v, bool):
                raise ValueError(f"{name} must be a bool, got {v!r}")
        if not isinstance(cost_model, hw_model.ModelSpec):
            raise ValueError(f"cost_model must be a hw_model.ModelSpec, got {cost_model!r}")
        if not isinstance(gpu, hw_model.GpuSpec):
            raise ValueError(f"gpu must be a hw_model.GpuSpec, got {gpu!r}")
        self.model = model_for(config) if model is None else model
        if not isinstance(self.model, TinyLLM):
            raise ValueError(f"model must be a TinyLLM, got {model!r}")
        self.model.config.check_same(config, "model")
        self.config = config
        self.chunked_prefill, self.prefix_caching = chunked_prefill, prefix_caching
        self.cost_model, self.gpu = cost_model, gpu
        # the pool first: it refuses a size past tiny_llm's memory limit before anything is built
        self.pool = PagedKVPool(config, self.num_blocks, self.block_size)
        self.allocator = BlockAllocator(self.num_blocks, self.block_size, prefix_caching)
        self._live: list[_Live] = []
        self._results: dict[int, RequestResult] = {}
        self._arrivals: deque[_Live] = deque()  # sorted by (arrival_step, request_id) at run()
        self.waiting: deque[_Live] = deque()
        self.running: list[_Live] = []
        self.steps: list[EngineStep] = []
        self.clock_s = 0.0
        self._started = False

    # ---- input -------------------------------------------------------------------------------

    def add_request(self, prompt: Sequence[int], max_new_tokens: int, sampler: Sampler = GREEDY,
                    arrival_step: int = 0) -> int:
        """Queue a request; returns its id (0, 1, 2, ... in the order added).

        >>> Engine().add_request([1, 2], 0)
        Traceback (most recent call last):
        ...
        ValueError: max_new_tokens must be a positive integer, got 0
        >>> Engine().add_request([1, 2], 4, arrival_step=-1)
        Traceback (most recent call last):
        ...
        ValueError: arrival_step must be an integer in [0, 1000000], got -1
        """
        if self._started:
            raise ValueError("add_request after run() started: add every request first")
        tokens = as_token_ids(prompt, self.config.vocab_size, "prompt").tolist()
        m = _positive("max_new_tokens", max_new_tokens)
        if not _checks.is_int(arrival_step) \
                or not 0 <= arrival_step <= MAX_ARRIVAL_STEP:
            raise ValueError(f"arrival_step must be an integer in [0, {MAX_ARRIVAL_STEP}], "
                             f"got {arrival_step!r}")
        if not callable(sampler):
            raise ValueError(f"sampler must be callable as sampler(logits, step), got {sampler!r}")
        need = len(tokens) + m - 1  # the last token is never fed back (§2.1)
        if need > self.config.max_len:
            raise ValueError(f"a prompt of {len(tokens)} tokens and max_new_tokens {m} need "
                             f"{need} positions, more than max_len {self.config.max_len}")
        rid = len(self._live)
        req = Request(tuple(tokens), m, sampler, int(arrival_step))
        self._live.append(_Live(rid, req, list(tokens)))
        return rid

    def unservable_reason(self, prompt_len: int, max_new_tokens: int) -> str:
        """Why a request can never run here (rule 1), or ``""``."""
        need = _positive("prompt_len", prompt_len) + _positive("max_new_tokens", max_new_tokens) - 1
        blocks = -(-need // self.block_size)
        if blocks > self.num_blocks:
            return (f"needs {blocks} blocks for {need} tokens, the pool has {self.num_blocks} "
                    f"of {self.block_size}")
        if not self.chunked_prefill and need > self.max_num_batched_tokens:
            return (f"a (re)prefill of up to {need} tokens exceeds max_num_batched_tokens "
                    f"{self.max_num_batched_tokens} without chunked prefill")
        return ""

    # ---- the loop ----------------------------------------------------------------------------

    def run(self) -> EngineResult:
        """Step until every request has finished or been found unservable."""
        while self.step() is not None:
            pass
        return self.result()

    def result(self) -> EngineResult:
        return EngineResult([self._results[r.rid] for r in self._live if r.rid in self._results],
                            list(self.steps), self.allocator.stats())

    def step(self) -> EngineStep | None:
        """One engine step (rules 1-6 of :mod:`servelab.engine`); None once all work is done."""
        if not self._started:
            self._started = True
            self._arrivals = deque(sorted(self._live, key=lambda r: (r.request.arrival_step, r.rid)))
        if not (self._arrivals or self.waiting or self.running):
            return None
        s = len(self.steps)
        self._arrive(s)
        batch: list[tuple[_Live, int]] = []
        preempted, admitted = self._plan(batch)
        if not batch:
            if self.waiting or self.running:  # pragma: no cover - rules 1-4 rule this out
                raise RuntimeError(f"step {s}: work is left but nothing could be scheduled")
            step = EngineStep(s, (), (), (), (), 0.0, self.clock_s, self._blocks_used())
        else:
            entries: list[BatchEntry] = [(r.rid, n, r.computed) for r, n in batch]
            cost = hw_model.step_cost(self.cost_model, self.gpu,
                                      [(n, c) for _, n, c in entries]).time_s
            self.clock_s += cost
            finished = self._forward_and_sample(batch, s)
            step = EngineStep(s, tuple(entries), tuple(preempted), tuple(admitted),
                              tuple(finished), cost, self.clock_s, self._blocks_used())
        self.steps.append(step)
        return step

    def _arrive(self, s: int) -> None:
        """Rule 1: this step's arrivals join the back of the queue, or are unservable."""
        while self._arrivals and self._arrivals[0].request.arrival_step == s:
            r = self._arrivals.popleft()
            reason = self.unservable_reason(len(r.request.prompt), r.request.max_new_tokens)
            if reason:
                self._results[r.rid] = self._finish(r, "unservable", s, self.clock_s, reason)
            else:
                self.waiting.append(r)

    def _plan(self, batch: list[tuple[_Live, int]]) -> tuple[list[int], list[int]]:
        """Rules 2-4: fill ``batch`` with ``(request, new_tokens)`` and return the ids preempted
        and admitted. The one scheduling hook: a subclass may decide differently (the
        continuous-batching assignment's harness drives the engine with a student's decisions
        through it) and reuse everything else (arrivals, the forward, sampling, the clock)."""
        budget, preempted = self._continue_running(batch)
        admitted = [] if preempted else self._admit_waiting(batch, budget)
        return preempted, admitted

    def _continue_running(self, batch: list[tuple[_Live, int]]) -> tuple[int, list[int]]:
        """Rules 2-3: running requests, oldest admitted first, within the token budget.
        Returns the budget left and the ids preempted."""
        budget = self.max_num_batched_tokens
        preempted: list[int] = []
        i = 0
        while i < len(self.running) and budget > 0:
            r = self.running[i]
            if r.computed < r.held:  # a prompt still being prefilled in chunks
                n = min(r.held - r.computed, budget)
            else:  # decode: the last sampled token needs a slot
                while not self.allocator.can_append(r.rid):
                    victim = self.running.pop()  # rule 3: the newest running request
                    self._preempt(victim)
                    preempted.append(victim.rid)
                    if victim is r:
                        return budget, preempted
                self._append(r)
                n = 1
            self._schedule(batch, r, n)
            budget -= n
            i += 1
        return budget, preempted

    def _admit_waiting(self, batch: list[tuple[_Live, int]], budget: int) -> list[int]:
        """Rule 4: strict FCFS admission while seats, budget and blocks allow."""
        admitted: list[int] = []
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            r = self.waiting[0]
            if not self.chunked_prefill and len(r.tokens) > budget:
                break
            if not self._admit(r):
                break
            self.waiting.popleft()
            self.running.append(r)
            admitted.append(r.rid)
            n = len(r.tokens) - r.computed
            if self.chunked_prefill:
                n = min(n, budget)
            self._schedule(batch, r, n)
            budget -= n
        return admitted

    def _forward_and_sample(self, batch: list[tuple[_Live, int]], s: int) -> list[int]:
        """Rules 5 and 6: one forward over the batch, then sampling; returns the finished ids."""
        logits = self.model.forward_batch([r.tokens[r.computed:r.computed + n] for r, n in batch],
                                          [r.cache for r, _ in batch])
        finished: list[int] = []
        for (r, n), lg in zip(batch, logits):
            r.computed += n
            r.computed_tokens += n
            if r.computed < r.held:
                continue  # a chunk that is not the prompt's last: its logits are not used
            token = sampled_token(r.request.sampler, lg, len(r.out))  # seeded by (seed, output index)
            r.out.append(token)
            r.tokens.append(token)
            if r.first_step is None:
                r.first_step, r.first_s = s, self.clock_s
            if len(r.out) == r.request.max_new_tokens:  # leave at once: blocks back to the pool
                self.allocator.free(r.rid)
                self.running.remove(r)
                r.cache = None
                self._results[r.rid] = self._finish(r, "finished", s, self.clock_s)
                finished.append(r.rid)
        return finished

    # ---- helpers -----------------------------------------------------------------------------

    def _blocks_used(self) -> int:
        return self.num_blocks - self.allocator.num_free_blocks

    def _arrival_s(self, step: int) -> float:
        return self.steps[step - 1].clock_s if step > 0 else 0.0

    def _finish(self, r: _Live, status: str, step: int, clock: float,
                reason: str = "") -> RequestResult:
        arrival = r.request.arrival_step
        arrival_s = self._arrival_s(arrival)  # arrival <= the current step
        return RequestResult(r.rid, status, list(r.out), arrival, r.first_step,  # type: ignore[arg-type]
                             step if status == "finished" else None, arrival_s, r.first_s,
                             clock if status == "finished" else math.nan, r.preemptions,
                             r.cached_tokens, r.computed_tokens, reason)

    def _admit(self, r: _Live) -> bool:
        """Allocate blocks for all of ``r.tokens`` (rule 4); False if the pool is short.
        Nothing of them is computed yet: their keys are registered as chunks are scheduled."""
        try:
            self.allocator.allocate(r.rid, r.tokens, num_computed=0)
        except OutOfBlocks:  # nothing changed
            return False
        r.computed, r.held = self.allocator.num_cached_tokens(r.rid), len(r.tokens)
        r.cached_tokens += r.computed
        r.cache = PagedKVCache(self.pool, self.allocator, r.rid, r.computed)
        return True

    def _append(self, r: _Live) -> None:
        # No copy-on-write can happen: the engine never forks, and a prefix hit is a full
        # block, never a sequence's last one (one token is always left to compute).
        self.allocator.append(r.rid, r.tokens[-1])
        r.held += 1

    def _preempt(self, r: _Live) -> None:
        """Rule 3: free every block, forget the computed KV, go to the front of the queue."""
        self.allocator.free(r.rid)
        r.computed, r.held, r.cache = 0, 0, None
        r.preemptions += 1
        self.waiting.appendleft(r)

    def _schedule(self, batch: list[tuple[_Live, int]], r: _Live, n: int) -> None:
        """Put ``n`` tokens of ``r`` in the batch and register the blocks they complete: this
        forward writes them before any later sequence of the batch reads them (rule 4)."""
        batch.append((r, n))
        self.allocator.mark_computed(r.rid, r.computed + n)


def serve(requests: Sequence[Request], **engine_kwargs: Any) -> EngineResult:
    """Run ``requests`` through a fresh :class:`Engine` built with ``engine_kwargs``.

    >>> res = serve([Request(list(b"abc"), 2)], num_blocks=4, block_size=2)
    >>> res.batch_log(), res.requests[0].status
    ([[(0, 3, 0)], [(0, 1, 3)]], 'finished')
    """
    if isinstance(requests, (str, bytes)) or not hasattr(requests, "__iter__"):
        raise TypeError(f"requests must be a list of Request objects, got {requests!r:.80}")
    engine = Engine(**engine_kwargs)
    for r in requests:
        if not isinstance(r, Request):
            raise ValueError(f"requests must hold Request objects, got {r!r}")
        engine.add_request(r.prompt, r.max_new_tokens, r.sampler, r.arrival_step)
    return engine.run()
