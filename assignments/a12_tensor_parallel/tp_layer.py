"""Assignment 12: tensor parallelism on numpy shards (lecture §8.1, course project milestone 1).

Split one tiny_llm layer across ``t`` devices (Megatron-LM's layout), run each device's share,
and all-reduce the partial sums. The story and the layout rules are in this folder's README.
Check yourself with ``make check TASK=a12_tensor_parallel``.
"""

from __future__ import annotations

import numpy as np

from layer_math import attention_block, mlp_block, rms_norm


def shard_attention(wqkv: np.ndarray, wo: np.ndarray, n_heads: int, n_kv_heads: int,
                    d_head: int, t: int) -> list:
    """``[(wqkv_s, wo_s) for s in range(t)]``: device ``s`` gets query heads
    ``s*H/t .. (s+1)*H/t - 1`` (Q columns, then the K and V columns of the K/V heads they read),
    and the matching rows of ``wo``."""
    ### BEGIN SOLUTION
    q_dim, kv_dim = n_heads * d_head, n_kv_heads * d_head
    h_per = n_heads // t
    shards = []
    for s in range(t):
        first, last = s * h_per, (s + 1) * h_per  # this device's query heads
        if t <= n_kv_heads:  # whole K/V heads, n_kv_heads / t each
            kv_heads = range(s * n_kv_heads // t, (s + 1) * n_kv_heads // t)
        else:  # one K/V head, replicated on the t / n_kv_heads devices that read it
            kv = s // (t // n_kv_heads)
            kv_heads = range(kv, kv + 1)
        lo, hi = kv_heads.start * d_head, kv_heads.stop * d_head
        cols = np.concatenate([wqkv[:, first * d_head:last * d_head],
                               wqkv[:, q_dim + lo:q_dim + hi],
                               wqkv[:, q_dim + kv_dim + lo:q_dim + kv_dim + hi]], axis=1)
        shards.append((cols, wo[first * d_head:last * d_head]))
    return shards
    ### END SOLUTION


def shard_mlp(w_gate_up: np.ndarray, w_down: np.ndarray, t: int) -> list:
    """``[(w_gate_up_s, w_down_s) for s in range(t)]``: device ``s`` gets hidden units
    ``s*F/t .. (s+1)*F/t - 1`` (their gate columns, then their up columns, and their rows of
    ``w_down``), where ``F = d_ff``."""
    ### BEGIN SOLUTION
    ff = w_down.shape[0]
    per = ff // t
    shards = []
    for s in range(t):
        lo, hi = s * per, (s + 1) * per
        gate_up = np.concatenate([w_gate_up[:, lo:hi], w_gate_up[:, ff + lo:ff + hi]], axis=1)
        shards.append((gate_up, w_down[lo:hi]))
    return shards
    ### END SOLUTION


def all_reduce(partials: list) -> np.ndarray:
    """The sum of every device's partial output (what each device holds after an all-reduce)."""
    ### BEGIN SOLUTION
    reduced = np.zeros_like(partials[0])
    for part in partials:
        reduced = reduced + part
    return reduced
    ### END SOLUTION


def tp_layer(x: np.ndarray, layer: dict, n_heads: int, n_kv_heads: int, d_head: int, t: int,
             eps: float) -> np.ndarray:
    """``layer_math.layer_forward(x, layer, ...)`` computed on ``t`` devices: norms replicated,
    attention and MLP on shards, one all-reduce after each."""
    ### BEGIN SOLUTION
    n_kv_local = max(1, n_kv_heads // t)
    h = rms_norm(x, layer["attn_norm"], eps)
    parts = [attention_block(h, wqkv, wo, n_heads // t, n_kv_local, d_head)
             for wqkv, wo in shard_attention(layer["wqkv"], layer["wo"], n_heads, n_kv_heads,
                                             d_head, t)]
    x = x + all_reduce(parts)
    h = rms_norm(x, layer["mlp_norm"], eps)
    parts = [mlp_block(h, gate_up, down)
             for gate_up, down in shard_mlp(layer["w_gate_up"], layer["w_down"], t)]
    return x + all_reduce(parts)
    ### END SOLUTION
