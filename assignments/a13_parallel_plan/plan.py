"""Assignment 13: tensor parallelism on the paper GPU, and a parallel plan (lecture §8.1,
milestone 1). The story and the formulas are in this folder's README.
Check yourself with ``make check TASK=a13_parallel_plan``.

``c`` is ``servelab.hw_model.price_constants(model, gpu)``: the one-card step price as plain
numbers. ``model`` and ``gpu`` arrive as namespaces of their fields (``model.n_layers``,
``gpu.link_bandwidth``, ...).
"""

from __future__ import annotations


def valid_tp(model, tp: int) -> bool:
    """Can ``model`` be split across ``tp`` cards? ``tp`` divides ``n_heads`` and ``d_ff``, and
    ``tp`` and ``n_kv_heads`` divide one another."""
    ### BEGIN SOLUTION
    kv = model.n_kv_heads
    return (tp >= 1 and model.n_heads % tp == 0 and model.d_ff % tp == 0
            and (kv % tp == 0 or tp % kv == 0))
    ### END SOLUTION


def allreduce_s(link_bandwidth: float, link_latency_s: float, tp: int, n_bytes: float) -> float:
    """A ring all-reduce: ``2 (tp-1)/tp * n_bytes / link_bandwidth + 2 (tp-1) * latency``."""
    ### BEGIN SOLUTION
    if tp == 1:
        return 0.0
    return 2 * (tp - 1) / tp * n_bytes / link_bandwidth + 2 * (tp - 1) * link_latency_s
    ### END SOLUTION


def kv_capacity_tokens(memory_bytes: float, mem_util: float, weight_bytes: float,
                       kv_bytes_per_token: float, n_kv_heads: int, tp: int) -> int:
    """Tokens of KV per replica of ``tp`` cards: each card holds ``weight_bytes / tp`` and
    ``kv_bytes_per_token / min(tp, n_kv_heads)`` per token; 0 when the weights do not fit."""
    ### BEGIN SOLUTION
    free = memory_bytes * mem_util - weight_bytes / tp
    per_token = kv_bytes_per_token / min(tp, n_kv_heads)
    return max(0, int(free // per_token))
    ### END SOLUTION


def tp_decode_step_s(c: dict, model, gpu, tp: int, batch: int, context_len: int) -> float:
    """One decode step of ``batch`` sequences at ``context_len`` on ``tp`` cards, per card:
    ``max(F / compute_rate, M / memory_rate) + 2 n_layers allreduce + overhead_s`` (F and M:
    README)."""
    ### BEGIN SOLUTION
    tokens = batch
    keys = batch * (context_len + 1)  # each new token attends its context and itself
    flops = (c["matmul_flops_per_token"] * tokens + c["lm_head_flops_per_seq"] * batch
             + c["attn_flops_per_key"] * keys) / tp
    rows = c["embed_row_bytes"] * tokens  # looked up on every card
    kv = c["kv_bytes_per_token"] * (batch * context_len + tokens) / min(tp, model.n_kv_heads)
    moved = c["streamed_weight_bytes"] / tp + rows + kv
    comm = 2 * model.n_layers * allreduce_s(gpu.link_bandwidth, gpu.link_latency_s, tp,
                                            tokens * model.d_model * model.bytes_per_param)
    return max(flops / c["compute_rate"], moved / c["memory_rate"]) + comm + c["overhead_s"]
    ### END SOLUTION


def best_decode_plan(c: dict, model, gpu, weight_bytes: float, n_cards: int, context_len: int,
                     tpot_slo_s: float, mem_util: float):
    """``(tp, dp, batch)`` with the most tokens per second over all ``n_cards`` (narrower tp on
    a tie), or ``None`` when no split meets the objective (README)."""
    ### BEGIN SOLUTION
    best, best_key = None, None
    for tp in range(1, n_cards + 1):
        if n_cards % tp or not valid_tp(model, tp):
            continue
        most = kv_capacity_tokens(gpu.memory_bytes, mem_util, weight_bytes,
                                  c["kv_bytes_per_token"], model.n_kv_heads, tp) // context_len
        if most < 1 or tp_decode_step_s(c, model, gpu, tp, 1, context_len) > tpot_slo_s:
            continue
        lo, hi = 1, most
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if tp_decode_step_s(c, model, gpu, tp, mid, context_len) <= tpot_slo_s:
                lo = mid
            else:
                hi = mid - 1
        dp = n_cards // tp
        key = (dp * lo / tp_decode_step_s(c, model, gpu, tp, lo, context_len), -tp)
        if best_key is None or key > best_key:
            best, best_key = (tp, dp, lo), key
    return best
    ### END SOLUTION
