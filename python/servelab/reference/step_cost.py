"""Pure-Python reference of the paper GPU's step cost (lecture §2.3, §3.2-§3.5).

Small and readable on purpose: this is what ``servelab._core`` (Rust) computes, written the way
a student would on paper. It is not the solution of an assignment (the roofline task asks for
other functions, other arguments and plain dicts; a submission that forwards every call to
``servelab.reference`` passes no task: ``autograder/tests/test_reference_is_no_solution.py``).
The Rust path must agree with it to 1e-9 relative and raise the same errors
(tests/test_cost_parity.py).

It accepts any object with the right attributes (``servelab.hw_model.ModelSpec`` and friends,
or a ``types.SimpleNamespace``), and does not validate on construction, so it can be handed
invalid specs to compare error handling with Rust.

>>> from servelab import hw_model
>>> s = step_cost(hw_model.LLAMA3_8B, hw_model.H100, hw_model.DEFAULT_EFFICIENCY, [(1, 512)])
>>> round(s.time_s * 1e3, 2)
6.13
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Sequence

from servelab.hw_model import StepCost

MAX_DIM = 1 << 24  # same bounds as rust/src/cost.rs
MAX_TOKENS = 1 << 40
MAX_STEP_TOKENS = 1 << 53  # a step's total new tokens: counts stay exact as floats

_DIMS = ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_head", "d_ff", "vocab_size")


# ---- validation (messages identical to the Rust core's) -------------------------------------

def _is_bool(v: Any) -> bool:
    return type(v).__name__ == "bool"  # Python's bool and numpy's bool_


def validate_model(m: Any) -> None:
    for field in _DIMS:
        v = getattr(m, field)
        if _is_bool(v) or not isinstance(v, numbers.Integral):
            raise TypeError(f"{field} must be an integer, got {v!r}")
        if not 1 <= int(v) <= MAX_DIM:
            raise ValueError(f"{field} must be a positive integer at most {MAX_DIM}, got {v}")
    if m.n_heads % m.n_kv_heads:
        raise ValueError("n_heads must be a multiple of n_kv_heads, "
                         f"got n_heads={m.n_heads} and n_kv_heads={m.n_kv_heads}")
    _positive_finite("bytes_per_param", m.bytes_per_param)


def validate_gpu(g: Any) -> None:
    for field in ("peak_flops", "hbm_bandwidth", "memory_bytes"):
        _positive_finite(field, getattr(g, field))


def validate_efficiency(e: Any) -> None:
    for field in ("compute", "bandwidth"):
        v = _real(f"efficiency.{field}", getattr(e, field))
        if not 0.0 < v <= 1.0:
            raise ValueError(f"efficiency.{field} must be in (0, 1], got {v!r}")
    v = _real("efficiency.overhead_s", e.overhead_s)
    if not (math.isfinite(v) and v >= 0.0):
        raise ValueError(f"efficiency.overhead_s must be a finite number >= 0, got {v!r}")


def _real(field: str, value: Any) -> float:
    if _is_bool(value) or not isinstance(value, numbers.Real):
        raise TypeError(f"{field} must be a real number, got {value!r}")
    return float(value)


def _positive_finite(field: str, value: Any) -> None:
    v = _real(field, value)
    if not (math.isfinite(v) and v > 0.0):
        raise ValueError(f"{field} must be a positive finite number, got {v!r}")


def _check_mem_util(mem_util: float) -> None:
    if not 0.0 < mem_util <= 1.0:
        raise ValueError(f"mem_util must be in (0, 1], got {float(mem_util)!r}")


# ---- the ledger (§2.4, §3.5, exercise 1) -----------------------------------------------------

def layer_matmul_params(m: Any) -> int:
    """Wq, Wk, Wv, Wo (K and V have only n_kv_heads heads: GQA) + SwiGLU gate, up, down."""
    q = m.n_heads * m.d_head
    kv = m.n_kv_heads * m.d_head
    return m.d_model * q + 2 * m.d_model * kv + q * m.d_model + 3 * m.d_model * m.d_ff


def param_count(m: Any) -> int:
    validate_model(m)
    embedding = m.vocab_size * m.d_model
    lm_head = 0 if m.tie_embeddings else embedding
    per_layer = layer_matmul_params(m) + 2 * m.d_model  # + two RMSNorm gains
    return m.n_layers * per_layer + m.d_model + embedding + lm_head  # + final norm


def weight_bytes(m: Any) -> float:
    return param_count(m) * float(m.bytes_per_param)


def kv_bytes_per_token(m: Any) -> float:
    validate_model(m)
    return 2 * m.n_layers * m.n_kv_heads * m.d_head * float(m.bytes_per_param)


def kv_capacity_tokens(m: Any, g: Any, mem_util: float = 0.9) -> int:
    validate_model(m)
    validate_gpu(g)
    _check_mem_util(mem_util)
    free = g.memory_bytes * mem_util - weight_bytes(m)
    if free <= 0:
        return 0
    tokens = math.floor(free / kv_bytes_per_token(m))
    if tokens >= 2**63:
        raise ValueError(f"memory_bytes={float(g.memory_bytes)!r} gives a KV capacity of "
                         f"{float(tokens)!r} tokens, past the 64-bit limit {2**63 - 1}")
    return tokens


def max_batch(m: Any, g: Any, context_len: int, mem_util: float = 0.9) -> int:
    if not 1 <= context_len <= MAX_TOKENS:
        raise ValueError(f"context_len must be an integer in [1, {MAX_TOKENS}], got {context_len}")
    return kv_capacity_tokens(m, g, mem_util) // context_len


# ---- one step (§3.2-§3.4) ---------------------------------------------------------------------

def step_cost(m: Any, g: Any, eff: Any, batch: Sequence[tuple[int, int]]) -> StepCost:
    """Roofline time of one forward over ``batch`` = ``[(new_tokens, context_len), ...]``."""
    validate_model(m)
    validate_gpu(g)
    validate_efficiency(eff)
    tokens = seqs = 0
    keys = 0.0  # attention (query, key) pairs summed over the batch
    ctx_tokens = 0.0
    for i, (n, c) in enumerate(batch):
        if not 1 <= n <= MAX_TOKENS:
            raise ValueError(f"batch[{i}].new_tokens must be an integer in [1, {MAX_TOKENS}], got {n}")
        if not 0 <= c <= MAX_TOKENS:
            raise ValueError(f"batch[{i}].context_len must be an integer in [0, {MAX_TOKENS}], got {c}")
        if tokens + n > MAX_STEP_TOKENS:
            raise ValueError(f"batch[{i}].new_tokens must keep the step's total at most "
                             f"{MAX_STEP_TOKENS} new tokens, got {n} on top of {tokens}")
        tokens += n
        seqs += 1
        keys += n * c + n * (n + 1) / 2  # causal: new token j attends to c + j keys
        ctx_tokens += c
    if seqs == 0:
        raise ValueError("batch must hold at least one sequence, got an empty batch")

    bpp = float(m.bytes_per_param)
    embedding = m.vocab_size * m.d_model
    flops = (2.0 * m.n_layers * layer_matmul_params(m) * tokens  # every matmul, every token
             + 2.0 * embedding * seqs  # LM head: last token of each sequence only
             + 4.0 * m.n_layers * m.n_heads * m.d_head * keys)  # QK^T and PV
    streamed = param_count(m) - (0 if m.tie_embeddings else embedding)
    weights = streamed * bpp + m.d_model * bpp * tokens  # + embedding rows looked up
    kv = kv_bytes_per_token(m) * (ctx_tokens + tokens)  # read every context, write new KV
    moved = weights + kv
    compute_s = flops / (eff.compute * g.peak_flops)
    memory_s = moved / (eff.bandwidth * g.hbm_bandwidth)
    time_s = max(compute_s, memory_s) + eff.overhead_s
    return StepCost(
        time_s=time_s, flops=flops, bytes_moved=moved, weight_bytes=weights, kv_bytes=kv,
        compute_s=compute_s, memory_s=memory_s,
        bound="compute" if compute_s > memory_s else "memory",
        mfu=flops / (time_s * g.peak_flops), intensity=flops / moved,
        n_tokens=tokens, n_seqs=seqs)
