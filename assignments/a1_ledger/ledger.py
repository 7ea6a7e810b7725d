"""Assignment 1: the model ledger (lecture §2.4, §3.5; exercises 1 and 3).

``model`` is a ``servelab.hw_model.ModelSpec``, ``gpu`` a ``GpuSpec`` (their fields: this
folder's README). Check yourself with ``make check TASK=a1_ledger``.
"""

from __future__ import annotations

import math


def param_count(model) -> int:
    """Every parameter of a Llama-style model: per layer the four attention matrices (with
    grouped-query attention, K and V have only ``n_kv_heads`` heads), the three SwiGLU matrices
    and two RMSNorm gain vectors; then one final norm, the embedding table, and the LM head
    (which is the embedding table itself when ``tie_embeddings`` is true).

    Llama-3-8B has 8,030,261,248.
    """
    ### BEGIN SOLUTION
    q = model.n_heads * model.d_head
    kv = model.n_kv_heads * model.d_head
    attention = model.d_model * q + 2 * model.d_model * kv + q * model.d_model
    mlp = 3 * model.d_model * model.d_ff
    per_layer = attention + mlp + 2 * model.d_model
    embedding = model.vocab_size * model.d_model
    lm_head = 0 if model.tie_embeddings else embedding
    return model.n_layers * per_layer + model.d_model + embedding + lm_head
    ### END SOLUTION


def weight_bytes(model) -> float:
    """Bytes of all weights at ``model.bytes_per_param`` bytes each (BF16 = 2)."""
    ### BEGIN SOLUTION
    return param_count(model) * model.bytes_per_param
    ### END SOLUTION


def kv_bytes_per_token(model) -> float:
    """KV cache bytes one token occupies: K and V, in every layer, for every KV head."""
    ### BEGIN SOLUTION
    return 2 * model.n_layers * model.n_kv_heads * model.d_head * model.bytes_per_param
    ### END SOLUTION


def kv_capacity_tokens(model, gpu, mem_util: float = 0.9) -> int:
    """Whole tokens of KV cache that fit in ``mem_util`` of the GPU's memory once the weights
    are loaded; 0 (never negative) when the weights alone do not fit."""
    ### BEGIN SOLUTION
    free = gpu.memory_bytes * mem_util - weight_bytes(model)
    return 0 if free <= 0 else math.floor(free / kv_bytes_per_token(model))
    ### END SOLUTION


def max_batch(model, gpu, context_len: int, mem_util: float = 0.9) -> int:
    """Most sequences of ``context_len`` tokens whose KV caches fit at the same time."""
    ### BEGIN SOLUTION
    return kv_capacity_tokens(model, gpu, mem_util) // context_len
    ### END SOLUTION


def fits(model, gpu, mem_util: float = 0.9) -> bool:
    """Do the weights alone fit in ``mem_util`` of the GPU's memory? (exercise 1d)"""
    ### BEGIN SOLUTION
    return weight_bytes(model) < gpu.memory_bytes * mem_util
    ### END SOLUTION
