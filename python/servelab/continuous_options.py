"""The options of one continuous-batching run (lecture §8, milestone 2), as one typed record.

:class:`ContinuousOptions` holds everything a continuous-batching run can be told beside its
requests and hardware: the card's scheduler limits and KV pool, what to record, prefix caching
and its host tier, speculation, the extra step time of a real serving stack. Its constructor is
the one place where each option is checked (the one mix it refuses, a host tier without prefix
caching, has nothing to hold); every other mix of features runs, as a real vLLM runs chunked
prefill, prefix caching and speculation together. The record then crosses into Rust as it is
(``rust/src/py/sim.rs`` reads its attributes into a typed struct). :func:`servelab.serving_core.run_continuous` runs one;
:func:`servelab.serving_core.run_continuous_batching` builds one from its keywords.

>>> ContinuousOptions(max_num_seqs=8, prefix_caching=True, host_blocks=64).host_policy
'lru'
>>> ContinuousOptions(host_blocks=64)
Traceback (most recent call last):
...
ValueError: host_blocks=64 needs prefix_caching=True (the host tier holds cached prefixes)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from servelab import _checks, _core
from servelab.blocks import HOST_POLICIES
from servelab.hw_model import GpuSpec, ModelSpec, kv_capacity_tokens
from servelab.workload import SharedPrefixes

__all__ = ["ContinuousOptions", "Speculation"]


@dataclass(frozen=True, eq=False)
class Speculation:
    """Speculative decoding in the simulator (§8, milestone 4a; the engine's is
    :class:`servelab.engine.SpeculativeScheduler`): each decoding request gets up to ``k``
    guesses of a ``draft`` model per step, within the token budget and the free blocks left.
    The simulator has no tokens, so each guess is kept with probability ``acceptance`` (one
    rate for every request, or one per request) up to the first rejection: ``(1 - a^(k+1)) /
    (1 - a)`` tokens per target step on average. A step draws once, not once per guess: one
    uniform ``u`` in ``[0, 1)``, seeded by ``(seed, request, output tokens left before the
    step)``, keeps ``min(g, floor(ln u / ln a))`` of its ``g`` guesses (the largest ``j <= g``
    with ``u < a^j``, computed with products), which is distributed exactly as ``g`` draws
    stopped at the first rejection (``P(kept >= j) = a^j``) at a hash per step instead of one
    per output token. The verify forward is priced as ``1 + g`` tokens of the target; the
    draft's ``g`` steps as batched decode steps of ``draft`` (a
    :class:`~servelab.hw_model.ModelSpec`): in the clock, ``busy_s`` and ``draft_busy_s``, not
    in ``flops`` (the target's alone).

    >>> from servelab.hw_model import LLAMA3_8B
    >>> Speculation(4, LLAMA3_8B, 0.8).acceptance_column(2).tolist()
    [0.8, 0.8]
    >>> Speculation(4, LLAMA3_8B, 1.5)
    Traceback (most recent call last):
    ...
    ValueError: acceptance must be a number in [0, 1] or one per request, got 1.5
    """

    k: int
    draft: ModelSpec
    acceptance: Any = 0.8
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "k", _checks.integer("k", self.k, 0, _core.MAX_SPEC_K))
        if not isinstance(self.draft, ModelSpec):
            raise TypeError(f"draft must be a servelab.hw_model.ModelSpec, got {self.draft!r:.80}")
        a = self.acceptance
        bad = ValueError(f"acceptance must be a number in [0, 1] or one per request, got {a!r:.80}")
        if _checks.is_real(a):
            if not 0.0 <= float(a) <= 1.0:
                raise bad
            a = float(a)
        else:
            try:
                raw = np.asarray(a)
                # whole or real numbers only: a complex one would lose its imaginary part
                # silently, a string or a bool is no rate
                if raw.dtype.kind not in "iuf":
                    raise bad
                a = np.array(raw, dtype=np.float64, ndmin=1)
            except (TypeError, ValueError, OverflowError):
                raise bad from None
            if a.ndim != 1 or a.size == 0 or not np.all((a >= 0.0) & (a <= 1.0)):
                raise bad
            a.flags.writeable = False
        object.__setattr__(self, "acceptance", a)
        object.__setattr__(self, "seed", _checks.integer("seed", self.seed, 0, 2**64 - 1))

    def acceptance_column(self, n: int) -> np.ndarray:
        """One rate per request for ``n`` requests."""
        n = _checks.integer("n", n, 0, None)
        if isinstance(self.acceptance, float):
            return np.full(n, self.acceptance)
        if len(self.acceptance) != n:
            raise ValueError(f"speculative.acceptance must have one rate per request ({n}), "
                             f"got {len(self.acceptance)}")
        return np.ascontiguousarray(self.acceptance, dtype=np.float64)


@dataclass(frozen=True, eq=False)
class ContinuousOptions:
    """The options of a continuous-batching run; each is described where it is used, in
    :func:`servelab.serving_core.run_continuous_batching`, whose keywords these are.

    >>> o = ContinuousOptions(max_num_seqs=4, num_blocks=64, chunked_prefill=True)
    >>> o.max_num_seqs, o.num_blocks, o.pool_blocks(None, None)
    (4, 64, 64)
    >>> ContinuousOptions(block_size=0)
    Traceback (most recent call last):
    ...
    ValueError: block_size must be a positive integer, got 0
    """

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    block_size: int = 16
    num_blocks: int | None = None  # None: all that fits beside the weights (pool_blocks)
    chunked_prefill: bool = False
    mem_util: float = 0.9
    trace: bool = False
    batch_log: bool = False
    prefix_caching: bool = False
    shared_prefixes: SharedPrefixes | None = None  # checked against the requests when it runs
    host_blocks: int = 0
    host_policy: str = "lru"
    speculative: Speculation | None = None
    step_extra_s: tuple[float, float] = (0.0, 0.0)

    def __post_init__(self) -> None:
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        put("max_num_seqs", _checks.positive_int("max_num_seqs", self.max_num_seqs))
        put("max_num_batched_tokens", _checks.positive_int("max_num_batched_tokens", self.max_num_batched_tokens))
        put("block_size", _checks.positive_int("block_size", self.block_size))
        if self.num_blocks is not None:
            put("num_blocks", _checks.positive_int("num_blocks", self.num_blocks))
        put("chunked_prefill", _checks.flag("chunked_prefill", self.chunked_prefill))
        put("trace", _checks.flag("trace", self.trace))
        put("batch_log", _checks.flag("batch_log", self.batch_log))
        caching = _checks.flag("prefix_caching", self.prefix_caching)
        put("prefix_caching", caching)
        host = _checks.integer("host_blocks", self.host_blocks, 0, _core.MAX_NUM_BLOCKS)
        put("host_blocks", host)
        _checks.choice("host_policy", self.host_policy, HOST_POLICIES)
        if host and not caching:
            raise ValueError(f"host_blocks={host} needs prefix_caching=True (the host tier holds cached prefixes)")
        spec = self.speculative
        if spec is not None and not isinstance(spec, Speculation):
            raise TypeError("speculative must be None or a servelab.serving_core.Speculation, "
                            f"got {type(spec).__name__}")
        extra = self.step_extra_s
        if not isinstance(extra, tuple) or len(extra) != 2:
            raise ValueError(f"step_extra_s must be a pair (per_token_s, per_seq_s), got {extra!r}")
        put("step_extra_s", (_checks.non_negative("step_extra_s[0]", extra[0]),
                             _checks.non_negative("step_extra_s[1]", extra[1])))

    def pool_blocks(self, model: ModelSpec, gpu: GpuSpec) -> int:
        """``num_blocks``, or when None the blocks of ``block_size`` tokens that fit beside the
        weights: ``hw_model.kv_capacity_tokens(model, gpu, mem_util) // block_size``."""
        if self.num_blocks is not None:
            return self.num_blocks
        capacity = kv_capacity_tokens(model, gpu, self.mem_util)
        bs = self.block_size
        blocks = capacity // bs
        # the default is derived, so say so: "num_blocks must be ..." would name an argument the
        # caller never passed
        if blocks < 1:
            raise ValueError(f"num_blocks: no KV block of block_size={bs} tokens fits beside the weights at "
                             f"mem_util={self.mem_util!r} (kv_capacity_tokens={capacity}); pass num_blocks, "
                             "a smaller block_size or a larger mem_util")
        if blocks > _core.MAX_NUM_BLOCKS:
            raise ValueError(f"the default num_blocks, kv_capacity_tokens={capacity} // block_size={bs} "
                             f"= {blocks}, is more than the simulator's limit of {_core.MAX_NUM_BLOCKS} "
                             "blocks; pass a larger block_size or num_blocks")
        return blocks
