"""Step-cost throughput: the vectorised Rust path vs the pure-Python reference (one step at a
time) vs a numpy-vectorised Python version, on the same random steps.

All three must agree (checked before timing); the printed ratios come from one run, side by
side, because absolute times on a shared machine drift.
"""

from __future__ import annotations


import numpy as np
from rich.console import Console
from rich.table import Table

from benchmarks.timing import best_of
from servelab import hw_model as hw
from servelab.reference import step_cost as ref

MODEL, GPU, EFF = hw.LLAMA3_8B, hw.H100, hw.DEFAULT_EFFICIENCY


def random_steps(n_steps: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n_steps`` batches of 1-8 sequences, mixing decode (1 token) and prefill chunks."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 9, n_steps)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n_seqs = int(offsets[-1])
    prefill = rng.random(n_seqs) < 0.2
    new_tokens = np.where(prefill, rng.integers(1, 4096, n_seqs), 1).astype(np.int64)
    context = rng.integers(0, 8192, n_seqs).astype(np.int64)
    return new_tokens, context, offsets


def numpy_step_costs(new_tokens: np.ndarray, context: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The same formulas as the reference, vectorised with numpy (returns step times)."""
    m = MODEL
    n, c = new_tokens.astype(np.float64), context.astype(np.float64)
    starts = offsets[:-1]
    tokens = np.add.reduceat(n, starts)
    seqs = np.diff(offsets).astype(np.float64)
    keys = np.add.reduceat(n * c + n * (n + 1) / 2, starts)
    ctx = np.add.reduceat(c, starts)
    embedding = m.vocab_size * m.d_model
    flops = (2.0 * m.n_layers * ref.layer_matmul_params(m) * tokens + 2.0 * embedding * seqs
             + 4.0 * m.n_layers * m.n_heads * m.d_head * keys)
    streamed = (m.param_count - embedding) * m.bytes_per_param
    moved = streamed + m.d_model * m.bytes_per_param * tokens + m.kv_bytes_per_token * (ctx + tokens)
    return np.maximum(flops / (EFF.compute * GPU.peak_flops),
                      moved / (EFF.bandwidth * GPU.hbm_bandwidth)) + EFF.overhead_s


def python_step_costs(new_tokens: np.ndarray, context: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    n, c, o = new_tokens.tolist(), context.tolist(), offsets.tolist()
    return np.array([ref.step_cost(MODEL, GPU, EFF, list(zip(n[o[s]:o[s + 1]], c[o[s]:o[s + 1]]))).time_s
                     for s in range(len(o) - 1)])


def rust_step_costs(new_tokens: np.ndarray, context: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    return hw.step_cost_many(MODEL, GPU, new_tokens, context, offsets, EFF).time_s




def run(console: Console, quick: bool = False) -> None:
    n_steps = 20_000 if quick else 1_000_000
    steps = random_steps(n_steps)
    console.print(f"{n_steps:,} random steps ({int(steps[2][-1]):,} sequences), Llama-3-8B on H100")
    t_rust, rust = best_of(lambda: rust_step_costs(*steps), 5)
    t_two, two = best_of(lambda: hw.step_cost_many(MODEL, GPU, *steps, EFF, columns=["time_s", "flops"]), 5)
    t_np, numpy_ = best_of(lambda: numpy_step_costs(*steps), 3)
    assert np.array_equal(two["time_s"], rust), "columns=[...] changed the answer"
    out = {"time_s": np.empty(n_steps), "flops": np.empty(n_steps)}  # reused by every call
    t_into, _ = best_of(lambda: hw.step_cost_many(MODEL, GPU, *steps, EFF, out=out), 5)
    assert np.array_equal(out["time_s"], rust) and np.array_equal(out["flops"], two["flops"]), "out= differs"
    t_py, python = best_of(lambda: python_step_costs(*steps), 1)  # tens of seconds: once is enough
    assert np.allclose(rust, python, rtol=1e-9, atol=0), "Rust and the reference disagree"
    assert np.allclose(numpy_, python, rtol=1e-9, atol=0), "numpy and the reference disagree"
    t = Table(title="step cost: same steps, same answers")
    for col in ("implementation", "seconds", "steps/s", "time / full Rust call"):
        t.add_column(col, justify="right")
    for name, secs in (("Rust, vectorised (servelab._core)", t_rust),
                       ("Rust, columns=['time_s', 'flops']", t_two),
                       ("Rust, the same into the caller's arrays (out=)", t_into),
                       ("numpy, vectorised", t_np),
                       ("pure Python reference, one step at a time", t_py)):
        t.add_row(name, f"{secs:.3f}", f"{n_steps / secs:,.0f}", f"{secs / t_rust:.2f}x")
    console.print(t)
    console.print(f"   Two columns of ten: {t_rust / t_two:.1f}x faster than all ten in fresh arrays, "
                  f"{t_rust / t_into:.1f}x into arrays the caller reuses (out=). A full call's extra time is mostly "
                  "the fresh memory pages of the columns it writes, so the gain grows with the number of steps.")
