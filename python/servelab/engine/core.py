"""The engine loop: each :meth:`Engine.step` asks its scheduler for a :class:`Plan` and carries it
out: the forward on tiny_llm over the paged KV pool, sampling, the price on the paper GPU. The
rules are in :mod:`servelab.engine.scheduler`; "rule N" below points there.

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
from typing import Any, Callable, Protocol, Sequence

from servelab import _checks, hw_model
from servelab.blocks import BlockAllocator
from servelab.engine.records import EngineResult, EngineStep, Request, RequestResult
from servelab.engine.scheduler import (ContinuousBatchingScheduler, Plan, Scheduler,
                                       SchedulerConfig, SchedulerState, Seq, VerifyStep)
from servelab.tiny_llm import TINY, ModelConfig, TinyLLM, as_token_ids, generate, model_for
from servelab.tiny_llm.paged import PagedKVCache, PagedKVPool
from servelab.tiny_llm.sampling import GREEDY, Sampler, sampled_token

__all__ = ["Engine", "serve", "StepHook", "STEP_HOOKS"]

MAX_ARRIVAL_STEP = 1_000_000  # idle steps are recorded one by one; keep the log finite


class StepHook(Protocol):
    """Work a feature adds to each step between the plan and the forward (the host tier's KV
    copies, lecture §8 milestone 4b); returns the paper seconds it adds to the step."""

    def before_forward(self, engine: Engine) -> float: ...


# Features that need a step hook: each factory gets the engine once it is built and returns its
# hook, or None where the engine does not use the feature (servelab.engine registers the host
# tier's, servelab.engine.offload). The loop below names none of them.
STEP_HOOKS: list[Callable[[Engine], StepHook | None]] = []


@dataclass
class _Live(Seq):
    """A request inside the engine: the scheduler's view plus what only the engine needs."""

    request: Request = None  # type: ignore[assignment]  # set by add_request
    out: list[int] = field(default_factory=list)
    cache: PagedKVCache | None = None
    due: float = 0.0  # its arrival_s, or its arrival_step (rule 1)
    arrival_step: int = 0  # the step it arrived at, and the clock then (or its arrival_s)
    arrival_s: float = 0.0
    first_step: int | None = None
    first_s: float = math.nan
    preemptions: int = 0
    cached_tokens: int = 0
    computed_tokens: int = 0

    __eq__ = object.__eq__  # one request is one object (lists search by identity)
    __hash__ = object.__hash__


class Engine:
    """A continuous-batching engine on tiny_llm with a paged KV cache (see :mod:`servelab.engine`).

    ``config``/``model``: the tiny model that computes the tokens. ``num_blocks`` blocks of
    ``block_size`` tokens form the KV pool; ``max_num_seqs``, ``max_num_batched_tokens``,
    ``chunked_prefill`` and ``prefix_caching`` go to the scheduler (:class:`SchedulerConfig`).
    ``scheduler``: any object with ``schedule(state) -> Plan`` (default: a fresh
    :class:`ContinuousBatchingScheduler`). ``cost_model`` on ``gpu`` prices each step
    (``hw_model.step_cost``) for the simulated clock. ``host_blocks``/``host_policy`` give the
    prefix cache a host tier (§8 milestone 4b, :mod:`servelab.engine.offload`): evicted blocks'
    KV is kept host-side and copied back on a hit, each copy priced with
    ``hw_model.kv_host_transfer_s`` on top of its step; the tokens stay the same.
    ``recorder``: a :class:`servelab.trace.StepRecorder` given each step's batch, queues and KV
    pool (``servelab trace --engine``); None (the default) records nothing.

    >>> Engine(num_blocks=0)
    Traceback (most recent call last):
    ...
    ValueError: num_blocks must be a positive integer, got 0
    """

    def __init__(self, config: ModelConfig = TINY, *, num_blocks: int = 64, block_size: int = 16,
                 max_num_seqs: int = 8, max_num_batched_tokens: int = 256,
                 chunked_prefill: bool = False, prefix_caching: bool = False,
                 cost_model: hw_model.ModelSpec = hw_model.LLAMA3_8B,
                 gpu: hw_model.GpuSpec = hw_model.H100, model: TinyLLM | None = None,
                 scheduler: Scheduler | None = None, host_blocks: int = 0,
                 host_policy: str = "lru", recorder: Any = None) -> None:
        _checks.instance("config", config, ModelConfig, "a ModelConfig")
        self.limits = SchedulerConfig(block_size, num_blocks, max_num_seqs, max_num_batched_tokens,
                                      chunked_prefill, prefix_caching)
        _checks.instance("cost_model", cost_model, hw_model.ModelSpec, "a hw_model.ModelSpec")
        _checks.instance("gpu", gpu, hw_model.GpuSpec, "a hw_model.GpuSpec")
        self.scheduler = ContinuousBatchingScheduler() if scheduler is None else scheduler
        if not callable(getattr(self.scheduler, "schedule", None)):
            raise TypeError(f"scheduler must have a schedule(state) method, got {scheduler!r}")
        self.model = model_for(config) if model is None else model
        _checks.instance("model", self.model, TinyLLM, "a TinyLLM")
        self.model.config.check_same(config, "model")
        self.config, self.cost_model, self.gpu = config, cost_model, gpu
        # the pool first: it refuses a size past tiny_llm's memory limit before anything is built
        self.pool = PagedKVPool(config, self.limits.num_blocks, self.limits.block_size)
        self.allocator = BlockAllocator(self.limits.num_blocks, self.limits.block_size,
                                        self.limits.prefix_caching, host_blocks, host_policy)
        self.hooks: list[StepHook] = [h for h in (make(self) for make in STEP_HOOKS) if h is not None]
        self._live: list[_Live] = []
        self._results: dict[int, RequestResult] = {}
        self._arrivals: deque[_Live] = deque()  # sorted by arrival at run()
        self._timed = False  # arrivals by arrival_s instead of arrival_step
        self.waiting: deque[_Live] = deque()
        self.running: list[_Live] = []
        self.steps: list[EngineStep] = []
        self.clock_s = 0.0
        self._started = False
        self.recorder = recorder

    # ---- input -------------------------------------------------------------------------------

    def add_request(self, prompt: Sequence[int], max_new_tokens: int, sampler: Sampler = GREEDY,
                    arrival_step: int = 0, arrival_s: float | None = None) -> int:
        """Queue a request; returns its id (0, 1, 2, ... in the order added). ``arrival_s``
        (seconds on the simulated clock, for every request or for none) replaces
        ``arrival_step`` (rule 1).

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
        m = _checks.integer("max_new_tokens", max_new_tokens, 1, None)
        step = _checks.integer("arrival_step", arrival_step, 0, MAX_ARRIVAL_STEP)
        if arrival_s is not None:
            arrival_s = _checks.real("arrival_s", arrival_s, 0.0)
            if step:
                raise ValueError(f"arrival_s replaces arrival_step: give one, got arrival_step "
                                 f"{step} and arrival_s {arrival_s}")
        if self._live and (arrival_s is not None) != self._timed:
            raise ValueError(f"arrival_s must be given for every request or for none, got "
                             f"{arrival_s!r} for request {len(self._live)}")
        self._timed = arrival_s is not None
        if not callable(sampler):
            raise ValueError(f"sampler must be callable as sampler(logits, step), got {sampler!r}")
        need = len(tokens) + m - 1  # the last token is never fed back (§2.1)
        if need > self.config.max_len:
            raise ValueError(f"a prompt of {len(tokens)} tokens and max_new_tokens {m} need "
                             f"{need} positions, more than max_len {self.config.max_len}")
        rid = len(self._live)
        req = Request(tuple(tokens), m, sampler, step, arrival_s)
        self._live.append(_Live(rid, list(tokens), request=req,
                                due=step if arrival_s is None else arrival_s))
        return rid

    def unservable_reason(self, prompt_len: int, max_new_tokens: int) -> str:
        """Why a request can never run here (rule 1), or ``""``."""
        return self.limits.unservable_reason(prompt_len, max_new_tokens)

    # ---- the loop ----------------------------------------------------------------------------

    def run(self) -> EngineResult:
        """Step until every request has finished or been found unservable."""
        while self.step() is not None:
            pass
        return self.result()

    def result(self) -> EngineResult:
        return EngineResult([self._results[r.request_id] for r in self._live
                             if r.request_id in self._results],
                            list(self.steps), self.allocator.stats())

    def step(self) -> EngineStep | None:
        """One engine step (rules 1-6); None once all work is done."""
        if not self._started:
            self._started = True
            self._arrivals = deque(sorted(self._live, key=lambda r: (r.due, r.request_id)))
        if not (self._arrivals or self.waiting or self.running):
            return None
        s = len(self.steps)
        self._arrive(s)
        while self._timed and self._arrivals and not (self.waiting or self.running):
            self._arrive(s)  # only unservable ones arrived: the clock jumps again
        if self._timed and not (self.waiting or self.running):
            return None
        if not (self.waiting or self.running):  # idle until the next arrival step
            step = EngineStep(s, (), (), (), (), 0.0, self.clock_s, self._blocks_used())
        else:
            state = SchedulerState(s, list(self.waiting), list(self.running),
                                   self.allocator.num_free_blocks, self.limits, self.allocator)
            plan = self.scheduler.schedule(state)
            verify = plan.verify_step()
            # the hooks first (the host tier's copies): nothing has written the pool since schedule()
            extra_s = [hook.before_forward(self) for hook in self.hooks]
            batch = self._carry_out(plan, verify, s)
            cost = hw_model.step_cost(self.cost_model, self.gpu,
                                      [(n, c) for _, n, c in plan.batch]).time_s
            if verify is not None:
                cost += verify.cost_s(self.gpu)
            for x in extra_s:
                if x:  # added only when nonzero, so a step without one costs what it did (bit for bit)
                    cost += x
            self.clock_s += cost
            finished, accepted = self._forward_and_sample(batch, verify, s)
            proposed = () if verify is None else tuple(len(g) for _, _, g, _ in batch)
            step = EngineStep(s, tuple(plan.batch), tuple(plan.preempted), tuple(plan.admitted),
                              tuple(finished), cost, self.clock_s, self._blocks_used(),
                              proposed, () if verify is None else tuple(accepted))
        self.steps.append(step)
        if self.recorder is not None:
            self.recorder.engine_step(self, step)
        return step

    def _arrive(self, s: int) -> None:
        """Rule 1: this step's arrivals join the back of the queue, or are unservable."""
        if self._timed and not (self.waiting or self.running) and self._arrivals:
            self.clock_s = max(self.clock_s, self._arrivals[0].due)
        while self._arrivals and (self._arrivals[0].due <= self.clock_s if self._timed
                                  else self._arrivals[0].due == s):
            r = self._arrivals.popleft()
            req = r.request
            r.arrival_step = s
            r.arrival_s = r.due if self._timed else self.clock_s
            reason = self.unservable_reason(len(req.prompt), req.max_new_tokens)
            if reason:
                self._results[r.request_id] = self._finish(r, "unservable", s, reason)
            else:
                self.waiting.append(r)

    def _carry_out(self, plan: Plan, verify: VerifyStep | None,
                   s: int) -> list[tuple[_Live, int, tuple[int, ...], int]]:
        """Move requests as ``plan`` says (rules 3-4), copy its blocks; returns the batch:
        (request, new tokens, the proposed ones among them, the entry's index)."""
        by_id = {r.request_id: r for r in (*self.running, *self.waiting)}
        for rid in plan.preempted:  # rule 3: forget the computed KV, front of the queue
            r = by_id[rid]
            self.running.remove(r)
            r.num_computed, r.num_slots, r.cache = 0, 0, None
            r.preemptions += 1
            self.waiting.appendleft(r)
        for src, dst in plan.copies:
            self.pool.copy_block(src, dst)
        for rid in plan.admitted:  # rule 4
            r = by_id[rid]
            self.waiting.remove(r)
            self.running.append(r)
        admitted = set(plan.admitted)
        batch = []
        for i, (rid, n, start) in enumerate(plan.batch):
            proposed = verify.proposals(i) if verify is not None else ()  # slots only once kept
            live = by_id.get(rid)
            slots = self.allocator.num_tokens(rid) if rid in self.allocator else 0
            if live is not None and rid in admitted and slots:
                live.num_computed = start
                live.cached_tokens += start
                live.cache = PagedKVCache(self.pool, self.allocator, rid, start)
            if live is None or live.cache is None or start != live.num_computed \
                    or not 0 < n - len(proposed) <= slots - start:
                raise RuntimeError(f"step {s}: the scheduler's entry {(rid, n, start)} does not "
                                   f"match request {rid} (running: {live in self.running}, "
                                   f"{getattr(live, 'num_computed', 0)} computed, {slots} slots)")
            live.num_slots = slots
            batch.append((live, n, proposed, i))
        if not batch:
            raise RuntimeError(f"step {s}: work is left but the scheduler planned nothing")
        return batch

    def _forward_and_sample(self, batch: list[tuple[_Live, int, tuple[int, ...], int]],
                            verify: VerifyStep | None, s: int) -> tuple[list[int], list[int]]:
        """Rules 5 and 6: one forward over the batch, then sampling (or, for an entry with
        proposed tokens, judging them: the plan's ``verify`` step, e.g.
        :mod:`servelab.engine.speculative`'s); returns the finished ids and each entry's kept
        proposals."""
        spec = any(g for _, _, g, _ in batch)
        caches = [verify.cache(i, r.cache) if g and verify is not None else r.cache for r, _, g, i in batch]
        logits = self.model.forward_batch(
            [r.tokens[r.num_computed:r.num_computed + n - len(g)] + list(g) for r, n, g, _ in batch],
            caches, all_logits=spec)
        finished: list[int] = []
        accepted: list[int] = []
        for (r, n, g, i), cache, lg in zip(batch, caches, logits):
            new = verify.judge(i, r.request, len(r.out), lg, cache) if g and verify is not None else []
            accepted.append(max(len(new) - 1, 0))
            r.num_computed += n - len(g) + accepted[-1]
            r.num_slots += accepted[-1]
            r.computed_tokens += n
            if r.num_computed < len(r.tokens):
                continue  # a chunk that is not the prompt's last: its logits are not used
            # seeded by (seed, output index)
            new = new or [sampled_token(r.request.sampler, lg[-1] if spec else lg, len(r.out))]
            r.out += new
            r.tokens += new
            if r.first_step is None:
                r.first_step, r.first_s = s, self.clock_s
            if len(r.out) == r.request.max_new_tokens:  # leave at once: blocks back to the pool
                self.allocator.free(r.request_id)
                self.running.remove(r)
                r.cache = None
                self._results[r.request_id] = self._finish(r, "finished", s)
                finished.append(r.request_id)
        return finished, accepted

    # ---- helpers -----------------------------------------------------------------------------

    def _blocks_used(self) -> int:
        return self.limits.num_blocks - self.allocator.num_free_blocks

    def _finish(self, r: _Live, status: str, step: int, reason: str = "") -> RequestResult:
        done = status == "finished"
        return RequestResult(r.request_id, status, list(r.out), r.arrival_step,  # type: ignore[arg-type]
                             r.first_step, step if done else None, r.arrival_s, r.first_s,
                             self.clock_s if done else math.nan, r.preemptions,
                             r.cached_tokens, r.computed_tokens, reason)


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
        engine.add_request(r.prompt, r.max_new_tokens, r.sampler, r.arrival_step, r.arrival_s)
    return engine.run()
