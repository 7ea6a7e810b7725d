"""The model: a miniature Llama in numpy, FP32, one forward for prefill and decode (§2.3).

``forward(token_ids, cache)`` runs the new tokens ``token_ids`` through every layer on top of
what ``cache`` already holds, writes their keys and values into it, and returns the logits of
the next token. Prefill and decode are the same call: a prefill passes the whole prompt and an
empty cache, a decode step passes one token and the cache the earlier steps filled.

:meth:`TinyLLM.forward_batch` runs several sequences of different lengths, each with its own
cache (or none), in one forward. Their tokens are packed into one ``(total_tokens, d_model)``
matrix, so every weight matrix is read once for the whole batch, as a continuous-batching engine
does (lecture 2); only attention, which mixes tokens within a sequence, runs per sequence, each
against its own cache. Batching does not change the maths, only the float rounding: a sequence
in a batch gets the logits it gets alone to within float error (§6.5, exercise 10).

>>> from servelab.tiny_llm.config import TINY
>>> model = TinyLLM(TINY)
>>> from servelab.tiny_llm.cache import KVCache
>>> cache = KVCache(TINY)
>>> prompt = list(b"hello world")
>>> logits = model.forward(prompt, cache)            # prefill: 11 tokens
>>> logits.shape, len(cache), model.last_stats.n_tokens
((256,), 11, 11)
>>> token = int(logits.argmax())
>>> logits = model.forward([token], cache)           # decode: 1 token
>>> len(cache), model.last_stats.n_tokens
(12, 1)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Sequence

import numpy as np

from servelab import _checks
from servelab.tiny_llm._blas import one_blas_thread
from servelab.tiny_llm.cache import ContiguousKVCache, KVCache, KVCacheProtocol, is_kv_cache
from servelab.tiny_llm.config import TINY, ModelConfig
from servelab.tiny_llm.counters import ForwardStats, forward_stats

__all__ = ["LayerWeights", "Weights", "TinyLLM", "model_for", "as_token_ids", "rope_tables",
           "rms_norm", "rope", "silu", "causal_attention", "attention_partial", "mlp_partial",
           "lm_head_logits", "KVStore"]

F32 = np.float32

# kv(i, k_new, v_new) -> (k, v): store sequence i's new keys and values, return all of them
KVStore = Callable[[int, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class LayerWeights:
    """One transformer block. Wq, Wk, Wv are stored side by side in ``wqkv`` and the SwiGLU
    gate and up matrices in ``w_gate_up`` (one matmul each instead of three and two; the
    parameter count is the same)."""

    attn_norm: np.ndarray  # (d_model,)
    wqkv: np.ndarray  # (d_model, q_dim + 2 * kv_dim)
    wo: np.ndarray  # (q_dim, d_model)
    mlp_norm: np.ndarray  # (d_model,)
    w_gate_up: np.ndarray  # (d_model, 2 * d_ff)
    w_down: np.ndarray  # (d_ff, d_model)


@dataclass(frozen=True)
class Weights:
    """All parameters, read-only float32 arrays."""

    embed: np.ndarray  # (vocab_size, d_model)
    layers: tuple[LayerWeights, ...]
    final_norm: np.ndarray  # (d_model,)
    lm_head: np.ndarray  # (d_model, vocab_size), untied from ``embed``

    def arrays(self) -> list[np.ndarray]:
        """Every parameter array, in a fixed order."""
        out = [self.embed]
        for layer in self.layers:
            out += [layer.attn_norm, layer.wqkv, layer.wo, layer.mlp_norm, layer.w_gate_up,
                    layer.w_down]
        return out + [self.final_norm, self.lm_head]

    @property
    def param_count(self) -> int:
        return sum(a.size for a in self.arrays())


def init_weights(config: ModelConfig) -> Weights:
    """Weights drawn from ``numpy.random.default_rng(config.seed)``: no download, no training.

    Normal with variance ``1 / fan_in`` for the matmuls (output projections further scaled by
    ``1 / sqrt(2 n_layers)``, GPT-2 style, so the residual stream stays O(1)), unit-variance
    embeddings, RMSNorm gains at 1.
    """
    rng = np.random.default_rng(config.seed)
    d, q, kv, ff, V = config.d_model, config.q_dim, config.kv_dim, config.d_ff, config.vocab_size
    resid = 1.0 / np.sqrt(2.0 * config.n_layers)

    def normal(shape: tuple[int, int], std: float) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=F32) * F32(std)).astype(F32)

    embed = normal((V, d), 1.0)
    layers = []
    for _ in range(config.n_layers):
        layers.append(LayerWeights(
            attn_norm=np.ones(d, F32),
            wqkv=normal((d, q + 2 * kv), d ** -0.5),
            wo=normal((q, d), q ** -0.5 * resid),
            mlp_norm=np.ones(d, F32),
            w_gate_up=normal((d, 2 * ff), d ** -0.5),
            w_down=normal((ff, d), ff ** -0.5 * resid),
        ))
    weights = Weights(embed, tuple(layers), np.ones(d, F32), normal((d, V), d ** -0.5))
    for a in weights.arrays():
        a.flags.writeable = False
    return weights


def rope_tables(config: ModelConfig) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of ``position * theta^(-2i / d_head)``, ``(max_len, d_head / 2)`` each."""
    half = config.d_head // 2
    inv_freq = config.rope_theta ** (-np.arange(half, dtype=np.float64) / half)
    angles = np.arange(config.max_len, dtype=np.float64)[:, None] * inv_freq[None, :]
    return np.cos(angles).astype(F32), np.sin(angles).astype(F32)


def rms_norm(x: np.ndarray, gain: np.ndarray, eps: float) -> np.ndarray:
    # the mean square as np.mean computes it (the sum, then a division by the count as an intp),
    # bit for bit, without np.mean's Python wrapper: at the tiny model's sizes the wrapper cost
    # more than the arithmetic, and a forward normalises 2 * n_layers + 1 times
    mean_square = np.add.reduce(x * x, axis=-1, keepdims=True)
    np.true_divide(mean_square, np.intp(x.shape[-1]), out=mean_square, casting="unsafe")
    return x * (gain / np.sqrt(mean_square + F32(eps)))


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate ``x`` ``(tokens, heads, d_head)`` by its positions' angles (rotate-half form)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return np.concatenate([x1 * c - x2 * s, x1 * s + x2 * c], axis=-1)


def silu(x: np.ndarray) -> np.ndarray:
    return x / (F32(1.0) + np.exp(-x))


def causal_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, context_len: int) -> np.ndarray:
    """Causal grouped-query attention of one sequence.

    ``q`` is ``(n, n_heads, d_head)`` for the ``n`` new tokens; ``k`` and ``v`` are
    ``(n_kv_heads, context_len + n, d_head)``: the cached tokens then the new ones. New token
    ``i`` sits at position ``context_len + i`` and sees keys ``0 .. context_len + i``. Query
    head ``h`` reads K/V head ``h // (n_heads / n_kv_heads)``. Returns ``(n, n_heads * d_head)``.
    """
    n, n_heads, d_head = q.shape
    n_kv, total, _ = k.shape
    group = n_heads // n_kv
    # (n, n_kv, group, d) -> (n_kv, group * n, d): the group's queries share one K/V matmul
    qg = q.reshape(n, n_kv, group, d_head).transpose(1, 2, 0, 3).reshape(n_kv, group * n, d_head)
    scores = np.matmul(qg, k.transpose(0, 2, 1)) * F32(d_head ** -0.5)  # (n_kv, group*n, total)
    scores = scores.reshape(n_kv, group, n, total)
    if n > 1:  # a single new token sees everything; several need the causal mask
        visible = np.arange(total)[None, :] <= (context_len + np.arange(n))[:, None]
        scores = np.where(visible, scores, F32(-np.inf))
    # the ufuncs' own reductions: what .max() and .sum() compute, without their Python wrappers
    scores = scores - np.maximum.reduce(scores, axis=-1, keepdims=True)
    probs = np.exp(scores)
    probs /= np.add.reduce(probs, axis=-1, keepdims=True)
    out = np.matmul(probs.reshape(n_kv, group * n, total), v)  # (n_kv, group*n, d)
    return out.reshape(n_kv, group, n, d_head).transpose(2, 0, 1, 3).reshape(n, n_heads * d_head)


def attention_partial(h: np.ndarray, wqkv: np.ndarray, wo: np.ndarray, n_heads: int,
                      n_kv_heads: int, d_head: int, cos: np.ndarray, sin: np.ndarray,
                      offsets: np.ndarray, contexts: Sequence[int], kv: KVStore) -> np.ndarray:
    """One layer's attention output ``attn @ Wo`` for the normalised input ``h`` (tokens of
    every sequence packed, sequence ``i`` in rows ``offsets[i]:offsets[i + 1]``).

    ``wqkv`` holds the Q columns of ``n_heads`` heads, then the K and V columns of their
    ``n_kv_heads`` heads; ``wo`` the matching rows of the output projection. The whole model
    passes every head; a tensor-parallel device passes its own heads and gets its share of the
    sum, which an all-reduce completes (:mod:`servelab.tiny_llm.tensor_parallel`).
    ``kv(i, k_new, v_new)`` stores sequence ``i``'s new keys and values in its cache and
    returns the whole sequence's (``(n_kv_heads, tokens, d_head)`` each).
    """
    n_tok = h.shape[0]
    q_dim, kv_dim = n_heads * d_head, n_kv_heads * d_head
    qkv = h @ wqkv  # one matmul for all sequences' tokens
    # Q's and K's heads side by side get their rotation in one call (it is per head, elementwise)
    qk = rope(qkv[:, :q_dim + kv_dim].reshape(n_tok, n_heads + n_kv_heads, d_head), cos, sin)
    q, k = qk[:, :n_heads], qk[:, n_heads:]
    v = qkv[:, q_dim + kv_dim:].reshape(n_tok, n_kv_heads, d_head)
    attn = np.empty((n_tok, q_dim), F32)
    for i, context_len in enumerate(contexts):  # attention mixes tokens within a sequence only
        lo, hi = offsets[i], offsets[i + 1]
        k_all, v_all = kv(i, k[lo:hi].transpose(1, 0, 2), v[lo:hi].transpose(1, 0, 2))
        attn[lo:hi] = causal_attention(q[lo:hi], k_all, v_all, context_len)
    return attn @ wo


def mlp_partial(h: np.ndarray, w_gate_up: np.ndarray, w_down: np.ndarray) -> np.ndarray:
    """SwiGLU ``(silu(h Wg) * h Wu) Wd``; ``w_gate_up`` holds the gate columns then the up
    columns (of every hidden unit, or of one device's share of them)."""
    ff = w_down.shape[0]
    gate_up = h @ w_gate_up
    return (silu(gate_up[:, :ff]) * gate_up[:, ff:]) @ w_down


def lm_head_logits(x: np.ndarray, weights: Weights, config: ModelConfig, offsets: np.ndarray,
                   all_logits: bool) -> list[np.ndarray]:
    """Final norm and LM head: every position's logits, or only each sequence's last (§2.3)."""
    if all_logits:
        logits = rms_norm(x, weights.final_norm, config.norm_eps) @ weights.lm_head
        return [logits[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1)]
    last = x[offsets[1:] - 1]  # LM head only for each sequence's last token (§2.3)
    logits = rms_norm(last, weights.final_norm, config.norm_eps) @ weights.lm_head
    return list(logits)


def as_token_ids(token_ids: Any, vocab_size: int, what: str = "token_ids") -> np.ndarray:
    """Check a sequence of token ids and return it as an int64 array.

    >>> as_token_ids([104, 105], 256)
    array([104, 105])
    >>> as_token_ids([104, 300], 256)
    Traceback (most recent call last):
    ...
    ValueError: token id 300 at token_ids[1] is outside the vocabulary [0, 256)
    >>> as_token_ids([], 256, "prompt")
    Traceback (most recent call last):
    ...
    ValueError: prompt must hold at least one token, got []
    """
    if type(token_ids) is list and token_ids and type(vocab_size) is int and vocab_size > 0 \
            and all(type(t) is int and 0 <= t < vocab_size for t in token_ids):
        # what an engine step passes (a few Python ints a sequence): checked in one pass, where
        # the general path below costs ten numpy calls
        return np.array(token_ids, dtype=np.int64)
    if isinstance(token_ids, (str, bytes)):
        raise ValueError(f"{what} must be a sequence of integer token ids, got {token_ids!r} "
                         "(encode text first, e.g. list(text.encode()))")
    _checks.positive_int("vocab_size", vocab_size)
    try:
        arr = np.asarray(token_ids)
    except (TypeError, ValueError, OverflowError):
        try:
            items = list(token_ids)
        except TypeError:
            raise ValueError(f"{what} must be a sequence of integer token ids, got {token_ids!r:.80}") from None
        arr = np.empty(len(items), dtype=object)  # one object per item, however odd (no broadcasting)
        arr[:] = [None] * len(items)
        for i, t in enumerate(items):
            arr[i] = t
    if arr.ndim != 1:
        raise ValueError(f"{what} must be a one-dimensional sequence of token ids, "
                         f"got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{what} must hold at least one token, got {list(arr)}")
    if not np.issubdtype(arr.dtype, np.integer):
        for i, t in enumerate(arr.tolist()):
            if not _checks.is_int(t):
                raise ValueError(f"{what}[{i}] must be an integer token id, got {t!r}")
    bad = np.flatnonzero([not 0 <= t < vocab_size for t in arr.tolist()]
                         if arr.dtype == object else (arr < 0) | (arr >= vocab_size))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"token id {arr.tolist()[i]} at {what}[{i}] is outside the vocabulary "
                         f"[0, {vocab_size})")
    return arr.astype(np.int64)


class TinyLLM:
    """The model of one :class:`ModelConfig`: its weights and its forward.

    After each forward, ``last_stats`` holds that forward's counters and ``total_stats`` their
    running sum (reset it with ``model.total_stats = ForwardStats.zero()``).
    """

    def __init__(self, config: ModelConfig = TINY) -> None:
        if not isinstance(config, ModelConfig):
            raise ValueError(f"config must be a ModelConfig, got {config!r}")
        self.config = config
        self.weights = init_weights(config)
        self._cos, self._sin = rope_tables(config)
        self.last_stats: ForwardStats | None = None
        self.total_stats = ForwardStats.zero()

    def __repr__(self) -> str:
        return f"TinyLLM({self.config.name!r}, params={self.config.param_count:,})"

    def new_cache(self, contiguous: bool = False,
                  max_len: int | None = None) -> KVCache | ContiguousKVCache:
        """An empty cache for this model: growing (default) or reserved up front."""
        if _checks.flag("contiguous", contiguous):
            return ContiguousKVCache(self.config, max_len)
        return KVCache(self.config, max_len)

    def forward(self, token_ids: Sequence[int] | np.ndarray, cache: KVCacheProtocol | None = None,
                *, all_logits: bool = False) -> np.ndarray:
        """Run ``token_ids`` on top of ``cache`` and return next-token logits.

        ``cache=None`` runs the tokens from position 0 with no cache (nothing is kept). The
        result is ``(vocab_size,)``: the logits after the last token, the only ones that
        generation needs and the only ones computed (and counted, as in ``hw_model``). With
        ``all_logits=True`` it is ``(len(token_ids), vocab_size)``, every position's logits.
        """
        if cache is not None and not is_kv_cache(cache):
            raise ValueError(f"cache must be a KV cache or None, got {cache!r:.80}")
        return self.forward_batch([token_ids], [cache], all_logits=all_logits)[0]

    def forward_batch(self, batch_token_ids: Sequence[Sequence[int] | np.ndarray],
                      caches: Sequence[KVCacheProtocol | None] | None = None, *,
                      all_logits: bool = False) -> list[np.ndarray]:
        """One forward over several sequences of any lengths, each on its own cache (or none).

        Returns one logits array per sequence, shaped as :meth:`forward` returns them. Every
        argument is checked before any cache changes; a failure leaves all caches as they were.
        """
        cfg = self.config
        _checks.flag("all_logits", all_logits)
        if isinstance(batch_token_ids, (str, bytes)) or not hasattr(batch_token_ids, "__len__"):
            raise TypeError(f"batch_token_ids must be a list of token-id sequences, got {batch_token_ids!r:.80}")
        if caches is not None and (isinstance(caches, (str, bytes)) or not hasattr(caches, "__iter__")):
            raise TypeError(f"caches must be a list of KV caches (or None), got {caches!r:.80}")
        n_seq = len(batch_token_ids)
        if n_seq == 0:
            raise ValueError("batch_token_ids must hold at least one sequence: the batch must hold "
                             "at least one sequence, got an empty batch")
        cache_list: list[KVCacheProtocol | None] = (
            [None] * n_seq if caches is None else list(caches))
        if len(cache_list) != n_seq:
            raise ValueError(f"got {n_seq} sequences but {len(cache_list)} caches")
        where = (lambda i: "token_ids") if n_seq == 1 else (lambda i: f"token_ids[{i}]")
        seqs = [as_token_ids(t, cfg.vocab_size, where(i)) for i, t in enumerate(batch_token_ids)]
        seen: set[int] = set()
        for i, c in enumerate(cache_list):
            if c is None:
                if len(seqs[i]) > cfg.max_len:
                    raise ValueError(f"{where(i)} holds {len(seqs[i])} tokens, more than "
                                     f"max_len {cfg.max_len}")
                continue
            if not is_kv_cache(c):
                raise ValueError(f"caches[{i}] must be a KV cache or None, got {c!r:.80}")
            cfg.check_same(c.config)
            if id(c) in seen:
                raise ValueError("the same cache object appears twice in one batch")
            seen.add(id(c))
        contexts = [0 if c is None else len(c) for c in cache_list]
        reserved: list[KVCacheProtocol] = []
        try:
            for c, s in zip(cache_list, seqs):
                if c is not None:
                    c.reserve(len(s))  # raises on overflow, before anything is written
                    reserved.append(c)
            with one_blas_thread():
                out = self._forward(seqs, cache_list, contexts, all_logits)
        except BaseException:
            for c in reserved:
                c.rollback()
            raise
        for c, s in zip(cache_list, seqs):
            if c is not None:
                c.commit(len(s))
        n_logits = sum(len(s) for s in seqs) if all_logits else n_seq
        self.last_stats = forward_stats(cfg, [(len(s), c) for s, c in zip(seqs, contexts)],
                                        n_logits)
        self.total_stats = self.total_stats + self.last_stats
        return out

    def _forward(self, seqs: list[np.ndarray], caches: list[KVCacheProtocol | None],
                 contexts: list[int], all_logits: bool) -> list[np.ndarray]:
        cfg, w = self.config, self.weights
        lengths = [len(s) for s in seqs]
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        positions = np.concatenate([np.arange(c, c + n) for c, n in zip(contexts, lengths)])
        cos, sin = self._cos[positions], self._sin[positions]

        x = w.embed[np.concatenate(seqs)]  # (tokens, d_model): the looked-up rows only
        for layer_idx, layer in enumerate(w.layers):
            def kv(i: int, k_new: np.ndarray, v_new: np.ndarray,
                   layer_idx: int = layer_idx) -> tuple[np.ndarray, np.ndarray]:
                cache = caches[i]
                return (k_new, v_new) if cache is None else cache.update(layer_idx, k_new, v_new)
            h = rms_norm(x, layer.attn_norm, cfg.norm_eps)
            x = x + attention_partial(h, layer.wqkv, layer.wo, cfg.n_heads, cfg.n_kv_heads,
                                      cfg.d_head, cos, sin, offsets, contexts, kv)
            h = rms_norm(x, layer.mlp_norm, cfg.norm_eps)
            x = x + mlp_partial(h, layer.w_gate_up, layer.w_down)
        return lm_head_logits(x, w, cfg, offsets, all_logits)


@lru_cache(maxsize=8)
def _cached_model(config: ModelConfig) -> TinyLLM:
    return TinyLLM(config)


def model_for(config: ModelConfig = TINY) -> TinyLLM:
    """The (shared) model of ``config``: built once, then reused. Its weights are read-only;
    its counters are shared too, so code that reads them should use its own ``TinyLLM``."""
    _checks.instance("config", config, ModelConfig, "a tiny_llm.ModelConfig")
    return _cached_model(config)
