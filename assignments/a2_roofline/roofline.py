"""Assignment 2: the roofline step cost (lecture §3.2-§3.5; exercises 2 and 7).

``model``, ``gpu`` and ``efficiency`` have the fields of ``servelab.hw_model``'s ``ModelSpec``,
``GpuSpec`` and ``Efficiency``; a batch is a list of ``(new_tokens, context_len)``. The counting
rules are in this folder's README. Check yourself with ``make check TASK=a2_roofline``.
"""

from __future__ import annotations


def ridge_point(gpu) -> float:
    """FLOP per byte at which the roofline bends (no efficiency discount). H100: about 295."""
    ### BEGIN SOLUTION
    return gpu.peak_flops / gpu.hbm_bandwidth
    ### END SOLUTION


def step_cost(model, gpu, batch, efficiency) -> dict:
    """One forward over ``batch``, priced by the README's counting rules: a dict of ``flops``,
    ``bytes_moved``, ``compute_s = flops / (compute x peak_flops)``, ``memory_s = bytes_moved /
    (bandwidth x hbm_bandwidth)``, ``time_s = max(compute_s, memory_s) + overhead_s`` and
    ``bound`` (``"compute"`` when ``compute_s > memory_s``, else ``"memory"``)."""
    ### BEGIN SOLUTION
    q, kv = model.n_heads * model.d_head, model.n_kv_heads * model.d_head
    layer_weights = 2 * model.d_model * q + 2 * model.d_model * kv + 3 * model.d_model * model.d_ff
    embedding = model.vocab_size * model.d_model
    all_weights = (model.n_layers * (layer_weights + 2 * model.d_model) + model.d_model + embedding
                   + (0 if model.tie_embeddings else embedding))
    streamed = all_weights - (0 if model.tie_embeddings else embedding)
    kv_per_token = 2 * model.n_layers * kv * model.bytes_per_param

    tokens = sum(n for n, _ in batch)
    keys = sum(n * c + n * (n + 1) / 2 for n, c in batch)
    context = sum(c for _, c in batch)
    flops = (2.0 * model.n_layers * layer_weights * tokens + 2.0 * embedding * len(batch)
             + 4.0 * model.n_layers * q * keys)
    bytes_moved = ((streamed + model.d_model * tokens) * model.bytes_per_param
                   + kv_per_token * (context + tokens))
    compute_s = flops / (efficiency.compute * gpu.peak_flops)
    memory_s = bytes_moved / (efficiency.bandwidth * gpu.hbm_bandwidth)
    return {"flops": flops, "bytes_moved": bytes_moved, "compute_s": compute_s, "memory_s": memory_s,
            "time_s": max(compute_s, memory_s) + efficiency.overhead_s,
            "bound": "compute" if compute_s > memory_s else "memory"}
    ### END SOLUTION


def prefill_crossover(model, gpu, efficiency) -> int:
    """The shortest prompt whose prefill (one sequence, empty cache) is compute-bound.

    A100-80GB and Llama-3-8B: memory-bound at 142 tokens, compute-bound at 145 (exercise 2b).
    Prefill cost grows with the prompt; search, do not loop over every length.
    """
    ### BEGIN SOLUTION
    def compute_bound(n: int) -> bool:
        return step_cost(model, gpu, [(n, 0)], efficiency)["bound"] == "compute"

    hi = 1
    while not compute_bound(hi):
        hi *= 2
    lo = hi // 2  # memory-bound (or 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if compute_bound(mid) else (mid, hi)
    return hi
    ### END SOLUTION


def decode_lower_bound_s(model, gpu) -> float:
    """The physical floor of a batch-1 decode step: every weight (all of them, embedding table
    included) streamed once at the full nominal bandwidth, no discount, no overhead (§3.3)."""
    ### BEGIN SOLUTION
    q, kv = model.n_heads * model.d_head, model.n_kv_heads * model.d_head
    layer = 2 * model.d_model * q + 2 * model.d_model * kv + 3 * model.d_model * model.d_ff + 2 * model.d_model
    embedding = model.vocab_size * model.d_model
    params = model.n_layers * layer + model.d_model + embedding * (1 if model.tie_embeddings else 2)
    return params * model.bytes_per_param / gpu.hbm_bandwidth
    ### END SOLUTION


def prefill_time_per_token(model, gpu, prompt_len: int, efficiency) -> float:
    """Seconds per prompt token of one prefill of ``prompt_len`` tokens (exercise 7a)."""
    ### BEGIN SOLUTION
    return step_cost(model, gpu, [(prompt_len, 0)], efficiency)["time_s"] / prompt_len
    ### END SOLUTION


def decode_time_per_token(model, gpu, batch_size: int, context_len: int, efficiency) -> float:
    """Seconds per output token of one decode step of ``batch_size`` sequences, each with
    ``context_len`` cached tokens (exercise 7b)."""
    ### BEGIN SOLUTION
    return step_cost(model, gpu, [(1, context_len)] * batch_size, efficiency)["time_s"] / batch_size
    ### END SOLUTION
