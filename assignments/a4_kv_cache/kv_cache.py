"""Assignment 4: the KV cache (lecture §2.2-§2.4): attention over cached tokens, a cache the real
tiny model can use, and what the cache saves. The story is in this folder's README.
Check yourself with ``make check TASK=a4_kv_cache``.
"""

from __future__ import annotations

import numpy as np


def causal_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, context_len: int) -> np.ndarray:
    """Attention of ``n`` new tokens.

    ``q``: ``(n, n_heads, d_head)``; ``k``, ``v``: ``(n_kv_heads, context_len + n, d_head)``, the
    cached tokens first, then the new ones. New token ``i`` (0-based) sits at position
    ``context_len + i`` and may look at keys ``0 .. context_len + i`` only. Query head ``h``
    uses K/V head ``h // (n_heads // n_kv_heads)``. Scores are scaled by ``1 / sqrt(d_head)``;
    softmax over the visible keys. Returns ``(n, n_heads * d_head)`` in float32, head-major
    within each row (head 0's ``d_head`` values first).
    """
    ### BEGIN SOLUTION
    n, n_heads, d_head = q.shape
    n_kv, total, _ = k.shape
    group = n_heads // n_kv
    out = np.empty((n, n_heads, d_head), dtype=np.float32)
    visible = np.arange(total)[None, :] <= (context_len + np.arange(n))[:, None]  # (n, total)
    for h in range(n_heads):
        kh, vh = k[h // group], v[h // group]  # (total, d_head)
        scores = (q[:, h, :] @ kh.T) / np.float32(np.sqrt(d_head))
        scores = np.where(visible, scores, -np.inf)
        scores -= scores.max(axis=1, keepdims=True)
        p = np.exp(scores)
        p /= p.sum(axis=1, keepdims=True)
        out[:, h, :] = p @ vh
    return out.reshape(n, n_heads * d_head)
    ### END SOLUTION


class ListKVCache:
    """Per layer, the list of K and V chunks the forwards stored. The four calls follow the
    contract in ``servelab.tiny_llm.cache``'s docstring; ``config`` is a tiny_llm ``ModelConfig``."""

    def __init__(self, config, max_len: int | None = None) -> None:
        self.config = config
        self.max_len = config.max_len if max_len is None else max_len
        ### BEGIN SOLUTION
        self._k: list[list[np.ndarray]] = [[] for _ in range(config.n_layers)]
        self._v: list[list[np.ndarray]] = [[] for _ in range(config.n_layers)]
        self._len = 0
        self._pending = 0
        ### END SOLUTION

    def __len__(self) -> int:
        """Committed tokens."""
        ### BEGIN SOLUTION
        return self._len
        ### END SOLUTION

    def reserve(self, n_new: int) -> None:
        """Room for ``n_new`` more tokens; past ``max_len``: ``ValueError``, nothing changed."""
        ### BEGIN SOLUTION
        if n_new < 1 or self._len + n_new > self.max_len:
            raise ValueError(f"cannot reserve {n_new} tokens after {self._len} (max_len {self.max_len})")
        self._pending = n_new
        ### END SOLUTION

    def update(self, layer: int, k_new: np.ndarray, v_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Stores the new K and V after the cached; returns the whole sequence's (``len + n_new``)."""
        ### BEGIN SOLUTION
        self._k[layer].append(k_new.copy())
        self._v[layer].append(v_new.copy())
        return np.concatenate(self._k[layer], axis=1), np.concatenate(self._v[layer], axis=1)
        ### END SOLUTION

    def commit(self, n_new: int) -> None:
        """The reserved tokens now count in ``len(cache)``."""
        ### BEGIN SOLUTION
        self._len += n_new
        self._pending = 0
        ### END SOLUTION

    def rollback(self) -> None:
        """Forgets the reservation and whatever ``update`` stored since."""
        ### BEGIN SOLUTION
        for layer in range(self.config.n_layers):
            stored = sum(chunk.shape[1] for chunk in self._k[layer])
            if stored > self._len:  # drop what this forward added
                self._k[layer].pop()
                self._v[layer].pop()
        self._pending = 0
        ### END SOLUTION


def tokens_processed(prompt_len: int, max_new_tokens: int, use_cache: bool) -> int:
    """Tokens pushed through the model to generate ``max_new_tokens`` after a prompt.

    With the cache, the prefill takes the prompt and each later step one token (the last
    generated token is never fed back). Without it, every step recomputes the whole sequence
    so far. A 32-token prompt and 200 new tokens: 231 with, 26,300 without (§2.2).
    """
    ### BEGIN SOLUTION
    if use_cache:
        return prompt_len + max_new_tokens - 1
    return sum(prompt_len + t for t in range(max_new_tokens))
    ### END SOLUTION
