"""The paper GPU's step price from precomputed constants (given, not graded).

``price`` is the dict of ``servelab.hw_model.price_constants(model, gpu)``: the tests build it
and hand it to your simulator, which calls :func:`step_time`. (Deriving those constants from a
model's shape is assignment 2's job.)
"""

from __future__ import annotations


def step_time(batch: list[tuple[int, int]], price: dict) -> float:
    """Seconds of one forward over ``batch = [(new_tokens, context_len), ...]``."""
    tokens = sum(n for n, _ in batch)
    keys = sum(n * c + n * (n + 1) / 2 for n, c in batch)  # causal (query, key) pairs
    context = sum(c for _, c in batch)
    flops = (price["matmul_flops_per_token"] * tokens + price["lm_head_flops_per_seq"] * len(batch)
             + price["attn_flops_per_key"] * keys)
    moved = (price["streamed_weight_bytes"] + price["embed_row_bytes"] * tokens
             + price["kv_bytes_per_token"] * (context + tokens))
    return max(flops / price["compute_rate"], moved / price["memory_rate"]) + price["overhead_s"]
