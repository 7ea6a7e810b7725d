"""What a trace holds, and the one recorder that fills it (lecture §4.5 policy 3, §2.4, §3.5).

A :class:`Trace` is a run seen step by step: each :class:`StepRecord` is one step's batch, what
the scheduler did (admitted, preempted, finished), the queues after it and the KV pool after it
(blocks per request, those shared with another request, free, cached-but-free, the host tier);
each :class:`RequestRecord` is one request's times, SLO verdict and (engine runs) its text.

:class:`StepRecorder` is the only code that builds step records. The engine calls it at the end
of each step when ``Engine(recorder=...)`` is given, the Python simulator
(:func:`servelab.reference.continuous.run_continuous_batching`, the Rust core's twin) when its
``recorder=`` is given, and :func:`from_engine_result` replays a finished engine run through it
(the a8/a10 failure page, where no allocator is left to read). Off unless asked: the loops test
``recorder is not None`` once a step and do nothing else (``make bench`` shows the cost when on).

What is a prefill and what a decode is read from the batch alone, the rules' own way (rule 2,
rule 6): an entry is a *prefill* (or a *recompute* after a preemption) from its admission until
the entry that reaches the end of the request's tokens; every later entry is a *decode*.

>>> rec = StepRecorder(num_blocks=8, block_size=4, token_budget=16, max_num_seqs=2)
>>> rec.add_request(0, prompt_len=5, max_new_tokens=2, arrival_s=0.0)
>>> rec.record(0, 0.0, 0.01, [(0, 5, 0)], admitted=[0], running=[0], blocks_used=2)
>>> rec.record(1, 0.01, 0.01, [(0, 1, 5)], finished=[0], blocks_used=0)
>>> t = rec.trace(source="example")
>>> [s.kinds for s in t.steps], t.requests[0].first_token_s, t.requests[0].finish_s
([('prefill',), ('decode',)], 0.01, 0.02)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from servelab import _checks

__all__ = ["Trace", "StepRecord", "RequestRecord", "StepRecorder", "from_engine_result",
           "MAX_TRACE_STEPS"]

MAX_TRACE_STEPS = 20_000  # past this a page stops being light: the recorder refuses to go on

Entry = tuple[int, int, int]  # (request_id, new_tokens, context_len), as the batch log has them


@dataclass(frozen=True)
class StepRecord:
    """One step: its batch and kinds, the scheduler's moves, the queues and the KV pool after it.

    ``kv`` maps each request holding blocks to ``(blocks, shared)``: its block-table length and
    how many of those blocks another request holds too (prefix caching). ``None`` where the run
    gave no allocator to read (then only ``blocks_used`` is known)."""

    index: int
    start_s: float
    dur_s: float
    batch: tuple[Entry, ...]
    kinds: tuple[str, ...]  # per entry: "prefill", "recompute" or "decode"
    admitted: tuple[int, ...] = ()
    preempted: tuple[int, ...] = ()
    finished: tuple[int, ...] = ()
    waiting: tuple[int, ...] = ()  # ids in the waiting queue after the step, front first
    running: tuple[int, ...] = ()  # ids running after the step, oldest admitted first
    blocks_used: int = 0
    free_blocks: int = 0
    cached_free_blocks: int = 0  # free blocks that still hold a prefix the cache can hit
    host_blocks_used: int = 0
    shared_blocks: int = 0  # blocks in use by more than one request (prefix caching)
    kv: dict[int, tuple[int, int]] | None = None

    @property
    def prefill_tokens(self) -> int:
        return sum(n for (_, n, _), k in zip(self.batch, self.kinds) if k != "decode")

    @property
    def decode_tokens(self) -> int:
        return sum(n for (_, n, _), k in zip(self.batch, self.kinds) if k == "decode")


@dataclass
class RequestRecord:
    """One request: its sizes and times on the simulated clock (NaN: never happened)."""

    request_id: int
    prompt_len: int
    max_new_tokens: int
    arrival_s: float
    first_token_s: float = math.nan
    finish_s: float = math.nan
    generated: int = 0
    preemptions: int = 0
    status: str = "waiting"  # "finished", "unservable", or where it was when the run stopped
    text: str = ""  # the engine's generated text (empty for the simulator)
    prompt_text: str = ""

    @property
    def ttft_s(self) -> float:
        return self.first_token_s - self.arrival_s

    @property
    def tpot_s(self) -> float:
        if self.generated < 2:
            return math.nan
        return (self.finish_s - self.first_token_s) / (self.generated - 1)


@dataclass
class Trace:
    """A recorded run: its limits (``config``), every step, every request."""

    source: str
    config: dict[str, Any]
    steps: list[StepRecord] = field(default_factory=list)
    requests: list[RequestRecord] = field(default_factory=list)

    @property
    def num_preemptions(self) -> int:
        return sum(len(s.preempted) for s in self.steps)

    def slo_misses(self, ttft_s: float, tpot_s: float) -> list[int]:
        """Ids of the requests that missed TTFT <= ``ttft_s`` or TPOT <= ``tpot_s`` (§4.3); one
        never finished misses too (NaN compares false)."""
        return [r.request_id for r in self.requests if r.status != "unservable"
                and not (r.ttft_s <= ttft_s and (r.generated < 2 or r.tpot_s <= tpot_s))]


class StepRecorder:
    """Builds a :class:`Trace` one step at a time; see the module docstring.

    >>> StepRecorder(num_blocks=0, block_size=4, token_budget=8, max_num_seqs=1)
    Traceback (most recent call last):
    ...
    ValueError: num_blocks must be a positive integer, got 0
    """

    def __init__(self, *, num_blocks: int, block_size: int, token_budget: int, max_num_seqs: int,
                 host_blocks: int = 0, max_steps: int = MAX_TRACE_STEPS, **config: Any) -> None:
        self.config = {"num_blocks": _checks.positive_int("num_blocks", num_blocks),
                       "block_size": _checks.positive_int("block_size", block_size),
                       "token_budget": _checks.positive_int("token_budget", token_budget),
                       "max_num_seqs": _checks.positive_int("max_num_seqs", max_num_seqs),
                       "host_blocks": _checks.count("host_blocks", host_blocks), **config}
        self.max_steps = _checks.positive_int("max_steps", max_steps)
        self.steps: list[StepRecord] = []
        self.requests: dict[int, RequestRecord] = {}
        self._prefilling: set[int] = set()  # admitted, not yet at the end of its tokens

    def add_request(self, request_id: int, prompt_len: int, max_new_tokens: int,
                    arrival_s: float) -> None:
        self.requests[request_id] = RequestRecord(request_id, prompt_len, max_new_tokens,
                                                  float(arrival_s))

    def unservable(self, request_id: int) -> None:
        self.requests[request_id].status = "unservable"

    def record(self, index: int, start_s: float, dur_s: float, batch: Iterable[Sequence[int]], *,
               admitted: Iterable[int] = (), preempted: Iterable[int] = (),
               finished: Iterable[int] = (), waiting: Iterable[int] = (),
               running: Iterable[int] = (), allocator: Any = None,
               blocks_used: int | None = None,
               kv: dict[int, tuple[int, int]] | None = None,
               sampled: dict[int, int] | None = None) -> None:
        """One step, read at its end: ``batch`` as the batch log has it; ``allocator`` (a
        :class:`servelab.blocks.BlockAllocator` or its reference twin) for the KV pool, or
        ``blocks_used`` (and ``kv``, blocks per request, where known) alone; ``sampled``, the
        tokens an entry samples where it is not one (speculation keeps guesses: §8)."""
        if len(self.steps) >= self.max_steps:
            raise ValueError(f"a trace holds at most {self.max_steps:,} steps: trace fewer "
                             f"requests (--n) or a lower rate")
        entries = tuple((int(r), int(n), int(c)) for r, n, c in batch)
        admitted, preempted = tuple(admitted), tuple(preempted)
        end_s = start_s + dur_s
        for rid in preempted:
            self.requests[rid].preemptions += 1
            self._prefilling.discard(rid)
        kinds = []
        for rid, n, ctx in entries:
            req = self.requests[rid]
            if rid in admitted:
                self._prefilling.add(rid)
            if rid in self._prefilling:
                kinds.append("recompute" if req.preemptions else "prefill")
                if ctx + n >= req.prompt_len + req.generated:  # the end of its tokens (rule 6)
                    self._prefilling.discard(rid)
                    self._sampled(req, end_s, 1)
            else:
                kinds.append("decode")
                self._sampled(req, end_s, (sampled or {}).get(rid, 1))
        for rid in finished:
            self.requests[rid].finish_s = end_s
            self.requests[rid].status = "finished"
        free, cached_free, host, shared = 0, 0, 0, 0
        used = blocks_used or 0
        if allocator is not None:
            kv, cached_free, shared = _kv_of(allocator)
            free = int(allocator.num_free_blocks)
            used = self.config["num_blocks"] - free
            host = int(getattr(allocator, "num_host_cached_blocks", 0) or 0)
        else:
            free = self.config["num_blocks"] - used
        self.steps.append(StepRecord(int(index), float(start_s), float(dur_s), entries,
                                     tuple(kinds), admitted, preempted, tuple(finished),
                                     tuple(waiting), tuple(running), used, free, cached_free,
                                     host, shared, kv))

    def engine_step(self, engine: Any, step: Any) -> None:
        """The engine's hook (``Engine(recorder=...)``): its step, queues and KV pool, read at
        the end of the step; requests are registered once they have arrived (rule 1)."""
        if len(self.requests) < len(engine._live) - len(engine._arrivals):
            pending = {id(r) for r in engine._arrivals}
            for r in engine._live:
                if id(r) not in pending and r.request_id not in self.requests:
                    self.add_request(r.request_id, len(r.request.prompt),
                                     r.request.max_new_tokens, r.arrival_s)
                    done = engine._results.get(r.request_id)
                    if done is not None and done.status == "unservable":
                        self.unservable(r.request_id)
        self.record(step.index, step.clock_s - step.cost_s, step.cost_s, step.batch,
                    admitted=step.admitted, preempted=step.preempted, finished=step.finished,
                    waiting=[r.request_id for r in engine.waiting],
                    running=[r.request_id for r in engine.running], allocator=engine.allocator)

    @staticmethod
    def _sampled(req: RequestRecord, end_s: float, tokens: int) -> None:
        req.generated += tokens
        if req.first_token_s != req.first_token_s:
            req.first_token_s = end_s

    def trace(self, source: str, texts: dict[int, str] | None = None) -> Trace:
        """The run so far; ``texts`` adds each request's generated text (engine runs)."""
        reqs = [self.requests[k] for k in sorted(self.requests)]
        for r in reqs:
            if texts and r.request_id in texts:
                r.text = texts[r.request_id]
        return Trace(source, dict(self.config), list(self.steps), reqs)


def _kv_of(allocator: Any) -> tuple[dict[int, tuple[int, int]], int, int]:
    """Blocks per request and how many of them another request shares (ref count > 1), the
    free blocks still holding a cached prefix (prefix caching only: a free block's key), and
    the shared blocks counted once."""
    refs = allocator.ref_counts()
    kv = {}
    for rid in allocator.seq_ids():
        table = allocator.block_table(rid)
        kv[int(rid)] = (len(table), sum(1 for b in table if refs[b] > 1))
    cached_free = 0
    if getattr(allocator, "prefix_caching", False):
        cached_free = sum(1 for b in allocator.free_queue().tolist()
                          if allocator.key_of(int(b)) is not None)
    return kv, cached_free, int((refs > 1).sum())


def from_engine_result(result: Any, prompt_lens: Sequence[int], *, num_blocks: int,
                       block_size: int, token_budget: int, max_num_seqs: int,
                       source: str = "engine", **config: Any) -> Trace:
    """A finished :class:`~servelab.engine.EngineResult` replayed through the recorder: the
    steps' batches and moves, the blocks in use, the queues rebuilt by the rules' moves (rule 1:
    arrivals by step; rules 3-4). Without the allocator the blocks per request are read from
    the slots (a block table holds ``ceil(slots / block_size)`` blocks), and are left out
    (``kv`` None) with ``prefix_caching=True``, where which are shared is not known."""
    rec = StepRecorder(num_blocks=num_blocks, block_size=block_size, token_budget=token_budget,
                       max_num_seqs=max_num_seqs, **config)
    arrivals: dict[int, list[int]] = {}
    for r in result.requests:
        rec.add_request(r.request_id, int(prompt_lens[r.request_id]), len(r.tokens) or 1,
                        r.arrival_s)
        if r.status == "unservable":
            rec.unservable(r.request_id)
        else:
            arrivals.setdefault(r.arrival_step, []).append(r.request_id)
    waiting: list[int] = []
    running: list[int] = []
    slots: dict[int, int] = {}
    for s in result.steps:
        waiting += arrivals.get(s.index, [])
        for rid in s.preempted:
            _drop(running, rid)
            waiting.insert(0, rid)
        for rid in s.admitted:
            _drop(waiting, rid)
            running.append(rid)
        for rid in s.finished:
            _drop(running, rid)
        for rid, n, ctx in s.batch:
            slots[rid] = ctx + n
        kv = None if config.get("prefix_caching") else \
            {rid: (-(-slots[rid] // block_size), 0) for rid in running if rid in slots}
        rec.record(s.index, s.clock_s - s.cost_s, s.cost_s, s.batch, admitted=s.admitted,
                   preempted=s.preempted, finished=s.finished, waiting=waiting,
                   running=running, blocks_used=s.blocks_used, kv=kv)
    return rec.trace(source)


def _drop(ids: list[int], rid: int) -> None:
    if rid in ids:  # a student's run may move a request the rules would not: show, not fail
        ids.remove(rid)
