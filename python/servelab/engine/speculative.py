"""Speculative decoding in the engine (§8, the course project's milestone 4a).

:class:`SpeculativeScheduler` wraps a scheduler (default: the continuous-batching one). After
the wrapped scheduler has planned the step, each *decoding* entry of a running request gets up
to ``k`` guesses from a small draft model, run batched over the requests one guess at a time.
The engine then runs the target once over ``1 + guesses`` tokens per such entry (its last
sampled token and the guesses: the "verify" forward, about the price of one decode step while
it stays memory-bound, §3.3) and keeps the guesses up to the first the target disagrees with,
plus the target's own token there (:func:`verify`). So one step emits 1 to ``k + 1`` tokens.

- **Same tokens (§6.5).** Greedy requests keep a guess only when it is the target's argmax
  (:func:`~servelab.tiny_llm.speculative.accept_greedy`): the tokens are exactly the target's
  alone, whatever the draft. Requests with a ``Temperature`` sampler use rejection sampling
  (:func:`~servelab.tiny_llm.speculative.accept_sampled`): each token follows the target's
  distribution; the draws are seeded by ``(sampler seed, output index, purpose)``, and the
  draw after the last kept guess is the sampler's own, so a step with no guess is the plain
  engine's. Other samplers (top-p) get no guesses.
- **KV slots.** A guess gets a KV slot only once the target keeps it: during the verify
  forward its K/V are held beside the paged cache (:class:`VerifyCache`), then kept ones are
  appended to the allocator and written to the pool, rejected ones dropped. No slot is ever
  rolled back and no prefix-cache key ever names an unverified token.
- **Never at anyone's expense.** Guesses take only the token budget and the free blocks left
  once the wrapped scheduler has planned: the scheduler reserves the blocks that every guess
  being kept would need, so speculation never preempts or delays a request.
- **Price.** The step's target forward is priced as usual (an entry of ``1 + g`` tokens); the
  draft's steps are priced on ``draft_spec`` (:func:`draft_cost_s`): for one request this is
  :func:`~servelab.tiny_llm.speculative.speculative_step_cost`.

>>> from servelab.engine import Engine
>>> from servelab.tiny_llm import TINY, TinyLLM, generate
>>> target = TinyLLM(TINY)
>>> e = Engine(model=target, num_blocks=16, block_size=4,
...            scheduler=SpeculativeScheduler(target, k=3))   # a perfect draft
>>> e.add_request(list(b"hello"), 10)
0
>>> res = e.run()
>>> res.batch_log()     # a prefill, then 1 + 3 tokens per step, fewer at the end
[[(0, 5, 0)], [(0, 4, 5)], [(0, 4, 9)], [(0, 1, 13)]]
>>> [s.accepted for s in res.steps]
[(), (3,), (3,), ()]
>>> res.requests[0].tokens == generate(list(b"hello"), 10, model=target).tokens
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from servelab import _checks, hw_model
from servelab.engine.scheduler import ContinuousBatchingScheduler, Plan, SchedulerState
from servelab.tiny_llm.model import TinyLLM
from servelab.tiny_llm.sampling import Greedy, Temperature, softmax
from servelab.tiny_llm.speculative import accept_greedy, accept_sampled, draw_token

__all__ = ["SpeculativeScheduler", "SpeculativePlan", "VerifyCache", "verify", "draft_cost_s", "LLAMA32_1B"]

LLAMA32_1B = hw_model.LLAMA32_1B  # the default draft's price: a preset of hw_model

# purposes of a seeded uniform (the sampler's own draw is the generator of (seed, index))
_DRAFT, _ACCEPT, _RESIDUAL = 1, 2, 3


def _uniform(seed: int, index: int, purpose: int) -> float:
    return float(np.random.default_rng((seed, index, purpose)).random())


def _blocks(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


@dataclass(frozen=True)
class SpeculativePlan(Plan):
    """A plan whose decoding entries end in the draft's guesses: ``draft[i]``, entry ``i``'s
    last ``len(draft[i])`` new tokens (they get no slot until the target keeps them);
    ``draft_probs[i]``, the draft's probabilities of them (a ``(guesses, vocab)`` array when
    sampling, else None); ``draft_spec``, the ``hw_model.ModelSpec`` that prices the draft's
    steps. It is its own :class:`~servelab.engine.scheduler.VerifyStep`: the engine runs the
    target over every entry and :func:`verify` judges the guesses."""

    draft: tuple[tuple[int, ...], ...] = ()
    draft_probs: tuple[Any, ...] = ()
    draft_spec: Any = None

    def verify_step(self) -> SpeculativePlan:
        return self

    def proposals(self, i: int) -> tuple[int, ...]:
        return tuple(self.draft[i]) if self.draft else ()

    def cache(self, i: int, cache: Any) -> VerifyCache:
        return VerifyCache(cache, len(self.draft[i]))

    def judge(self, i: int, request: Any, out_index: int, logits: Any, cache: Any) -> list[int]:
        return verify(request, out_index, self.draft[i], logits, self.draft_probs[i], cache)

    def cost_s(self, gpu: hw_model.GpuSpec) -> float:
        return draft_cost_s(self, gpu)


class SpeculativeScheduler:
    """Plans like ``inner`` (default: :class:`ContinuousBatchingScheduler`), then gives each
    decoding entry up to ``k`` guesses of ``draft`` (see the module docstring). ``draft_spec``
    prices the draft's steps on the paper GPU. Keeps one draft KV cache per running request.

    >>> SpeculativeScheduler(TinyLLM(), k=-1)
    Traceback (most recent call last):
    ...
    ValueError: k (draft tokens per step) must be a non-negative integer, got -1
    """

    def __init__(self, draft: TinyLLM, k: int, *, draft_spec: hw_model.ModelSpec = LLAMA32_1B,
                 inner: Any = None) -> None:
        _checks.instance("draft", draft, TinyLLM, "a TinyLLM")
        self.k = _checks.count("k (draft tokens per step)", k)
        _checks.instance("draft_spec", draft_spec, hw_model.ModelSpec, "a hw_model.ModelSpec")
        self.inner = ContinuousBatchingScheduler() if inner is None else inner
        if not callable(getattr(self.inner, "schedule", None)):
            raise TypeError(f"inner must have a schedule(state) method, got {inner!r}")
        self.draft, self.draft_spec = draft, draft_spec
        self._caches: dict[int, tuple[Any, list[int]]] = {}  # request id -> (cache, tokens fed)

    def schedule(self, state: SchedulerState) -> Plan:
        _checks.instance("state", state, SchedulerState, "a SchedulerState")
        blocks = state.blocks
        if getattr(blocks, "host_blocks", 0):
            # a kept guess's append can evict a cached block and write into it at once, before
            # the host tier's copy-out runs (servelab.engine.offload)
            raise ValueError("host_blocks > 0 does not work with a SpeculativeScheduler yet")
        # decoding: every slot it holds is computed (rule 2's test, read before the plan); a
        # prompt's last chunk of one token looks the same after planning but samples its first
        # token, so it gets no guesses
        decoding = {seq.request_id for seq in state.running if 0 < seq.num_slots == seq.num_computed}
        plan = self.inner.schedule(state)
        running = {seq.request_id: seq for seq in state.running}
        for rid in [r for r in self._caches if r not in running or r in plan.preempted]:
            del self._caches[rid]  # finished or preempted: its draft cache goes too
        if self.k == 0 or blocks is None:
            return plan
        budget = state.config.max_num_batched_tokens - sum(n for _, n, _ in plan.batch)
        free, bs = blocks.num_free_blocks, state.config.block_size
        wants: list[tuple[int, Any, int]] = []  # (batch index, seq, guesses)
        for i, (rid, n, start) in enumerate(plan.batch):
            seq = running.get(rid)
            req = getattr(seq, "request", None)
            if seq is None or req is None or rid not in decoding or n != 1 \
                    or start + 1 != len(seq.tokens) or _kind(req.sampler) is None:
                continue  # only a decoding request whose sampler we can speculate for
            # never guess past the request's end or the draft's context
            g = min(self.k, budget, len(req.prompt) + req.max_new_tokens - len(seq.tokens) - 1,
                    self.draft.config.max_len - len(seq.tokens))
            held = blocks.num_tokens(rid)
            while g > 0 and _blocks(held + g, bs) - _blocks(held, bs) > free:
                g -= 1  # the blocks every guess being kept would need, reserved now
            if g > 0:
                free -= _blocks(held + g, bs) - _blocks(held, bs)
                budget -= g
                wants.append((i, seq, g))
        if not wants:
            return plan
        guesses, probs = self._propose(wants)
        draft: list[tuple[int, ...]] = [()] * len(plan.batch)
        draft_probs: list[Any] = [None] * len(plan.batch)
        batch = list(plan.batch)
        for (i, _, _), gs, qs in zip(wants, guesses, probs):
            rid, n, start = batch[i]
            batch[i] = (rid, n + len(gs), start)
            draft[i] = tuple(gs)
            draft_probs[i] = None if qs is None else np.stack(qs)
        return SpeculativePlan(tuple(batch), plan.preempted, plan.admitted, plan.copies, tuple(draft),
                               tuple(draft_probs), self.draft_spec)

    def _propose(self, wants: list[tuple[int, Any, int]]) -> tuple[list[list[int]], list[Any]]:
        """The draft's guesses, one batched draft forward per guess index."""
        guesses: list[list[int]] = [[] for _ in wants]
        probs: list[Any] = [None if _kind(seq.request.sampler) == "greedy" else []
                            for _, seq, _ in wants]
        for j in range(max(g for _, _, g in wants)):
            active = [w for w, (_, _, g) in enumerate(wants) if g > j]
            inputs, caches = [], []
            for w in active:
                seq = wants[w][1]
                known = list(seq.tokens) + guesses[w]
                cache, fed = self._sync(seq.request_id, known)
                inputs.append(known[len(fed):])
                caches.append(cache)
                fed[:] = known  # fed once the forward below has run
            rows = self.draft.forward_batch(inputs, caches)
            for w, logits in zip(active, rows):
                seq = wants[w][1]
                sampler = seq.request.sampler
                index = len(seq.tokens) - len(seq.request.prompt) + j  # its output index
                if probs[w] is None:
                    guesses[w].append(int(np.argmax(logits)))
                else:
                    q = softmax(logits, sampler.temperature)
                    guesses[w].append(draw_token(q, _uniform(sampler.seed, index, _DRAFT)))
                    probs[w].append(q)
        return guesses, probs

    def _sync(self, rid: int, known: list[int]) -> tuple[Any, list[int]]:
        """Request ``rid``'s draft cache, cut back to the longest prefix of ``known`` it holds
        (rejected guesses go), leaving at least one token to feed."""
        if rid not in self._caches:
            self._caches[rid] = (self.draft.new_cache(), [])
        cache, fed = self._caches[rid]
        same = 0
        for a, b in zip(fed, known[:-1]):
            if a != b:
                break
            same += 1
        if same < len(fed):
            cache.truncate(same)
            del fed[same:]
        return cache, fed


def _kind(sampler: Any) -> str | None:
    """What speculation a sampler allows: "greedy", "temperature", or None (no guesses)."""
    if isinstance(sampler, Greedy):
        return "greedy"
    if isinstance(sampler, Temperature):
        return "temperature"
    return None


class VerifyCache:
    """A request's :class:`~servelab.tiny_llm.paged.PagedKVCache` during a verify forward of
    ``1 + n_guesses`` tokens: the first token (its last sampled one) has a slot and is written
    to the pool; the guesses' K/V are held here (as the pool would store them) until
    :meth:`keep` gives the kept ones slots."""

    def __init__(self, base: Any, n_guesses: int) -> None:
        self.base, self.n_guesses = base, n_guesses
        self.config, self.max_len = base.config, base.max_len
        self._held: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def __len__(self) -> int:
        return len(self.base)

    def reserve(self, n_new: int) -> None:
        if n_new != 1 + self.n_guesses:
            raise ValueError(f"a verify forward runs 1 + {self.n_guesses} tokens, got n_new={n_new!r}")
        if len(self.base) + n_new > self.max_len:
            raise ValueError(f"cache overflow: {len(self.base)} cached + {n_new} new tokens > "
                             f"max_len {self.max_len}")
        self.base.reserve(1)

    def update(self, layer: int, k_new: np.ndarray,
               v_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k, v = self.base.update(layer, k_new[:, :1], v_new[:, :1])
        # rounded as the pool stores them, so a kept guess reads what a plain decode would
        k_g, v_g = k_new[:, 1:].astype(k.dtype), v_new[:, 1:].astype(v.dtype)
        self._held[layer] = (k_g, v_g)
        return np.concatenate([k, k_g], axis=1), np.concatenate([v, v_g], axis=1)

    def commit(self, n_new: int) -> None:
        self.base.commit(1)

    def rollback(self) -> None:
        self.base.rollback()
        self._held = {}

    def keep(self, tokens: Sequence[int]) -> None:
        """The first ``len(tokens)`` guesses were kept: append their slots (the scheduler
        reserved the blocks) and write their K/V; the rest are dropped, never having had one."""
        if not tokens:
            return
        base, n = self.base, len(tokens)
        for t in tokens:
            copy = base.allocator.append(base.seq_id, t)
            if copy is not None:
                base.pool.copy_block(*copy)
        base.reserve(n)
        for layer in sorted(self._held):
            k, v = self._held[layer]
            base.update(layer, k[:, :n], v[:, :n])
        base.commit(n)
        self._held = {}


def verify(request: Any, out_index: int, guesses: Sequence[int], rows: np.ndarray,
           draft_probs: np.ndarray | None, cache: Any) -> list[int]:
    """Judge one entry's guesses against the target's ``rows`` of logits (``1 + len(guesses)``
    rows; ``out_index`` is the output index of the first guess), keep the accepted ones in
    ``cache``, and return the tokens the step emits: the kept guesses, then the target's token.

    >>> from servelab.engine import Request
    >>> cache = VerifyCache.__new__(VerifyCache); cache.keep = lambda kept: None  # no KV here
    >>> verify(Request([1], 5), 1, [3, 1], np.eye(4)[[3, 2, 0]], None, cache)
    [3, 2]
    """
    sampler = request.sampler
    if _kind(sampler) == "greedy":
        kept, nxt = accept_greedy(guesses, rows)
    else:
        if draft_probs is None:
            raise ValueError(f"draft_probs must hold the draft's probabilities of the guesses when "
                             f"sampling with {sampler!r}, got None")
        seed, t = sampler.seed, sampler.temperature
        at = range(out_index, out_index + len(guesses))
        p = np.stack([softmax(r, t) for r in rows])
        u_accept = np.array([_uniform(seed, i, _ACCEPT) for i in at])
        # the residual draws, then the sampler's own draw after the last guess
        u_draw = np.array([_uniform(seed, i, _RESIDUAL) for i in at]
                          + [float(np.random.default_rng((seed, at.stop)).random())])
        kept, nxt = accept_sampled(guesses, p, draft_probs, u_accept, u_draw)
    cache.keep(list(guesses[:kept]))
    return list(guesses[:kept]) + [int(nxt)]


def draft_cost_s(plan: SpeculativePlan, gpu: hw_model.GpuSpec) -> float:
    """Paper-GPU seconds of the draft's steps in ``plan`` on ``plan.draft_spec``: guess ``j``
    is one batched decode step over the entries with more than ``j`` guesses, each at context
    ``context_len + j`` (0 without speculation).

    >>> from servelab.hw_model import H100
    >>> draft_cost_s(SpeculativePlan(((0, 1, 8),)), H100)
    0.0
    """
    if plan.draft_spec is None or not any(plan.draft):
        return 0.0
    per_entry = [(len(g), c) for g, (_, _, c) in zip(plan.draft, plan.batch) if g]
    return float(sum(hw_model.step_cost(plan.draft_spec, gpu,
                                        [(1, c + j) for g, c in per_entry if g > j]).time_s
                     for j in range(max(g for g, _ in per_entry))))
