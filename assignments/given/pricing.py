"""The paper GPU's step price from precomputed constants (given, not graded).

``price`` is the dict of ``servelab.hw_model.price_constants(model, gpu)``: the tests build it
and hand it to your simulator, which calls :func:`step_time`. (Deriving those constants from a
model's shape is assignment 2's job.)
"""

from __future__ import annotations


def _priced(price: dict, amounts: dict) -> float:
    """``sum(price[name] * amount)`` over ``amounts``, added in their order."""
    return sum(price[name] * amount for name, amount in amounts.items())


def step_time(batch: list[tuple[int, int]], price: dict) -> float:
    """Seconds of one forward over ``batch = [(new_tokens, context_len), ...]``: what the
    forward does, counted over the batch, each count priced by one constant; the step takes the
    longer of its compute and its memory traffic, plus a fixed overhead (the roofline)."""
    tokens = keys = context = 0
    for n, c in batch:
        tokens += n
        keys += n * c + n * (n + 1) / 2  # causal (query, key) pairs
        context += c
    compute_s = _priced(price, {"matmul_flops_per_token": tokens, "lm_head_flops_per_seq": len(batch),
                                "attn_flops_per_key": keys}) / price["compute_rate"]
    memory_s = _priced(price, {"streamed_weight_bytes": 1, "embed_row_bytes": tokens,
                               "kv_bytes_per_token": context + tokens}) / price["memory_rate"]
    return max(compute_s, memory_s) + price["overhead_s"]
