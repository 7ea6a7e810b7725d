"""Autoregressive generation, with or without the KV cache (§2.1-§2.2).

With the cache, the first forward (prefill) runs the whole prompt and yields the first output
token; every later forward (decode) runs only the token just generated. ``max_new_tokens``
tokens take ``1`` prefill and ``max_new_tokens - 1`` decodes: the last token is never fed back.
Without the cache, every step runs the whole sequence so far through the model again, from
position 0, and keeps nothing: step ``k`` processes ``len(prompt) + k - 1`` tokens.

Either way each forward computes the logits of the last position only (the only ones
generation uses; ``hw_model`` counts the LM head the same way), so the two paths differ only in
how many tokens go through the layers, which is what the counters show.

>>> g = generate(list(b"hello world"), 8)
>>> [s.kind for s in g.steps]
['prefill', 'decode', 'decode', 'decode', 'decode', 'decode', 'decode', 'decode']
>>> g.tokens_processed, len(g.tokens)
(18, 8)
>>> g.tokens == generate(list(b"hello world"), 8, use_cache=False).tokens
True
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np

from servelab import _checks
from servelab.tiny_llm.cache import KVCacheProtocol, is_kv_cache
from servelab.tiny_llm.config import TINY
from servelab.tiny_llm.counters import ForwardStats
from servelab.tiny_llm.model import TinyLLM, as_token_ids, model_for
from servelab.tiny_llm.sampling import GREEDY, Sampler, sampled_token

__all__ = ["StepRecord", "Generation", "generate"]


@dataclass(frozen=True)
class StepRecord:
    """One forward of a generation."""

    kind: Literal["prefill", "decode", "full"]  # "full": no cache, the whole sequence again
    n_tokens: int  # tokens this forward processed
    context_len: int  # tokens already in the cache before it (0 without a cache)
    token: int  # the token sampled from its logits
    stats: ForwardStats
    wall_s: float  # measured time of the forward (CPU, this machine)


@dataclass(frozen=True)
class Generation:
    """What :func:`generate` returns: the new tokens and how each was made."""

    prompt: tuple[int, ...]
    tokens: list[int]  # generated tokens only
    logits: np.ndarray  # (steps, vocab_size): the logits each step sampled from
    steps: tuple[StepRecord, ...]
    cache: KVCacheProtocol | None  # the cache as generation left it (None without one)

    @property
    def stats(self) -> ForwardStats:
        """Counters of all forwards added up."""
        total = ForwardStats.zero()
        for s in self.steps:
            total = total + s.stats
        return total

    @property
    def tokens_processed(self) -> int:
        """Tokens that went through the model, over all forwards (§2.2)."""
        return sum(s.n_tokens for s in self.steps)

    @property
    def wall_s(self) -> float:
        """Measured time of all forwards."""
        return sum(s.wall_s for s in self.steps)

    @property
    def text(self) -> str:
        """Prompt and output as text (bytes decoded as UTF-8, bad bytes replaced)."""
        return bytes(list(self.prompt) + self.tokens).decode("utf-8", errors="replace")


def generate(prompt: Sequence[int] | np.ndarray, max_new_tokens: int, sampler: Sampler = GREEDY,
             use_cache: bool = True, *, model: TinyLLM | None = None,
             cache: KVCacheProtocol | None = None, stop_token: int | None = None) -> Generation:
    """Generate up to ``max_new_tokens`` tokens after ``prompt`` (a list of token ids).

    ``sampler`` picks each token (greedy by default). ``use_cache`` turns the KV cache on (the
    default) or off; ``cache`` supplies an empty cache to use (e.g. a
    :class:`ContiguousKVCache`), otherwise ``model.new_cache()`` makes one (a growing
    :class:`KVCache` for :class:`TinyLLM`, one spread over the devices for a tensor-parallel
    model). ``model`` defaults to the model of the cache's config, or of ``TINY``. Generation
    stops early after ``stop_token`` if it is sampled.

    >>> generate([], 4)
    Traceback (most recent call last):
    ...
    ValueError: prompt must hold at least one token, got []
    >>> generate([1] * 250, 10)
    Traceback (most recent call last):
    ...
    ValueError: a prompt of 250 tokens and 10 new tokens need 259 positions, more than max_len 256 (lower max_new_tokens or shorten the prompt)
    """
    if model is None:
        model = model_for(cache.config if is_kv_cache(cache) else TINY)
    elif not isinstance(model, TinyLLM):
        raise TypeError(f"model must be a tiny_llm.TinyLLM or None, got {model!r:.80}")
    if not callable(sampler):
        raise TypeError(f"sampler must be callable as sampler(logits, step), got {sampler!r:.80}")
    _checks.flag("use_cache", use_cache)
    cfg = model.config
    tokens = as_token_ids(prompt, cfg.vocab_size, "prompt")
    _checks.positive_int("max_new_tokens", max_new_tokens)
    if stop_token is not None and not _checks.is_int(stop_token):
        raise TypeError(f"stop_token must be a token id (an integer) or None, got {stop_token!r:.80}")
    if stop_token is not None and not 0 <= stop_token < cfg.vocab_size:
        raise ValueError(f"stop_token {stop_token} is outside the vocabulary [0, {cfg.vocab_size})")
    if cache is not None:
        if not use_cache:
            raise ValueError("a cache was given but use_cache is False")
        if not is_kv_cache(cache):
            raise ValueError(f"cache must be a KV cache, got {cache!r}")
        cfg.check_same(cache.config)
        if len(cache):
            raise ValueError(f"cache must be empty, got one holding {len(cache)} tokens")
    elif use_cache:
        cache = model.new_cache()
    limit = cache.max_len if cache is not None else cfg.max_len
    need = len(tokens) + max_new_tokens - 1  # the last token is never fed back
    if need > limit:
        raise ValueError(f"a prompt of {len(tokens)} tokens and {max_new_tokens} new tokens "
                         f"need {need} positions, more than max_len {limit} (lower max_new_tokens "
                         "or shorten the prompt)")

    seq = list(tokens.tolist())
    out: list[int] = []
    steps: list[StepRecord] = []
    all_logits: list[np.ndarray] = []
    kind: Literal["prefill", "decode", "full"]
    for step in range(max_new_tokens):
        if cache is None:
            feed, ctx, kind = seq, 0, "full"
        else:
            ctx = len(cache)
            feed, kind = (seq, "prefill") if step == 0 else (seq[-1:], "decode")
        t0 = time.perf_counter()
        logits = model.forward(feed, cache)
        wall = time.perf_counter() - t0
        token = sampled_token(sampler, logits, step)
        assert model.last_stats is not None
        steps.append(StepRecord(kind, len(feed), ctx, token, model.last_stats, wall))
        all_logits.append(logits)
        out.append(token)
        seq.append(token)
        if token == stop_token:
            break
    return Generation(tuple(tokens.tolist()), out, np.stack(all_logits), tuple(steps), cache)
