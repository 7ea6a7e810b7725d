"""Given (do not edit): the maths of one tiny_llm layer in numpy, for one sequence with no
cache (positions 0 .. n-1). ``tp_layer.py`` calls these on each device's share of the weights.

A layer is a dict of float32 arrays: ``attn_norm (d_model,)``, ``wqkv (d_model, q_dim + 2
kv_dim)`` (the Q columns of every head, then K, then V, head by head), ``wo (q_dim, d_model)``,
``mlp_norm (d_model,)``, ``w_gate_up (d_model, 2 d_ff)`` (gate columns, then up columns),
``w_down (d_ff, d_model)``.
"""

from __future__ import annotations

import numpy as np

F32 = np.float32


def rms_norm(x: np.ndarray, gain: np.ndarray, eps: float) -> np.ndarray:
    """``x / sqrt(mean(x^2) + eps) * gain`` over the last axis."""
    return x * (gain / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + F32(eps)))


def _rotate(x: np.ndarray, theta: float) -> np.ndarray:
    """Rotary positions (rotate-half form) for ``x`` of shape ``(n, heads, d_head)``."""
    half = x.shape[-1] // 2
    # position p turns pair j by p * theta^(-j/half), computed in float64 then rounded once
    angles = np.outer(np.arange(x.shape[0]), theta ** (-np.arange(half) / half))
    c, s = np.cos(angles).astype(F32)[:, None, :], np.sin(angles).astype(F32)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * c - x2 * s, x1 * s + x2 * c], axis=-1)


def attention_block(h: np.ndarray, wqkv: np.ndarray, wo: np.ndarray, n_heads: int,
                    n_kv_heads: int, d_head: int, theta: float = 10000.0) -> np.ndarray:
    """``attn(h) @ wo`` for ``n_heads`` query heads reading ``n_kv_heads`` K/V heads (query
    head ``i`` reads K/V head ``i // (n_heads // n_kv_heads)``); causal over positions 0..n-1.
    ``wqkv`` holds exactly those heads' Q, K and V columns, ``wo`` their rows."""
    n = h.shape[0]
    q_dim, kv_dim = n_heads * d_head, n_kv_heads * d_head
    qkv = h @ wqkv
    q = _rotate(qkv[:, :q_dim].reshape(n, n_heads, d_head), theta)
    k = _rotate(qkv[:, q_dim:q_dim + kv_dim].reshape(n, n_kv_heads, d_head), theta)
    v = qkv[:, q_dim + kv_dim:].reshape(n, n_kv_heads, d_head)
    # all heads at once: query head i sits beside the K/V head it reads, i // group, as
    # (n, n_kv_heads, group, d_head); scores are (n_kv_heads, group, query, key)
    group = n_heads // n_kv_heads
    scores = np.einsum("qhgd,khd->hgqk", q.reshape(n, n_kv_heads, group, d_head), k) * F32(d_head ** -0.5)
    scores = np.where(np.tril(np.ones((n, n), dtype=bool)), scores, F32(-np.inf))  # causal
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    return np.einsum("hgqk,khd->qhgd", weights, v).reshape(n, q_dim) @ wo


def mlp_block(h: np.ndarray, w_gate_up: np.ndarray, w_down: np.ndarray) -> np.ndarray:
    """SwiGLU ``(silu(h Wg) * h Wu) Wd``; ``w_gate_up`` holds gate columns then up columns."""
    ff = w_down.shape[0]
    gate_up = h @ w_gate_up
    gate = gate_up[:, :ff]
    return (gate / (F32(1.0) + np.exp(-gate)) * gate_up[:, ff:]) @ w_down


def layer_forward(x: np.ndarray, layer: dict, n_heads: int, n_kv_heads: int, d_head: int,
                  eps: float) -> np.ndarray:
    """The whole layer on one device: what :func:`tp_layer.tp_layer` must reproduce."""
    x = x + attention_block(rms_norm(x, layer["attn_norm"], eps), layer["wqkv"], layer["wo"],
                            n_heads, n_kv_heads, d_head)
    return x + mlp_block(rms_norm(x, layer["mlp_norm"], eps), layer["w_gate_up"],
                         layer["w_down"])
