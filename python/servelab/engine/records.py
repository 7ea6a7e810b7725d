"""What goes into the engine (:class:`Request`) and what comes out (:class:`RequestResult`,
:class:`EngineStep`, :class:`EngineResult`). Plain frozen dataclasses, no behaviour.

>>> r = Request(list(b"hi"), max_new_tokens=3)
>>> r.prompt, r.arrival_step
((104, 105), 0)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Sequence

from servelab.tiny_llm.sampling import GREEDY, Sampler

__all__ = ["Request", "RequestResult", "EngineStep", "EngineResult", "BatchEntry"]

BatchEntry = tuple[int, int, int]  # (request_id, new_tokens, context_len)


@dataclass(frozen=True)
class Request:
    """A prompt (token ids), how many tokens to generate, a sampler, and when the request
    arrives: an engine step, or ``arrival_s`` on the simulated clock (rule 1). Checked by
    :meth:`Engine.add_request`."""

    prompt: Sequence[int]
    max_new_tokens: int
    sampler: Sampler = GREEDY
    arrival_step: int = 0
    arrival_s: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.prompt, (str, bytes)):
            try:
                object.__setattr__(self, "prompt", tuple(self.prompt))
            except TypeError:
                pass  # left as is: add_request names the bad value


@dataclass(frozen=True)
class RequestResult:
    """One request as the engine served it.

    ``status`` is ``"finished"`` or ``"unservable"`` (it can never fit the pool or the token
    budget: ``reason`` says why, and it gets no tokens). Times are on the simulated clock
    (seconds since step 0); ``ttft_s = first_token_s - arrival_s`` and
    ``tpot_s = (finish_s - first_token_s) / (len(tokens) - 1)`` (NaN for one token or an
    unservable request), as :mod:`servelab.metrics` defines them (§4).
    """

    request_id: int
    status: Literal["finished", "unservable"]
    tokens: list[int]
    arrival_step: int
    first_token_step: int | None
    finish_step: int | None
    arrival_s: float
    first_token_s: float
    finish_s: float
    num_preemptions: int
    num_cached_tokens: int  # prompt tokens skipped thanks to prefix-cache hits (all admissions)
    num_computed_tokens: int  # tokens this request ran through the model, over all steps
    reason: str = ""

    @property
    def ttft_s(self) -> float:
        return self.first_token_s - self.arrival_s

    @property
    def tpot_s(self) -> float:
        if len(self.tokens) < 2:
            return float("nan")
        return (self.finish_s - self.first_token_s) / (len(self.tokens) - 1)


@dataclass(frozen=True)
class EngineStep:
    """One engine step: the batch it ran and what the scheduler did to get there."""

    index: int
    batch: tuple[BatchEntry, ...]  # in batch order: running requests first, then admitted ones
    preempted: tuple[int, ...]  # request ids sent back to the waiting queue, in order
    admitted: tuple[int, ...]
    finished: tuple[int, ...]
    cost_s: float  # hw_model.step_cost of the batch (0 for an empty step)
    clock_s: float  # simulated clock at the end of the step
    blocks_used: int = 0  # KV blocks held by requests at the end of the step
    # a plan with a verify step (speculative decoding): per batch entry, how many proposed
    # tokens it ended in and how many were kept (both () in a step without a verify step)
    proposed: tuple[int, ...] = ()
    accepted: tuple[int, ...] = ()

    @property
    def num_tokens(self) -> int:
        return sum(n for _, n, _ in self.batch)


@dataclass(frozen=True)
class EngineResult:
    """Every request's result (indexed by request id) and every step."""

    requests: list[RequestResult]
    steps: list[EngineStep]
    stats: dict[str, int] = field(default_factory=dict)  # the allocator's counters at the end

    def batch_log(self) -> list[list[BatchEntry]]:
        """The plain per-step batches: ``[[(request_id, new_tokens, context_len), ...], ...]``,
        one list per step index (an idle step is ``[]``)."""
        return [list(s.batch) for s in self.steps]

    def tokens(self) -> list[list[int]]:
        return [r.tokens for r in self.requests]

    @property
    def clock_s(self) -> float:
        return self.steps[-1].clock_s if self.steps else 0.0
